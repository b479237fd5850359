"""In-memory stand-ins for the ports a handler is given: the LLM port and each service's repository.

They keep the same rules as the real ones (guarded transitions, leases), so a handler's unit test
exercises its decisions without a broker or a database.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from docsum_llm.base import SummaryRequest, SummaryResult
from docsum_llm.budget import TokenCalibration, completion_reserve, estimate_request_tokens, lowered_budget, plan_chunk
from docsum_llm.cache import CallContext, cache_key
from docsum_shared.errors import ContextLimitExceeded

Answer = Callable[[SummaryRequest], SummaryResult]


def echo(request: SummaryRequest) -> SummaryResult:
    """A deterministic answer: the first words of every text."""
    return SummaryResult(" / ".join(" ".join(t.split()[:6]) for t in request.texts), "fake-1", 10, 5)


@dataclass
class FakeLLM:
    """The LLM port. `script` holds what the next calls raise (an exception) or answer (None: `answer`);
    `window`: the provider's context in tokens, refused with a stated limit like OpenAI's."""

    answer: Answer = echo
    script: list[BaseException | None] = field(default_factory=list)
    window: int | None = None
    learned: int | None = None
    calls: list[SummaryRequest] = field(default_factory=list)
    contexts: list[CallContext | None] = field(default_factory=list)  # what each call was for, and its mode
    calibration: TokenCalibration = field(default_factory=TokenCalibration)
    model: str = "fake-1"
    can_batch: bool = False  # whether the backend has the provider's Batch API
    results: dict[str, SummaryResult] = field(default_factory=dict)  # the result cache, by key

    @property
    def batching(self) -> object | None:
        return self if self.can_batch else None

    async def cached(self, request: SummaryRequest, context: CallContext) -> SummaryResult | None:
        return self.results.get(self.cache_key(request, context))

    async def stored(self, key: str) -> SummaryResult | None:
        return self.results.get(key)

    async def budget(self) -> int | None:
        return self.learned

    async def summarize(
        self, request: SummaryRequest, context: CallContext | None = None
    ) -> tuple[SummaryResult, bool]:
        self.calls.append(request)
        self.contexts.append(context)
        if self.script and (outcome := self.script.pop(0)) is not None:
            raise outcome
        if self.window is not None and estimate_request_tokens(request) > self.window:
            raise ContextLimitExceeded(f"maximum context length is {self.window} tokens", limit=self.window)
        return self.answer(request), False

    async def bounded(self, request: SummaryRequest) -> SummaryRequest:
        return request

    async def plan_chunk(self, request: SummaryRequest) -> list[SummaryRequest] | None:
        return plan_chunk(request, self.learned, self.calibration)

    async def learn(self, refusal: ContextLimitExceeded, request: SummaryRequest) -> bool:
        tried = estimate_request_tokens(request) + completion_reserve(self.learned, request)
        new = lowered_budget(self.learned, tried, stated_limit=refusal.limit)
        if new is None:
            return False
        self.learned = new
        return True

    def cache_key(self, request: SummaryRequest, context: CallContext) -> str:
        return cache_key(self.model, request, context.owner)

    def describe_budget(self) -> str:
        return f"an input budget of {self.learned} tokens, learned from the provider's refusal"
