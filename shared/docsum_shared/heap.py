"""A service process's heap: what it imported before serving is left out of the cyclic collector's rounds.

A service's heap is mostly the modules it imports before it serves (the openai client's, pydantic's,
aiokafka's, asyncpg's: about 120,000 objects in the summarizer), and they live as long as the process.
CPython's full collection traverses every tracked object: 115 ms in the summarizer, met in the middle of
B1's task of 1.9 s, while no answer was read and no call was sent. Frozen once imported (`gc.freeze`), they
are left out of every later collection; what the service allocates while it serves is collected as before.

Only a process's entry point calls this: a test or a bench that runs stages in its own process, and stops
them again, would keep every cycle of theirs that was frozen.
"""

from __future__ import annotations

import gc


def freeze_imports() -> None:
    """Collect once, then move every object still alive (the modules imported, their classes, functions
    and constants) to the permanent generation, which no collection traverses."""
    gc.collect()
    gc.freeze()
