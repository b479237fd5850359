"""The services' shipped environment has every module they import.

The image installs the five services from uv.lock without the development group (deploy/Dockerfile);
the development environment has much more (test tools and what they pull in), so a module imported
without being declared works in every test and fails in the image. Here the environment is built with
the image's dependencies (tests/shipped.py), and every module of every service package is imported in it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.shipped import SERVICES, shipped_environment

PACKAGES = ("docsum_shared", *(f"docsum_{name}" for name in SERVICES))
# Development tools inside the packages, which no service imports: `make contracts` writes contracts/
# with this one (and the development environment's PyYAML).
DEVELOPMENT_ONLY = ("docsum_shared.contracts",)

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


def test_every_module_of_every_service_imports_in_the_shipped_environment(tmp_path: Path) -> None:
    python = shipped_environment(tmp_path / "venv")
    script = IMPORT_ALL.replace("{skip!r}", repr(set(DEVELOPMENT_ONLY)))
    done = subprocess.run([python, "-c", script, *PACKAGES], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, f"modules that do not import as shipped:\n{done.stdout}{done.stderr}"
