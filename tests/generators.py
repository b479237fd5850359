"""The repository's generators (contracts/generate.py), loaded as modules for the tests that check them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def contracts() -> ModuleType:
    """contracts/generate.py, imported once (its dataclasses need a module of their own in sys.modules)."""
    name = "docsum_contracts_generate"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "contracts" / "generate.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
