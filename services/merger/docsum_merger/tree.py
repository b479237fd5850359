"""Hierarchical merging: summaries that do not fit the model's input budget are merged in groups.

Each level merges consecutive groups that fit, side by side, and stores every group's result (a
merge node); the results are merged the same way, level by level, until one request fits. Where a
group ends is chosen by its texts (`groups.groups_by_content`), so a document edited in one place is
merged again only along that place's path up the tree: every other node's request is answered from
the cache. A crash costs at most the nodes in flight: every finished node's request is answered from the result cache
on the way back up. It always ends: a level that cannot pair any two texts is trimmed to fit in one
request. A refusal as too long lowers the endpoint's budget and the merge is planned again under it.

Each node's sentences take their sources from the sentences of the texts it merged
(`citations.merged_sentences`), so the top's sentences resolve down to ranges of the documents. An
answer from the cache keeps its sentences: a resumed tree maps them as the first run did.

A new version of a document is merged in the previous version's groups wherever its texts are the
same (`previous_groups`, from the nodes stored for it): only the groups an edit touched are merged again.

A request the model answers with one of its texts copied (AnsweredWithInput: small local models do, at
any length asked) is not asked again: at temperature 0 the same prompt gets the same copy. It is made
extractively instead (`QUOTE`), from its texts' own sentences, so its citations hold; the merge counts
it (`Merged.quoted`) and the summary says so (`Merged.note`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from docsum_llm.base import SummaryRequest, SummaryResult
from docsum_llm.budget import TokenCalibration, fits, next_level, part_of, trim_to_fit
from docsum_llm.cache import CallContext
from docsum_llm.citations import merged_sentences
from docsum_llm.extractive import ExtractiveBackend
from docsum_shared import metrics
from docsum_shared.cited import without_unsupported
from docsum_shared.errors import AnsweredWithInput, ContextLimitExceeded, ItemFailed

from .groups import groups_by_content
from .policy import Cited

log = logging.getLogger("docsum_merger")

# Each refusal lowers the budget, so this only bounds a provider that refuses whatever it is sent.
MAX_REPLANS = 8
# What makes a merge the model answered with its input copied: it quotes the texts' best sentences.
QUOTE = ExtractiveBackend()


@dataclass(frozen=True)
class MergeNode:
    """One answered request of a hierarchical merge: a group of a level, or the last request above them."""

    scope_id: str  # the document (or task) being merged
    level: int
    position: int
    inputs: int  # how many texts the group merged
    cache_key: str  # where its answer is in the result cache
    summary: str
    sentences: Cited = None


@dataclass(frozen=True)
class Merged:
    """A merge's outcome as stored: its summary, and the summary's sentences with their sources."""

    text: str
    model: str
    truncated: bool = False
    sentences: Cited = None
    quoted: int = 0  # requests made extractively, the model having answered them with their input copied

    def note(self) -> str:
        """What a summary made partly of quotes says about itself (after its sentences: none cites it)."""
        if not self.quoted:
            return ""
        merges = "a merge" if self.quoted == 1 else f"{self.quoted} merges"
        return (
            f"\n\n[Partly quoted: the model answered {merges} of this summary with its input copied, so "
            f"{'that merge quotes' if self.quoted == 1 else 'those merges quote'} the best sentences of "
            "the summaries it merges instead.]"
        )


def cited(result: SummaryResult, children: Sequence[Cited]) -> Cited:
    """`result`'s sentences with the sources of the sentences of the texts it merged (`children[i]`: of
    text i); None when the backend did not say where its sentences come from. A text whose sentences
    are not known gives none: what rests on it is a synthesis without sources."""
    if not result.sentences and result.text:
        return None
    return merged_sentences(result, [c or () for c in children])


def previous_groups(texts: Sequence[str], nodes: Sequence[tuple[int, int, str]]) -> list[tuple[str, ...]]:
    """The groups, as their texts, of the tree a merge of `texts` made, from its stored nodes' (inputs,
    level, summary) in order of level and position: each level's groups take their inputs' counts of
    the texts in turn, and their summaries are the next level's texts. It stops at a level whose counts
    do not add up to its texts (a node left from a plan made again under a lower budget)."""
    groups: list[tuple[str, ...]] = []
    above: list[str] = []
    level_texts, level, taken = list(texts), 0, 0
    for inputs, node_level, summary in nodes:
        if node_level != level:
            if taken != len(level_texts) or node_level != level + 1:
                return groups
            level_texts, level, taken, above = above, node_level, 0, []
        if taken + inputs > len(level_texts):
            return groups
        groups.append(tuple(level_texts[taken : taken + inputs]))
        taken += inputs
        above.append(summary)
    return groups


class Nodes(Protocol):
    """Where a merge keeps its nodes (the merger's repository). Each is stored as soon as it is made,
    not at the merge's end: a re-drive counts them as progress while the merge runs. A node stored
    again at its place (the merge planned again under a lower budget) replaces the one before."""

    async def store_node(self, node: MergeNode) -> None: ...


class LLM(Protocol):
    """What a merge needs of the LLM port (docsum_llm.Summarizing)."""

    calibration: TokenCalibration

    @property
    def model(self) -> str: ...
    async def budget(self) -> int | None: ...
    async def summarize(
        self, request: SummaryRequest, context: CallContext | None = None
    ) -> tuple[SummaryResult, bool]: ...
    async def learn(self, refusal: ContextLimitExceeded, request: SummaryRequest) -> bool: ...
    async def bounded(self, request: SummaryRequest) -> SummaryRequest: ...
    def describe_budget(self) -> str: ...
    def cache_key(self, request: SummaryRequest, context: CallContext) -> str: ...


class _Refused(Exception):
    """A part refused as too long: the merge is planned again under what the refusal teaches. Not the
    item's failure (that is ItemFailed, once nothing is left to learn); it carries the part that was
    refused out of the groups merged side by side."""

    def __init__(self, refusal: ContextLimitExceeded, request: SummaryRequest) -> None:
        self.refusal, self.request = refusal, request


async def merge(
    llm: LLM,
    nodes: Nodes,
    request: SummaryRequest,
    context: CallContext,
    scope_id: str,
    children: Sequence[Cited],
    *,
    parallel: int = 4,
    leave_out: bool = False,
    kept: Collection[tuple[str, ...]] = (),
) -> Merged:
    """The merged summary of `request`'s texts (whose sentences are `children`, one per text), within
    the endpoint's budget; with `leave_out` (a task asking for `support` "strict"), a level above
    another is made from its nodes' summaries without their unsupported sentences (each node is stored
    whole); grouped as `kept` (a previous version's groups) wherever its texts allow. ItemFailed when the
    provider refuses even what cannot be made any smaller."""
    if len(children) != len(request.texts):
        raise ValueError(f"{len(children)} texts' sentences for a merge of {len(request.texts)}")
    for _ in range(MAX_REPLANS):
        try:
            return await _merge_under(
                await llm.budget(), llm, nodes, request, tuple(children), context, scope_id, parallel, leave_out, kept
            )
        except _Refused as refused:
            if not await llm.learn(refused.refusal, refused.request):
                raise ItemFailed(
                    f"the merge does not fit the model's context window ({llm.describe_budget()}); set "
                    f"DOCSUM_LLM_CONTEXT_TOKENS to the window the model really has. The provider said: "
                    f"{refused.refusal}"
                ) from refused.refusal
    raise ItemFailed(f"the provider kept refusing the merge as too long ({llm.describe_budget()})")


async def _merge_under(
    budget: int | None,
    llm: LLM,
    nodes: Nodes,
    request: SummaryRequest,
    children: tuple[Cited, ...],
    context: CallContext,
    scope_id: str,
    parallel: int,
    leave_out: bool = False,
    kept: Collection[tuple[str, ...]] = (),
) -> Merged:
    slots = asyncio.Semaphore(parallel)
    calibration = llm.calibration
    quoted = 0

    async def call(part: SummaryRequest) -> SummaryResult:
        nonlocal quoted
        try:
            async with slots:
                result, _ = await llm.summarize(part, context)
            return result
        except ContextLimitExceeded as refusal:
            raise _Refused(refusal, part) from refusal
        except AnsweredWithInput as copied:
            log.warning("the merge of %s: %s; quoting its %d texts instead", scope_id, copied, len(part.texts))
            metrics.MERGES_QUOTED.labels(llm.model).inc()
            quoted += 1
            return await QUOTE.summarize(part)

    async def node(level: int, position: int, part: SummaryRequest, below: tuple[Cited, ...]) -> tuple[str, Cited]:
        if budget is not None and not fits(part, budget, calibration):
            part = trim_to_fit(part, budget, calibration)  # cuts each text's end: what is kept stays where it was
        result = await call(part)
        sentences = cited(result, below)
        key = llm.cache_key(part, context)
        await nodes.store_node(MergeNode(scope_id, level, position, len(below), key, result.text, sentences))
        if leave_out and sentences is not None:
            return without_unsupported(result.text, sentences)
        return result.text, sentences

    level = 0
    while budget is not None and not fits(request, budget, calibration):
        groups = groups_by_content(request, budget, calibration, kept)
        if len(groups) == len(request.texts) and level > 0:
            break  # nothing pairs up any more: trim below and finish in one request
        results = await asyncio.gather(
            *(
                node(level, i, part_of(request, start, end), children[start:end])
                for i, (start, end) in enumerate(groups)
            )
        )
        request = next_level(request, [text for text, _ in results])
        children = tuple(sentences for _, sentences in results)
        level += 1
    if budget is not None and not fits(request, budget, calibration):
        request = trim_to_fit(request, budget, calibration)
    result = await call(request)
    sentences = cited(result, children)
    if level > 0:
        key = llm.cache_key(request, context)
        await nodes.store_node(MergeNode(scope_id, level, 0, len(request.texts), key, result.text, sentences))
    return Merged(result.text, result.model, result.truncated, sentences, quoted)
