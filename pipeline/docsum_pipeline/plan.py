"""The plan: the pipeline's stages, in the order a document goes through them.

The gateway takes documents in (and records every step for its clients), the parser extracts their
text, the chunker cuts it, the summarizer summarizes each chunk, the merger merges the summaries and
finishes the task. Each stage is its service's `STAGE` (docsum_<service>/stage.py); the plan sits above
the services and below whoever runs or documents the whole pipeline: the runners (the Kafka one is each
service's `__main__`, the in-process one is `inprocess.py`), the contract's topic table, the evaluation
and the bench. No service imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from docsum_chunker.stage import STAGE as CHUNKER
from docsum_gateway.app import serving
from docsum_gateway.stage import STAGE as GATEWAY
from docsum_merger.stage import STAGE as MERGER
from docsum_parser.stage import STAGE as PARSER
from docsum_shared.stage import Attach, Stage
from docsum_summarizer.stage import STAGE as SUMMARIZER

STAGES: tuple[Stage[Any, Any], ...] = (GATEWAY, PARSER, CHUNKER, SUMMARIZER, MERGER)

# What a stage serves to users, given its settings and how it reaches the rest of the pipeline (Attach):
# its server's uvicorn.Config. The gateway's application wires the gateway's stage (its progress
# recorder) itself, so the stage cannot name it: the plan does. A stage with a front runs inside it.
FRONTS: dict[str, Callable[[Any, Attach], Any]] = {GATEWAY.name: serving}


def stages() -> list[Stage[Any, Any]]:
    """Every stage of the pipeline, in order."""
    return list(STAGES)
