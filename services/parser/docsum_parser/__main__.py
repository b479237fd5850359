"""The parser service: serves its stage of the pipeline (stage.py; the handler is in handlers.py)."""

from __future__ import annotations

from docsum_shared.consumer import run_service
from docsum_shared.stage import serve_stage

from .stage import STAGE


def main() -> None:
    run_service(lambda stop: serve_stage(STAGE, stop))


if __name__ == "__main__":
    main()
