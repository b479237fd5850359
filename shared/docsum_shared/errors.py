"""What failed: the one error taxonomy of every service (what happens next is retry.py's).

Every exception that reaches a handler is exactly one of four kinds (`classify`):

- RETRIABLE: infrastructure that comes back by itself (a restarting broker or database, a provider
  answering 5xx): wait with back-off and keep the message. Provider failures count as attempts of
  their item (stored on its row), so that an item cannot be retried forever.
- RATE_LIMITED: the provider said "not now": wait as told; it never counts as an attempt.
- FAILS_ITEM: the chunk or document becomes FAILED with a message a user can act on, and the handler
  still emits its output event so that the task finishes.
- POISON: the message itself cannot be handled (unreadable, or naming nothing that exists, or what
  it leads to is refused by Kafka for good, like an event over the topic's size limit): it goes to the
  dead-letter topic with the reason.

A Kafka error says itself whether it is retriable (aiokafka's `retriable`). One that says it is not is
the message's fault and poisons it — except the few that say not-retriable of the client or the
cluster rather than of any message (`_KAFKA_WAIT_OUT`): dead-lettering every message through such an
outage would empty the pipeline into its dead-letter topics, so those are waited out.
"""

from __future__ import annotations

import asyncio
import enum
import re
from dataclasses import dataclass
from typing import TypeVar

import asyncpg
from aiokafka import errors as kafka_errors
from aiokafka.errors import KafkaError

T = TypeVar("T")


class Kind(enum.Enum):
    RETRIABLE = "retriable"
    RATE_LIMITED = "rate-limited"
    FAILS_ITEM = "fails-item"
    POISON = "poison"


class Poison(Exception):
    """The message can never be handled as it is: it goes to the dead-letter topic."""


class EventRefused(Poison):
    """Kafka refused, for good, an event that handling the message produced (too large for its topic,
    say): the message is dead-lettered with the reason, instead of being tried forever."""


class ItemFailed(Exception):
    """The item (chunk, document) fails for good with this message; the pipeline goes on without it."""


@dataclass(frozen=True)
class Fail:
    """The same, as a decision a policy returns rather than raises: the item fails with `error`, a
    message its owner can act on."""

    error: str


# --- what an LLM provider can answer -----------------------------------------------------------------


class LLMError(Exception):
    """Something a summarizer backend raised."""


class ProviderUnavailable(LLMError):
    """A passing failure of the provider (5xx, timeout, connection): retriable, counts as an attempt.

    `retry_after`: what the provider asked us to wait (seconds), if it said.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class AnsweredWithInput(ProviderUnavailable):
    """The model answered with a text it was given, copied, instead of a summary of it: a failed
    attempt (a chunk's is asked again). A merge takes it as final, the same prompt being answered the
    same way: the merge quotes its texts' sentences instead (the merger's tree)."""


class RateLimited(LLMError):
    """429: the request was fine, its timing was not. Wait `retry_after` seconds (if given)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RequestRefused(LLMError, ItemFailed):
    """The provider rejected the request for good (bad request, content refused): fails the item."""


class ContextLimitExceeded(RequestRefused):
    """The prompt was longer than the model's context window.

    `limit`: the window the provider stated, in tokens, when it said; `requested`: the prompt's tokens
    by the provider's count, when it said. Not final by itself: the budget is lowered and the request
    re-planned; only a request that cannot shrink any further fails its item.
    """

    def __init__(self, message: str, *, limit: int | None = None, requested: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.requested = requested
        self.replan: bool | None = None  # its lesson, once taken (Summarizing.learn): plan again, or cannot


# How providers word a context overflow (OpenAI, vLLM, llama.cpp's server, others alike).
_CONTEXT_PATTERNS = (
    re.compile(r"maximum context length is (?P<limit>\d+)", re.I),  # OpenAI, vLLM
    re.compile(r"exceeds the available context size \((?P<limit>\d+) tokens\)", re.I),  # llama.cpp
    re.compile(r"context[_ ]length[_ ]exceeded", re.I),
    re.compile(r"(?:context window|context length|context size).{0,40}(?:exceed|too long|too large)", re.I),
    re.compile(r"(?:prompt|input) is too long", re.I),
)
_REQUESTED_PATTERNS = (
    re.compile(r"resulted in (?P<n>\d+) tokens", re.I),  # OpenAI
    re.compile(r"you requested (?P<n>\d+) tokens \((?P<prompt>\d+) in the messages", re.I),  # vLLM
    re.compile(r"request \((?P<n>\d+) tokens\) exceeds", re.I),  # llama.cpp
)


def context_limit_error(message: str, code: str | None = None) -> ContextLimitExceeded | None:
    """The error a provider's 400 stands for when it says the context was exceeded; None otherwise."""
    if code != "context_length_exceeded" and not any(p.search(message) for p in _CONTEXT_PATTERNS):
        return None
    limit = next((int(m["limit"]) for p in _CONTEXT_PATTERNS[:2] if (m := p.search(message))), None)
    requested = None
    for pattern in _REQUESTED_PATTERNS:
        if match := pattern.search(message):
            groups = match.groupdict()
            requested = int(groups.get("prompt") or groups["n"])
            break
    return ContextLimitExceeded(message, limit=limit, requested=requested)


# --- classification ---------------------------------------------------------------------------------

# Infrastructure that comes back by itself.
_INFRASTRUCTURE: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.OperatorInterventionError,  # admin shutdown, cannot connect now: a restarting server
    asyncpg.TooManyConnectionsError,
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
    ProviderUnavailable,
)

# Kafka errors that call themselves not retriable, yet say nothing against the message: they pass, or
# an operator fixes them, and every message would fail alike meanwhile.
_KAFKA_WAIT_OUT: tuple[type[KafkaError], ...] = (
    kafka_errors.KafkaTimeoutError,  # a delivery or a buffer wait timed out: the broker was away
    kafka_errors.KafkaUnavailableError,
    kafka_errors.BrokerNotAvailableError,
    kafka_errors.ReplicaNotAvailableError,
    kafka_errors.ProducerClosed,  # the service is stopping; the message is handed back
    kafka_errors.RebalanceInProgressError,
    # Credentials and ACLs: wrong for every message at once, until the operator fixes them.
    kafka_errors.AuthenticationFailedError,
    kafka_errors.SaslAuthenticationFailed,
    kafka_errors.TopicAuthorizationFailedError,
    kafka_errors.ClusterAuthorizationFailedError,
    kafka_errors.GroupAuthorizationFailedError,
    kafka_errors.TransactionalIdAuthorizationFailed,
)


def kafka_kind(exc: KafkaError) -> Kind:
    """Ask the error: retriable ones (and the client's or cluster's passing states) are waited out; the
    rest — a message too large, a corrupt or invalid record — are the message's, for good."""
    if exc.retriable or isinstance(exc, _KAFKA_WAIT_OUT) or type(exc) is KafkaError:
        # A bare KafkaError is aiokafka's own fault ("unexpected error during batch delivery"), not the message's.
        return Kind.RETRIABLE
    return Kind.POISON


def classify(exc: BaseException) -> Kind | None:
    """The kind of a failure; None for an unexpected one (a bug): a few tries, then the DLQ."""
    if isinstance(exc, RateLimited):
        return Kind.RATE_LIMITED
    if isinstance(exc, KafkaError):
        return kafka_kind(exc)
    if isinstance(exc, _INFRASTRUCTURE):
        return Kind.RETRIABLE
    if isinstance(exc, ItemFailed):
        return Kind.FAILS_ITEM
    if isinstance(exc, Poison):
        return Kind.POISON
    return None
