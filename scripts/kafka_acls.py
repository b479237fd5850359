"""Grant docsum's Kafka principals the ACLs they need, and nothing more (README, "Kafka security and ACLs").

    .venv/bin/python scripts/kafka_acls.py [--services docsum] [--intake PRODUCER=PRINCIPAL ...]
                                           [--results results] [--results-group GROUP] [--dry-run]

It connects with the same settings as the services (KAFKA_BOOTSTRAP_SERVERS, DOCSUM_KAFKA_*), so run it
with the credentials of a principal that may create ACLs (a super user: `admin` on the broker that
`DOCSUM_KAFKA_SASL=1 scripts/kafka.sh start` runs). The topic and group names follow
DOCSUM_TOPIC_PREFIX. Creating an ACL that exists already changes nothing, so it is safe to run again.
`--dry-run` prints the ACLs without connecting. Leave a role out with an empty name (`--results ''`).

Each producer of DOCSUM_INTAKE_PRODUCERS may write its own topic, intake.<producer>, and nothing else:
the parser believes a message's owner only as far as that producer may act for it, so the topic must be
the producer's alone. `--intake crm=crm-svc` names the principal of producer `crm` (by default each
configured producer's principal has the producer's name); document-submitted is the pipeline's own.

aiokafka's admin client has no ACL calls, so this uses confluent-kafka's (a dev dependency).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from docsum_shared.events import intake_topic
from docsum_shared.settings import Settings, service_settings


@dataclass(frozen=True)
class Grant:
    principal: str  # a user name, as the broker authenticates it
    resource: ResourceType
    name: str
    pattern: ResourcePatternType
    operation: AclOperation

    def binding(self) -> AclBinding:
        return AclBinding(
            self.resource, self.name, self.pattern, f"User:{self.principal}", "*", self.operation,
            AclPermissionType.ALLOW,
        )  # fmt: skip

    def __str__(self) -> str:
        return f"User:{self.principal}: {self.operation.name} on {self.resource.name} {self.pattern.name} '{self.name}'"


def grants(settings: Settings, services: str, intake: dict[str, str], results: str, results_group: str) -> list[Grant]:
    """What each principal needs. READ and WRITE imply DESCRIBE; since Kafka 3.0 an idempotent producer
    needs WRITE on a topic, not IDEMPOTENT_WRITE on the cluster."""
    topic, group = ResourceType.TOPIC, ResourceType.GROUP
    literal, prefixed = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    read, write, create = AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE
    # Without a prefix the services' topics are every topic: the literal wildcard.
    topics, pattern = (settings.topic_prefix, prefixed) if settings.topic_prefix else ("*", literal)
    found: list[Grant] = []
    if services:
        # Every service creates the missing topics at start (and their .dlq), reads and writes them,
        # and commits offsets in its consumer group (the gateway's progress recorder: docsum-gateway-progress).
        found += [Grant(services, topic, topics, pattern, op) for op in (read, write, create)]
        found.append(Grant(services, group, settings.group(""), prefixed, read))
    for producer, principal in sorted(intake.items()):  # an outside system that submits documents, on its own topic
        found.append(Grant(principal, topic, settings.topic(intake_topic(producer)), literal, write))
    if results:  # an outside system that learns of finished tasks, in its own consumer group
        found.append(Grant(results, topic, settings.topic("task-finished"), literal, read))
        found.append(Grant(results, group, results_group or settings.topic("results"), literal, read))
    return found


def librdkafka_config(settings: Settings) -> dict[str, Any]:
    """`kafka.client_options` for confluent-kafka."""
    config: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_bootstrap_servers,
        "security.protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_sasl_password is not None:
        config["sasl.mechanism"] = settings.kafka_sasl_mechanism
        config["sasl.username"] = settings.kafka_sasl_username
        config["sasl.password"] = settings.kafka_sasl_password.get_secret_value()
    for key, value in {
        "ssl.ca.location": settings.kafka_ssl_cafile,
        "ssl.certificate.location": settings.kafka_ssl_certfile,
        "ssl.key.location": settings.kafka_ssl_keyfile,
        "ssl.key.password": settings.kafka_ssl_key_password and settings.kafka_ssl_key_password.get_secret_value(),
    }.items():
        if value:
            config[key] = value
    return config


def intake_principals(settings: Settings, given: list[str]) -> dict[str, str]:
    """producer → principal: each configured producer under its own name, then `--intake P=PRINCIPAL`."""
    principals = {producer: producer for producer in settings.intake_producers}
    for pair in given:
        producer, _, principal = pair.partition("=")
        if not producer or not principal:
            raise SystemExit(f"--intake {pair!r}: give PRODUCER=PRINCIPAL (e.g. crm=crm-svc)")
        principals[producer] = principal
    return principals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--services", default="docsum", help="the services' principal (default: docsum)")
    parser.add_argument(
        "--intake",
        action="append",
        default=[],
        metavar="PRODUCER=PRINCIPAL",
        help="who may publish on intake.<PRODUCER> (default: each producer of DOCSUM_INTAKE_PRODUCERS, by its name)",
    )
    parser.add_argument("--results", default="results", help="who may read task-finished (default: results)")
    parser.add_argument("--results-group", default="", help="its consumer group (default: <prefix>results)")
    parser.add_argument("--dry-run", action="store_true", help="print the ACLs, do not connect")
    args = parser.parse_args()
    settings = service_settings("kafka-acls", Settings)
    wanted = grants(settings, args.services, intake_principals(settings, args.intake), args.results, args.results_group)
    if args.dry_run:
        print("\n".join(map(str, wanted)))
        return 0
    admin = AdminClient(librdkafka_config(settings))
    futures = admin.create_acls([grant.binding() for grant in wanted])
    failed = 0
    for grant in wanted:
        try:
            futures[grant.binding()].result(timeout=30)
            print(f"granted {grant}")
        except Exception as exc:  # noqa: BLE001 - report every refused ACL, then fail
            failed += 1
            print(f"refused {grant}: {exc}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
