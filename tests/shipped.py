"""The services' environment as the image ships it: their own dependencies only, from uv.lock.

deploy/Dockerfile installs the five services without the development group; this builds the same set
into a virtual environment of its own (our packages editable, so the code is the tree's). The bench
runs the services in it, and tests/unit/test_deploy_environment.py imports every module in it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("gateway", "parser", "chunker", "summarizer", "merger")


def shipped_environment(venv: Path) -> Path:
    """Create (or bring up to date) `venv` with the image's dependencies; its python."""
    uv = os.environ.get("UV") or shutil.which("uv") or str(ROOT / ".run" / "bootstrap" / "bin" / "uv")
    packages = [arg for name in SERVICES for arg in ("--package", f"docsum-{name}")]
    subprocess.run(
        [uv, "sync", "--locked", "--no-dev", "--quiet", *packages],
        cwd=ROOT, env={**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}, check=True,
    )  # fmt: skip
    return venv / "bin" / "python"
