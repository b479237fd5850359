"""What the deployment tests share: the settings' environment names, the code's entry points, the tools."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import AliasChoices

from docsum_chunker.settings import ChunkerSettings
from docsum_gateway.settings import GatewaySettings
from docsum_merger.settings import MergerSettings
from docsum_parser.settings import ParserSettings
from docsum_shared import health
from docsum_shared.settings import Settings
from docsum_summarizer.settings import SummarizerSettings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
TOOLS = ROOT / ".run" / "tools"
# Each service's settings class: what its process reads from the environment.
SERVICE_SETTINGS: dict[str, type[Settings]] = {
    "parser": ParserSettings,
    "chunker": ChunkerSettings,
    "summarizer": SummarizerSettings,
    "merger": MergerSettings,
    "gateway": GatewaySettings,
}


def setting_env_names() -> set[str]:
    """Every environment variable a setting reads (the shared settings and each service's, aliases included)."""
    names: set[str] = set()
    models: list[type[Settings]] = [Settings, *SERVICE_SETTINGS.values()]
    for model in models:
        prefix = model.model_config.get("env_prefix", "")
        for field, info in model.model_fields.items():
            alias = info.validation_alias
            if isinstance(alias, AliasChoices):
                names.update(c for c in alias.choices if isinstance(c, str))
            elif isinstance(alias, str):
                names.add(alias)
            else:
                names.add(f"{prefix}{field}".upper())
    return names


def clean_env() -> dict[str, str]:
    """The environment without any docsum or Kafka/database setting: what the committed files assume."""
    return {k: v for k, v in os.environ.items() if k not in setting_env_names() and not k.startswith("DOCSUM_")}


def entry_point_exists(module: str) -> bool:
    """`python -m module` runs something of ours: the module (or its package's __main__) is there."""
    spec = importlib.util.find_spec(module)
    if spec is None:
        return False
    if spec.submodule_search_locations is not None:  # a package: -m runs its __main__
        return importlib.util.find_spec(f"{module}.__main__") is not None
    return True


def python_module_of(command: list[str]) -> str | None:
    """`python -m X ...` → X; another command → None."""
    if len(command) >= 3 and Path(command[0]).name.startswith("python") and command[1] == "-m":
        return command[2]
    return None


def health_paths_served() -> dict[str, int]:
    """The status health.app answers for each probe path (ready: PostgreSQL and the group are fine)."""

    async def ready() -> str | None:
        return None

    app = health.app(ready)

    async def status(path: str) -> int:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": path, "query_string": b"", "headers": [], "root_path": ""}
        await app(scope, receive, send)
        return next(m["status"] for m in sent if m["type"] == "http.response.start")

    async def all_paths() -> dict[str, int]:
        return {p: await status(p) for p in ("/healthz", "/readyz", "/metrics", "/nope")}

    return asyncio.run(all_paths())


def gateway_api_paths() -> set[str]:
    """The paths the gateway's API port serves (its FastAPI routes)."""
    from docsum_gateway.app import create_app

    app = create_app(GatewaySettings(api_keys="probe=probe-key-0123456789abcdef"))
    return {getattr(route, "path", "") for route in app.routes}


def require_tool(name: str, install: str) -> str:
    """The tool's path; fails (not skips) when it is missing: `make test` installs it."""
    path = TOOLS / name if (TOOLS / name).exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run {install} (make test does)")
    return str(path)


def run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT, **kwargs)
