"""The services' environment as the image ships it: their own dependencies only, from uv.lock.

deploy/Dockerfile installs the five services (and the tracing extra) without the development group; this
builds the same selection, read from the Dockerfile, into a virtual environment of its own (our packages
editable, so the code is the tree's). The bench
runs the services in it, and tests/unit/test_deploy_environment.py imports every module in it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("gateway", "parser", "chunker", "summarizer", "merger")


def image_selection() -> list[str]:
    """What deploy/Dockerfile's `uv sync` installs (its ARG PACKAGES): packages and extras."""
    found = re.search(r'^ARG PACKAGES="([^"]+)"$', (ROOT / "deploy" / "Dockerfile").read_text(), re.MULTILINE)
    assert found, "deploy/Dockerfile has no ARG PACKAGES line"
    return shlex.split(found[1])


def shipped_environment(venv: Path) -> Path:
    """Create (or bring up to date) `venv` with the image's dependencies; its python."""
    uv = os.environ.get("UV") or shutil.which("uv") or str(ROOT / ".run" / "bootstrap" / "bin" / "uv")
    packages = image_selection()
    subprocess.run(
        [uv, "sync", "--locked", "--no-dev", "--quiet", *packages],
        cwd=ROOT, env={**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}, check=True,
    )  # fmt: skip
    return venv / "bin" / "python"
