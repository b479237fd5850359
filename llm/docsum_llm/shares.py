"""Owners' shares of a deployment's LLM calls: each owner's counter of the tokens it was served, over its
weight (`owner_shares`), which the summarizer's admission serves owners by, lowest first.

A chunk is charged by the admission that gives it its slot, and its charge corrected from its answer's
usage (docsum_summarizer). The merger's calls take no slot: a document's merges and a task's are
charged as they are answered, with their lines in the ledger. Otherwise work split over many tasks,
each with merges of its own, would be served more than the same work in one task, by what its merges
cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# A completion token costs the provider (and the wait of everyone else) about twice an input token: the
# weights the VTC paper uses for input and output.
OUTPUT_WEIGHT = 2


def served_tokens(prompt_tokens: int, completion_tokens: int) -> int:
    """What a call costs its owner's counter, from the provider's usage."""
    return prompt_tokens + OUTPUT_WEIGHT * completion_tokens


@dataclass(frozen=True)
class OwnerShares:
    """Who is charged for the calls made through one LLM port: the owners of one deployment (the topic
    prefix: deployments sharing a database keep their counters apart), each charge divided by the
    owner's weight (DOCSUM_OWNER_WEIGHTS, 1 when not listed). The charge is written with the call's
    line in the ledger, in one statement (cache.ResultCache.store): once, whatever crashes."""

    deployment: str
    weights: Mapping[str, float] = field(default_factory=dict)

    def charge(self, owner: str, prompt_tokens: int, completion_tokens: int) -> float:
        """What a paid call adds to its owner's counter."""
        return served_tokens(prompt_tokens, completion_tokens) / self.weights.get(owner, 1.0)
