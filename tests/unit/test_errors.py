"""The error taxonomy: how provider answers are classified, and the one retry helper."""

from __future__ import annotations

import pytest
from aiokafka import errors as kafka_errors

from docsum_shared.errors import (
    ContextLimitExceeded,
    EventRefused,
    ItemFailed,
    Kind,
    Poison,
    ProviderUnavailable,
    RateLimited,
    RequestRefused,
    classify,
    context_limit_error,
    kafka_kind,
)

# What real servers answer to an over-long prompt (see the README's "Configuring a real LLM").
OPENAI = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9135 tokens. "
    "Please reduce the length of the messages."
)
VLLM = (
    "This model's maximum context length is 2048 tokens. However, you requested 2311 tokens "
    "(1799 in the messages, 512 in the completion). Please reduce the length of the messages or completion."
)
LLAMA_CPP = "request (2963 tokens) exceeds the available context size (2048 tokens), try increasing it"


@pytest.mark.parametrize(
    ("message", "code", "limit", "requested"),
    [
        (OPENAI, "context_length_exceeded", 8192, 9135),
        (VLLM, None, 2048, 1799),
        (LLAMA_CPP, None, 2048, 2963),
        ("the input is too long for this model", "context_length_exceeded", None, None),
        ("Prompt is too long", None, None, None),
    ],
)
def test_context_refusals_are_recognised_with_what_they_state(
    message: str, code: str | None, limit: int | None, requested: int | None
) -> None:
    refusal = context_limit_error(message, code)
    assert isinstance(refusal, ContextLimitExceeded) and isinstance(refusal, RequestRefused)
    assert (refusal.limit, refusal.requested) == (limit, requested)


def test_other_refusals_are_not_taken_for_a_context_limit() -> None:
    assert context_limit_error("The provider rejected this prompt.", "invalid_prompt") is None
    assert context_limit_error("Invalid value for 'temperature'", None) is None


def test_every_failure_is_exactly_one_kind() -> None:
    assert classify(RateLimited("429", retry_after=2)) is Kind.RATE_LIMITED
    assert classify(ProviderUnavailable("503")) is Kind.RETRIABLE
    assert classify(ConnectionRefusedError()) is Kind.RETRIABLE
    assert classify(RequestRefused("400")) is Kind.FAILS_ITEM
    assert classify(ContextLimitExceeded("too long", limit=10)) is Kind.FAILS_ITEM
    assert classify(ItemFailed("broken file")) is Kind.FAILS_ITEM
    assert classify(Poison("unknown id")) is Kind.POISON
    assert classify(KeyError("a bug")) is None
    assert classify(EventRefused("too large for its topic")) is Kind.POISON


# --- Kafka errors: the error says whether it is retriable ----------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        kafka_errors.MessageSizeTooLargeError(),  # over the topic's max.message.bytes, or the producer's limit
        kafka_errors.RecordListTooLargeError(),
        kafka_errors.CorruptRecordException(),
        kafka_errors.InvalidTimestampError(),
        kafka_errors.UnsupportedForMessageFormatError(),
        kafka_errors.InvalidTopicError(),
        kafka_errors.PolicyViolationError(),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_kafka_error_that_says_it_is_not_retriable_poisons_the_message(error: kafka_errors.KafkaError) -> None:
    assert error.retriable is False
    assert kafka_kind(error) is Kind.POISON
    assert classify(error) is Kind.POISON


@pytest.mark.parametrize(
    "error",
    [
        kafka_errors.KafkaConnectionError(),
        kafka_errors.NotLeaderForPartitionError(),
        kafka_errors.LeaderNotAvailableError(),
        kafka_errors.RequestTimedOutError(),
        kafka_errors.NotEnoughReplicasError(),
        kafka_errors.UnknownTopicOrPartitionError(),
        kafka_errors.NodeNotReadyError(),
        kafka_errors.CoordinatorNotAvailableError(),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_kafka_error_that_says_it_is_retriable_is_waited_out(error: kafka_errors.KafkaError) -> None:
    assert error.retriable is True
    assert classify(error) is Kind.RETRIABLE


@pytest.mark.parametrize(
    "error",
    [
        kafka_errors.KafkaTimeoutError(),  # the broker was away longer than a delivery may wait
        kafka_errors.BrokerNotAvailableError(),
        kafka_errors.ProducerClosed(),  # the service is stopping
        kafka_errors.TopicAuthorizationFailedError("t"),  # an ACL an operator fixes: every message alike
        kafka_errors.SaslAuthenticationFailed(),
        kafka_errors.KafkaError("Unexpected error during batch delivery"),  # the client's own fault
    ],
    ids=lambda e: type(e).__name__,
)
def test_not_retriable_states_of_the_client_or_cluster_are_waited_out(error: kafka_errors.KafkaError) -> None:
    """They call themselves not retriable but say nothing against the message: dead-lettering every
    message through such an outage would empty the pipeline into its dead-letter topics."""
    assert error.retriable is False
    assert classify(error) is Kind.RETRIABLE


def test_a_subclass_of_a_retriable_kafka_error_stays_retriable() -> None:
    assert classify(kafka_errors.NotCoordinatorForGroupError()) is Kind.RETRIABLE


def test_a_bad_setting_ends_a_service_with_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from docsum_parser.settings import ParserSettings
    from docsum_shared.settings import get_settings, service_settings

    monkeypatch.setenv("DOCSUM_TOPIC_PARTITIONS", "0")
    get_settings.cache_clear()
    try:
        with pytest.raises(SystemExit) as ended:
            service_settings("parser", ParserSettings)
    finally:
        get_settings.cache_clear()
    assert str(ended.value).startswith("docsum-parser: bad setting DOCSUM_TOPIC_PARTITIONS:")
