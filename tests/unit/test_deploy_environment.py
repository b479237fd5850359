"""The services' shipped environment has every module they import.

The image installs the five services from uv.lock without the development group (deploy/Dockerfile);
the development environment has much more (test tools and what they pull in), so a module imported
without being declared works in every test and fails in the image. Here the environment is built with
the image's dependencies (tests/shipped.py), and every module of every service package is imported in it.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from tests.shipped import SERVICES, shipped_environment

PACKAGES = ("docsum_shared", "docsum_llm", *(f"docsum_{name}" for name in SERVICES))
# Development tools inside the packages, which no service imports: `make contracts` writes contracts/
# with this one (and the development environment's PyYAML).
DEVELOPMENT_ONLY: tuple[str, ...] = ()

IMPORT_ALL = """
import importlib, pkgutil, sys
failed = []
for name in sys.argv[1:]:
    package = importlib.import_module(name)
    for module in pkgutil.walk_packages(package.__path__, name + "."):
        if module.name.endswith("__main__") or module.name in {skip!r}:
            continue  # runs the service; a development tool
        try:
            importlib.import_module(module.name)
        except ImportError as exc:
            failed.append(f"{module.name}: {exc}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shipped_environment(tmp_path_factory.mktemp("shipped") / "venv")


def test_every_module_of_every_service_imports_in_the_shipped_environment(python: Path, tmp_path: Path) -> None:
    script = IMPORT_ALL.replace("{skip!r}", repr(set(DEVELOPMENT_ONLY)))
    done = subprocess.run([python, "-c", script, *PACKAGES], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, f"modules that do not import as shipped:\n{done.stdout}{done.stderr}"


EXPORT_ONE_SPAN = """
from docsum_shared import telemetry
from opentelemetry import trace
assert telemetry.setup("gateway"), "no tracing in the shipped environment"
with trace.get_tracer("check").start_as_current_span("exported-from-the-image"):
    pass
trace.get_tracer_provider().force_flush()
"""


@pytest.fixture
def collector() -> Iterator[tuple[str, list[bytes]]]:
    """An OTLP/HTTP endpoint that keeps what it is sent to /v1/traces."""
    received: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces":
                received.append(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", received
    server.shutdown()


def test_the_shipped_environment_exports_traces(python: Path, collector: tuple[str, list[bytes]]) -> None:
    """The image has the otel extra: set OTEL_EXPORTER_OTLP_ENDPOINT and a service's spans leave it."""
    endpoint, received = collector
    env = {"PATH": "/usr/bin:/bin", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
    done = subprocess.run([python, "-c", EXPORT_ONE_SPAN], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert any(b"exported-from-the-image" in body for body in received), received
