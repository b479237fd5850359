"""Kafka plumbing shared by the services: topic creation, the producer, publishing events."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError
from aiokafka.helpers import create_ssl_context

from . import metrics
from .errors import EventRefused, Kind, kafka_kind
from .events import TOPIC_OF, Event, Topic, intake_topic
from .handlers import Sender
from .retry import retry_until, until_deadline
from .settings import Settings
from .telemetry import headers

log = logging.getLogger(__name__)

DLQ_SUFFIX = ".dlq"


def client_options(settings: Settings) -> dict[str, Any]:
    """How every Kafka client of docsum connects: the keyword arguments of aiokafka's producer, consumer
    and admin client (the broker's address and the security settings). The result holds the SASL
    password in clear, as aiokafka needs it: pass it on, never log it."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_bootstrap_servers,
        "security_protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_security_protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        # Settings has checked that the mechanism and both credentials are there.
        assert settings.kafka_sasl_password is not None
        options["sasl_mechanism"] = settings.kafka_sasl_mechanism
        options["sasl_plain_username"] = settings.kafka_sasl_username
        options["sasl_plain_password"] = settings.kafka_sasl_password.get_secret_value()
    if settings.kafka_security_protocol in ("SSL", "SASL_SSL"):
        key_password = settings.kafka_ssl_key_password
        # Without a CA file the system's CAs verify the broker; the host name is always checked.
        options["ssl_context"] = create_ssl_context(
            cafile=settings.kafka_ssl_cafile,
            certfile=settings.kafka_ssl_certfile,
            keyfile=settings.kafka_ssl_keyfile,
            password=key_password.get_secret_value() if key_password is not None else None,
        )
    return options


def topic_partitions(settings: Settings) -> dict[str, int]:
    """Every topic the pipeline uses, with its partition count (the ceiling of its parallelism): its own,
    and the intake topic of each producer DOCSUM_INTAKE_PRODUCERS configures."""
    wanted: dict[str, int] = {}
    for topic in Topic:
        count = settings.chunk_topic_partitions if topic is Topic.CHUNK_CREATED else settings.topic_partitions
        wanted[settings.topic(topic)] = count
        wanted[settings.topic(topic) + DLQ_SUFFIX] = 1
    for name in intake_topics(settings):
        wanted[name] = settings.topic_partitions
        wanted[name + DLQ_SUFFIX] = 1
    return wanted


def intake_topics(settings: Settings) -> dict[str, str]:
    """The intake topic of each configured producer (with the prefix), by name → its producer."""
    return {settings.topic(intake_topic(producer)): producer for producer in sorted(settings.intake_producers)}


async def ensure_topics(settings: Settings, *, wait_s: float = 120.0) -> None:
    """Create the missing topics; idempotent, and safe when several services start at once."""

    async def create_missing() -> None:
        admin = AIOKafkaAdminClient(**client_options(settings))
        try:
            await admin.start()
            existing = set(await admin.list_topics())
            missing = [
                NewTopic(name=name, num_partitions=count, replication_factor=1)
                for name, count in topic_partitions(settings).items()
                if name not in existing
            ]
            if missing:
                response = await admin.create_topics(missing)
                for name, code, *_ in getattr(response, "topic_errors", []):
                    # 36 = TOPIC_ALREADY_EXISTS: another service created it first.
                    if code not in (0, TopicAlreadyExistsError.errno):
                        raise RuntimeError(f"cannot create topic {name}: error code {code}")
                log.info("created topics: %s", ", ".join(t.name for t in missing))
        finally:
            await admin.close()

    def waiting(exc: Exception) -> None:
        log.warning("Kafka not reachable yet (%s); retrying", exc)

    await retry_until(create_missing, until_deadline(wait_s, waiting))


def make_producer(settings: Settings) -> AIOKafkaProducer:
    # acks=all + idempotence: an acknowledged event is on the log exactly once per send.
    return AIOKafkaProducer(
        **client_options(settings),
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
    )


async def publish(
    producer: AIOKafkaProducer, settings: Settings, events: Sequence[Event], *, sender: Sender | None
) -> None:
    """Send the events and wait until Kafka has acknowledged every one of them. Each goes to the partition
    its key hashes to, or the one its `spread` picks (a document's chunks, in turn). Each carries the
    current trace context as a W3C `traceparent` header (telemetry.py; none without OpenTelemetry).
    An event Kafka refuses for good (not retriable: too large for its topic, say) raises EventRefused,
    naming the topic, the event and the reason. `sender`: who publishes, checked against what it
    declares; None only for what a handler returned (its registry checked it already)."""
    if sender is not None:
        sender.check(events)
    pending = []
    counts: dict[str, int] = {}  # partitions per topic, for the events that pick theirs
    for event in events:
        topic = settings.topic(TOPIC_OF[type(event)])
        spread, partition = event.spread(), None
        try:
            if spread is not None:
                if topic not in counts:
                    counts[topic] = len(await producer.partitions_for(topic))
                partition = spread % counts[topic]
            delivery = await producer.send(
                topic, event.to_bytes(), key=event.key().encode(), partition=partition, headers=headers()
            )
        except KafkaError as exc:
            _raise_if_refused(exc, topic, event)
            raise
        pending.append((topic, event, delivery))
    for topic, event, delivery in pending:
        try:
            await delivery
        except KafkaError as exc:
            _raise_if_refused(exc, topic, event)
            raise


@dataclass(frozen=True)
class KafkaPublish:
    """The `Publish` port on Kafka: `publish` through this producer, with every guarantee it gives. With
    `service`, what it published is counted as that service's (docsum_messages_produced_total), as what
    its handlers return is."""

    producer: AIOKafkaProducer
    settings: Settings
    service: str | None = None

    async def __call__(self, events: Sequence[Event], *, sender: Sender | None) -> None:
        await publish(self.producer, self.settings, events, sender=sender)
        if self.service is not None:
            for event in events:
                metrics.PRODUCED.labels(self.service, self.settings.topic(TOPIC_OF[type(event)])).inc()


def _raise_if_refused(exc: KafkaError, topic: str, event: Event) -> None:
    if kafka_kind(exc) is Kind.POISON:
        raise EventRefused(
            f"Kafka refused the {type(event).__name__} event for {event.key()} on {topic} for good"
            f" ({type(exc).__name__}: {exc}; not retriable)"
        ) from exc
