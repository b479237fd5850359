"""The chunker's settings: the shared ones, the size levels, the LLM's (to plan a task's calls and hold it
for approval), and how it cuts a document."""

from __future__ import annotations

from pydantic import Field

from docsum_shared.settings import LLMSettings, SizeSettings


class ChunkerSettings(SizeSettings, LLMSettings):
    chunk_chars: int = Field(2_000, ge=200)
    overlap_chars: int = Field(200, ge=0)
    context_after_chars: int = Field(200, ge=0)
    # A document cut into more chunks than this FAILS (counted before any is stored), with a message naming it.
    max_chunks_per_document: int = Field(3_000, ge=1)
