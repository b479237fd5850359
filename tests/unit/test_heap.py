"""A service process leaves what it imported out of the collector's rounds (docsum_shared.heap)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import asyncio, gc, json
    import docsum_summarizer.stage  # a service's imports: the openai client's, pydantic's, aiokafka's
    from docsum_shared.consumer import run_service

    before = len(gc.get_objects())

    async def main(stop: asyncio.Event) -> None:
        print(json.dumps({"before": before, "frozen": gc.get_freeze_count()}))

    run_service(main)
    """
)


def test_a_service_process_freezes_its_imports_before_it_serves() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    # Every object alive once imported is frozen (a collection first frees the garbage of the imports).
    assert seen["before"] > 50_000 and seen["frozen"] >= 0.9 * seen["before"], seen
