"""The plan: the pipeline's stages, in the order a document goes through them.

The gateway takes documents in (and records every step for its clients), the parser extracts their
text, the chunker cuts it, the summarizer summarizes each chunk, the merger merges the summaries and
finishes the task. Each stage is its service's `STAGE` (docsum_<service>/stage.py), named here by
module: the shared package never imports a service, and a service never imports another; whoever
runs or documents the whole pipeline (the contract's topic table, a runner) reads it from here.
"""

from __future__ import annotations

import importlib
from typing import Any

from .stage import Stage

STAGES = (
    "docsum_gateway.stage",
    "docsum_parser.stage",
    "docsum_chunker.stage",
    "docsum_summarizer.stage",
    "docsum_merger.stage",
)


def stages() -> list[Stage[Any, Any]]:
    """Every stage of the pipeline, in order."""
    found = []
    for module in STAGES:
        stage = importlib.import_module(module).STAGE
        if not isinstance(stage, Stage):
            raise TypeError(f"{module}.STAGE is not a Stage")
        found.append(stage)
    return found
