"""The manifests that follow from the code: Kafka topics, their partitions, the consumer groups KEDA watches.

    .venv/bin/python deploy/generate.py            # write deploy/k8s/base/{topics.yaml,scaledobjects.yaml,topology.env}
    .venv/bin/python deploy/generate.py --check    # exit 1 if any of them differs from what the code says

One list decides them all: `events.Topic` with `kafka.topic_partitions(Settings())` (each topic and its
`.dlq`, with the partition counts of the settings, and the intake topic of each producer that
DOCSUM_INTAKE_PRODUCERS names), and the topics each service's handlers are registered for
(`handlers.bind`; the parser also reads the intake topics), under its consumer group `Settings.group(service)`.
To add a producer, regenerate with it (`DOCSUM_INTAKE_PRODUCERS='{"crm": ["alice"]}' make deploy-manifests`):
its KafkaTopic, the parser's KEDA trigger on it, and the setting itself in topology.env follow.
`make deploy-manifests` runs it; tests/unit/test_deploy_manifests.py fails when a file is stale. Settings come
from the environment, like the services' own: run it with the same DOCSUM_TOPIC_* and DOCSUM_LLM_MAX_INFLIGHT as
the deployment.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from docsum_shared.events import Topic
from docsum_shared.kafka import DLQ_SUFFIX, intake_topics, topic_partitions
from docsum_shared.settings import LLMSettings, Settings

BASE = Path(__file__).resolve().parent / "k8s" / "base"
# The Strimzi Kafka cluster the KafkaTopics belong to, and its bootstrap Service (Strimzi names it
# <cluster>-kafka-bootstrap); the services and KEDA both connect there.
STRIMZI_CLUSTER = "docsum-kafka"
BOOTSTRAP_SERVERS = f"{STRIMZI_CLUSTER}-kafka-bootstrap:9092"
TOPIC_REPLICAS = 1  # the base's; the prod overlay raises it (and min.insync.replicas) for a 3-broker cluster
RETENTION_MS = 7 * 24 * 3600 * 1000  # events are intents, the state is in PostgreSQL: a week to replay
DLQ_RETENTION_MS = 30 * 24 * 3600 * 1000  # dead letters wait for a person


@dataclass(frozen=True)
class Scaling:
    """How KEDA scales one consumer service: its group, the topics it consumes, the lag per replica."""

    service: str
    group: str
    topics: tuple[str, ...]
    lag_threshold: int
    why: str
    # The summarizer's work waiting in PostgreSQL for its turn, which no lag counts: a query KEDA's
    # PostgreSQL trigger runs (the database's URL from the service's own DATABASE_URL), scaled at the
    # same threshold.
    ready_query: str | None = None


def consumed_topics() -> dict[str, tuple[Topic, ...]]:
    """The topics each consumer service's handlers are registered for (its consumer group reads them all)."""
    from docsum_chunker.handlers import handlers as chunker
    from docsum_merger.handlers import handlers as merger
    from docsum_parser.handlers import handlers as parser
    from docsum_summarizer.handlers import handlers as summarizer

    registries: dict[str, Any] = {"parser": parser, "chunker": chunker, "summarizer": summarizer, "merger": merger}
    return {name: tuple(sorted(registry.bind(None))) for name, registry in registries.items()}


def scaling(settings: LLMSettings) -> list[Scaling]:
    """The lag per replica that is worth one more replica, for each consumer service.

    summarizer: a replica has DOCSUM_LLM_MAX_INFLIGHT chunk calls in flight; a lag of twice that per replica
      means every replica is full and has as much again waiting, so one more replica halves the wait
      without ever starting one that would sit idle behind the provider's limits.
    parser: one warm worker parses one document at a time (seconds to minutes): two waiting per replica.
    chunker: cutting a document is milliseconds of CPU; only a real backlog (5 × DOCSUM_MAX_INFLIGHT) scales it.
    merger: merges call the LLM like the summarizer: twice its DOCSUM_MAX_INFLIGHT messages in flight.
    """
    from docsum_summarizer.repository import work_to_do_sql

    thresholds = {
        "parser": (2, "one document parsed at a time per replica: two waiting per replica"),
        "chunker": (settings.max_inflight * 5, "5 x DOCSUM_MAX_INFLIGHT: chunking is fast"),
        "summarizer": (
            settings.llm_max_inflight * 2,
            "2 x DOCSUM_LLM_MAX_INFLIGHT: every replica full, as many waiting",
        ),
        "merger": (settings.max_inflight * 2, "2 x DOCSUM_MAX_INFLIGHT: merges call the LLM"),
    }
    return [
        Scaling(
            service=name,
            group=settings.group(name),
            topics=tuple(settings.topic(t) for t in topics)
            + (tuple(intake_topics(settings)) if name == "parser" else ()),
            lag_threshold=thresholds[name][0],
            why=thresholds[name][1],
            ready_query=work_to_do_sql(settings.deployment) if name == "summarizer" else None,
        )
        for name, topics in consumed_topics().items()
    ]


def _k8s_name(topic: str) -> str:
    """A topic name as a Kubernetes object name (lower case, '-' and '.'; Strimzi keeps the real one in topicName)."""
    return "".join(c if c.isalnum() or c in "-." else "-" for c in topic.lower()).strip("-.")


def kafka_topics(settings: Settings) -> list[dict[str, Any]]:
    documents = []
    for topic, partitions in topic_partitions(settings).items():
        dlq = topic.endswith(DLQ_SUFFIX)
        documents.append(
            {
                "apiVersion": "kafka.strimzi.io/v1beta2",
                "kind": "KafkaTopic",
                "metadata": {
                    "name": _k8s_name(topic),
                    "labels": {"strimzi.io/cluster": STRIMZI_CLUSTER, "app.kubernetes.io/part-of": "docsum"},
                },
                "spec": {
                    "topicName": topic,
                    "partitions": partitions,
                    "replicas": TOPIC_REPLICAS,
                    "config": {
                        "retention.ms": DLQ_RETENTION_MS if dlq else RETENTION_MS,
                        "cleanup.policy": "delete",
                    },
                },
            }
        )
    return documents


def scaled_objects(settings: LLMSettings) -> list[dict[str, Any]]:
    partitions = topic_partitions(settings)
    documents = []
    for item in scaling(settings):
        # More replicas than partitions would sit idle: the ceiling is the smallest topic of the group.
        ceiling = min(partitions[t] for t in item.topics)
        documents.append(
            {
                "apiVersion": "keda.sh/v1alpha1",
                "kind": "ScaledObject",
                "metadata": {
                    "name": f"docsum-{item.service}",
                    "labels": {"app.kubernetes.io/name": f"docsum-{item.service}"},
                    "annotations": {"docsum/lag-threshold": item.why},
                },
                "spec": {
                    "scaleTargetRef": {"name": f"docsum-{item.service}"},
                    # Never zero: the summarizer re-announces due retries, the merger runs expiry and
                    # reconcile; both need a replica even when no event waits.
                    "minReplicaCount": 1,
                    "maxReplicaCount": ceiling,
                    "pollingInterval": 15,
                    "cooldownPeriod": 300,
                    "advanced": {
                        "horizontalPodAutoscalerConfig": {
                            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
                        }
                    },
                    "triggers": triggers(item),
                },
            }
        )
    return documents


def triggers(item: Scaling) -> list[dict[str, Any]]:
    """What KEDA scales `item` on: each topic's lag for its group; for the summarizer, also its work waiting
    in PostgreSQL for its turn (announced on Kafka only once admitted), at the same threshold. KEDA takes
    the largest number of replicas any trigger asks for."""
    out: list[dict[str, Any]] = [
        {
            "type": "kafka",
            "metadata": {
                "bootstrapServers": BOOTSTRAP_SERVERS,
                "consumerGroup": item.group,
                "topic": topic,
                "lagThreshold": str(item.lag_threshold),
                "activationLagThreshold": "0",
                "offsetResetPolicy": "earliest",
                "allowIdleConsumers": "false",
                "scaleToZeroOnInvalidOffset": "false",
            },
        }
        for topic in item.topics
    ]
    if item.ready_query:
        out.append(
            {
                "type": "postgresql",
                "metadata": {
                    "connectionFromEnv": "DATABASE_URL",  # the summarizer's own (envFrom its Secret)
                    "query": item.ready_query,
                    "targetQueryValue": str(item.lag_threshold),
                    "activationTargetQueryValue": "0",
                },
            }
        )
    return out


def topology_env(settings: LLMSettings) -> str:
    """The settings the generated objects depend on: the services must run with the same ones."""
    lines = [
        "# Generated by deploy/generate.py from shared/docsum_shared/settings.py: do not edit (make deploy-manifests).",
        f"KAFKA_BOOTSTRAP_SERVERS={BOOTSTRAP_SERVERS}",
        f"DOCSUM_TOPIC_PREFIX={settings.topic_prefix}",
        f"DOCSUM_TOPIC_PARTITIONS={settings.topic_partitions}",
        f"DOCSUM_CHUNK_TOPIC_PARTITIONS={settings.chunk_topic_partitions}",
        f"DOCSUM_MAX_INFLIGHT={settings.max_inflight}",
        f"DOCSUM_LLM_MAX_INFLIGHT={settings.llm_max_inflight}",
        # The producers whose intake topics exist (topics.yaml): the parser reads exactly those.
        f"DOCSUM_INTAKE_PRODUCERS={json.dumps(settings.intake_producers, separators=(',', ':'))}",
    ]
    return "\n".join(lines) + "\n"


HEADER = "# Generated by deploy/generate.py from docsum_shared.events.Topic and the settings: do not edit.\n"


def _yaml(documents: list[dict[str, Any]]) -> str:
    return HEADER + "---\n".join(yaml.safe_dump(d, sort_keys=False, width=120) for d in documents)


def render(settings: LLMSettings | None = None) -> dict[str, str]:
    """File name (under deploy/k8s/base) → content."""
    settings = settings or LLMSettings()  # the shared settings and the LLM's (the summarizer's scaling)
    return {
        "topics.yaml": _yaml(kafka_topics(settings)),
        "scaledobjects.yaml": _yaml(scaled_objects(settings)),
        "topology.env": topology_env(settings),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy/generate.py", description="Write or check the generated manifests.")
    parser.add_argument("--check", action="store_true", help="only check that deploy/k8s/base is up to date")
    args = parser.parse_args(argv)
    stale = []
    for name, content in render().items():
        path = BASE / name
        if args.check:
            if not path.exists() or path.read_text() != content:
                stale.append(name)
        else:
            path.write_text(content)
    if stale:
        print(f"stale in {BASE}: {', '.join(stale)}; run `make deploy-manifests`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
