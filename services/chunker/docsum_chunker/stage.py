"""The chunker's stage of the pipeline: document-parsed in, the document's chunks stored and announced."""

from __future__ import annotations

import asyncpg

from docsum_shared.stage import Stage

from .handlers import Deps, handlers
from .repository import ChunkRepository
from .settings import ChunkerSettings


def deps(settings: ChunkerSettings, pool: asyncpg.Pool) -> Deps:
    return Deps(ChunkRepository(pool, settings), settings)


STAGE = Stage("chunker", ChunkerSettings, handlers, deps)
