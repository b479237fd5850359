"""Each service's settings class reads every setting of the shared groups it includes, from the same
environment variables, and no two classes define one setting differently.

A setting given to a class that lacks it is dropped without a word (`extra="ignore"`), so what each class
reads is checked here, from the environment, as the services read it.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import Field
from pydantic.fields import FieldInfo
from pydantic_settings import SettingsConfigDict

from docsum_chunker.settings import ChunkerSettings
from docsum_shared.settings import (
    IntakeSettings,
    LLMSettings,
    ReconcileSettings,
    Settings,
    SizeSettings,
    env_name,
)
from tests.unit.deploy_support import SERVICE_SETTINGS

GROUPS: tuple[type[Settings], ...] = (Settings, SizeSettings, ReconcileSettings, LLMSettings, IntakeSettings)

# A value other than the default for every setting of every class, as its environment variable holds it.
ENVIRONMENT = {
    # Settings
    "KAFKA_BOOTSTRAP_SERVERS": "broker-1:19092",
    "DATABASE_URL": "postgresql://docsum@db.example:5432/docsum",
    "DOCSUM_TOPIC_PREFIX": "t1.",
    "DOCSUM_TOPIC_PARTITIONS": "3",
    "DOCSUM_CHUNK_TOPIC_PARTITIONS": "5",
    "DOCSUM_DB_POOL_MAX": "7",
    "DOCSUM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "DOCSUM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "DOCSUM_KAFKA_SASL_USERNAME": "docsum",
    "DOCSUM_KAFKA_SASL_PASSWORD": "sasl-secret",
    "DOCSUM_KAFKA_SSL_CAFILE": "/etc/kafka/ca.pem",
    "DOCSUM_KAFKA_SSL_CERTFILE": "/etc/kafka/client.pem",
    "DOCSUM_KAFKA_SSL_KEYFILE": "/etc/kafka/client.key",
    "DOCSUM_KAFKA_SSL_KEY_PASSWORD": "key-secret",
    "DOCSUM_MAX_INFLIGHT": "5",
    "DOCSUM_SESSION_TIMEOUT_MS": "12000",
    "DOCSUM_HEARTBEAT_INTERVAL_MS": "2000",
    "DOCSUM_MAX_POLL_INTERVAL_MS": "200000",
    "DOCSUM_DRAIN_TIMEOUT_S": "25",
    "DOCSUM_HEALTH_HOST": "0.0.0.0",
    "DOCSUM_HEALTH_PORT": "8181",
    "DOCSUM_REDRIVE_LIMIT": "11",
    "DOCSUM_REDRIVE_BATCH_EVENTS": "250",
    "DOCSUM_REDRIVE_ANNOUNCED_S": "120",
    "DOCSUM_INTAKE_PRODUCERS": '{"crm": ["alice"]}',
    "DOCSUM_LOG_FORMAT": "json",
    "DOCSUM_TRACE_FILE": "/tmp/spans.jsonl",
    # SizeSettings
    "DOCSUM_SMALL_MAX_CHARS": "9000",
    "DOCSUM_MEDIUM_MAX_CHARS": "90000",
    # ReconcileSettings
    "DOCSUM_RECONCILE_IDLE_S": "90",
    # LLMSettings
    "DOCSUM_LLM_BACKEND": "openai",
    "DOCSUM_LLM_MODEL": "model-x",
    "DOCSUM_LLM_STALL_TIMEOUT_S": "45",
    "DOCSUM_LLM_MIN_PROMPT_TPS": "20",
    "DOCSUM_LLM_MIN_OUTPUT_TPS": "3",
    "DOCSUM_LLM_STREAM": "never",
    "DOCSUM_LLM_MAX_TOKENS_CHUNK": "320",
    "DOCSUM_LLM_MAX_TOKENS_DOCUMENT": "640",
    "DOCSUM_LLM_MAX_TOKENS_TASK": "900",
    "DOCSUM_LLM_PROBE": "false",
    "DOCSUM_LLM_FREQUENCY_PENALTY": "0.5",
    "DOCSUM_LLM_CITATIONS": "text",
    "DOCSUM_LLM_MAX_ATTEMPTS": "5",
    "DOCSUM_LLM_MAX_INFLIGHT": "6",
    "DOCSUM_LLM_RPM": "100",
    "DOCSUM_LLM_TPM": "20000",
    "DOCSUM_LLM_CONTEXT_TOKENS": "8000",
    "DOCSUM_SHARED_CACHE": "true",
    "DOCSUM_TASK_MAX_CALLS": "50",
    "DOCSUM_TASK_MAX_COST_USD": "2.5",
    "DOCSUM_OWNER_CEILINGS": '{"alice": {"calls": 10}}',
    "DOCSUM_LLM_PRICES": '{"model-x": [0.1, 0.2]}',
    "DOCSUM_LLM_MODE": "flex",
    "DOCSUM_LLM_FLEX_TRIES": "2",
    "DOCSUM_LLM_FLEX_PRICE_FACTOR": "0.4",
    "DOCSUM_LLM_BATCH_PRICE_FACTOR": "0.45",
    "OPENAI_BASE_URL": "http://llm.example:8080/v1",
    "OPENAI_API_KEY": "sk-0123456789",
    # BlobSettings
    "DOCSUM_BLOB_STORE": "s3://docsum-blobs/uploads",
    "DOCSUM_BLOB_ORPHAN_GRACE_S": "7200",
    "DOCSUM_BLOB_SWEEP_INTERVAL_S": "600",
    # IntakeSettings
    "DOCSUM_MAX_FILE_BYTES": "1000000",
    "DOCSUM_MAX_FILES_PER_TASK": "20",
    "DOCSUM_INTAKE_INLINE_MAX_BYTES": "1000",
    "DOCSUM_INTAKE_FILE_ROOTS": '["/srv/docs"]',
    "DOCSUM_INTAKE_HTTP_HOSTS": '["docs.example.com"]',
    "DOCSUM_INTAKE_HTTP_PORTS": "[443]",
    "DOCSUM_INTAKE_S3_PLACES": '["s3://docs-in/incoming"]',
    "DOCSUM_INTAKE_HTTP_TIMEOUT_S": "5",
    "DOCSUM_INTAKE_HTTP_TOTAL_S": "60",
    "DOCSUM_MAX_TASK_BYTES": "5000000",
    "DOCSUM_INTAKE_OWNERS": '{"alice": {"file_roots": ["/srv/alice"]}}',
    "DOCSUM_TASKS_PER_MINUTE": "30",
    # ParserSettings
    "DOCSUM_MAX_DOCUMENT_CHARS": "4000000",
    "DOCSUM_MAX_PDF_PAGES": "100",
    "DOCSUM_MAX_DOCX_UNZIPPED_BYTES": "2097152",
    "DOCSUM_MAX_ZIP_ENTRIES": "500",
    "DOCSUM_MAX_HTML_BYTES": "1048576",
    "DOCSUM_MAX_OCR_PAGES": "40",
    "DOCSUM_OCR_TESSDATA": "/srv/tessdata",
    "DOCSUM_OCR_LANGUAGES": "eng",
    "DOCSUM_PARSE_TIMEOUT_S": "60",
    "DOCSUM_PARSE_MEMORY_BYTES": "536870912",
    "DOCSUM_PARSE_WORKER_IDLE_S": "0",
    # ChunkerSettings
    "DOCSUM_CHUNK_CHARS": "1500",
    "DOCSUM_OVERLAP_CHARS": "100",
    "DOCSUM_CONTEXT_AFTER_CHARS": "150",
    "DOCSUM_MAX_CHUNKS_PER_DOCUMENT": "500",
    # SummarizerSettings
    "DOCSUM_LLM_INPLACE_ATTEMPTS": "3",
    "DOCSUM_LLM_RETRY_DELAY_S": "10",
    "DOCSUM_LEASE_TTL_S": "20",
    "DOCSUM_LLM_BATCH_POLL_S": "5",
    "DOCSUM_LLM_BATCH_GATHER_S": "3",
    "DOCSUM_LLM_BATCH_MAX_LINES": "1000",
    "DOCSUM_LLM_BATCH_MAX_BYTES": "1048576",
    "DOCSUM_LLM_BATCH_DEADLINE_MARGIN_S": "600",
    "DOCSUM_ADMISSION_WINDOW": "24",
    "DOCSUM_ADMISSION_SPARE": "6",
    "DOCSUM_ADMISSION_INTERVAL_S": "0.2",
    "DOCSUM_ADMISSION_HOLD_S": "30",
    "DOCSUM_OWNER_WEIGHTS": "alice=3,bob=1",
    "DOCSUM_URGENT_CREDIT_TOKENS": "8000",
    "DOCSUM_BACKGROUND_AFTER_S": "120",
    "DOCSUM_ADMISSION_ORDER": "fifo",
    # MergerSettings
    "DOCSUM_TASK_TTL_S": "3600",
    "DOCSUM_MAINTENANCE_INTERVAL_S": "15",
    # GatewaySettings
    "DOCSUM_GATEWAY_HOST": "0.0.0.0",
    "DOCSUM_GATEWAY_PORT": "8001",
    "DOCSUM_API_KEYS": "alice=alice-key-0123456789abcdef",
    "DOCSUM_UPLOAD_SPOOL_BYTES": "1024",
    "DOCSUM_UPLOAD_INFLIGHT_BYTES": "2000000",
    "DOCSUM_UPLOAD_INFLIGHT_BYTES_PER_OWNER": "1000000",
    "DOCSUM_UPLOAD_IDLE_S": "20",
    "DOCSUM_WS_MAX_MESSAGE_BYTES": "2048",
    "DOCSUM_WS_TICKET_TTL_S": "10",
    "DOCSUM_WS_TICKET_SECRET": "ticket-secret-0123456789abcdef0123",
    "DOCSUM_PROGRESS_HEARTBEAT_S": "5",
    "DOCSUM_PROGRESS_POLL_S": "2",
    "DOCSUM_PROGRESS_STREAMS_PER_OWNER": "5",
    "DOCSUM_PROGRESS_STREAMS_MAX": "50",
    "DOCSUM_PROGRESS_BATCH_BYTES": "8192",
    "DOCSUM_PROGRESS_STALL_S": "20",
    "DOCSUM_PROGRESS_RETAIN_S": "3600",
    "DOCSUM_IDEMPOTENCY_KEY_TTL_S": "600",
    "DOCSUM_WEBHOOK_POLL_S": "2",
    "DOCSUM_WEBHOOK_BATCH": "5",
    "DOCSUM_WEBHOOK_BACKOFF_FIRST_S": "3",
    "DOCSUM_WEBHOOK_BACKOFF_MAX_S": "60",
    "DOCSUM_WEBHOOK_RETRY_FOR_S": "3600",
    "DOCSUM_WEBHOOK_TIMEOUT_S": "4",
    "DOCSUM_WEBHOOK_RESPONSE_MAX_BYTES": "1024",
    "DOCSUM_WEBHOOK_RETAIN_S": "7200",
    "DOCSUM_ADMIN_KEY": "admin-key-0123456789abcdef",
    "DOCSUM_REDRIVES_PER_MINUTE": "3",
    "DOCSUM_REDRIVE_IDLE_S": "10",
}


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)


def unread(model: type[Settings], group: type[Settings]) -> list[str]:
    """The settings of `group` that `model`, built from the environment, does not hold as `group` reads them."""
    built, reference = model(_env_file=None), group(_env_file=None)  # type: ignore[call-arg]
    return [
        field
        for field in group.model_fields
        if field not in model.model_fields or getattr(built, field) != getattr(reference, field)
    ]


def defaults(model: type[Settings]) -> list[str]:
    """The settings of `model` that, built from the environment, still hold their default."""
    built = model(_env_file=None)  # type: ignore[call-arg]
    return [
        field
        for field, info in model.model_fields.items()
        if getattr(built, field) == info.get_default(call_default_factory=True)
    ]


def _definition(info: FieldInfo) -> tuple[Any, ...]:
    factory = info.default_factory
    made = factory() if factory is not None else None  # type: ignore[call-arg]
    return repr(info.annotation), repr(info.default), repr(made), repr(info.metadata), repr(info.validation_alias)


def conflicts(models: tuple[type[Settings], ...]) -> list[str]:
    """Settings that two of `models` define differently (type, default, bounds or variable)."""
    seen: dict[str, tuple[type[Settings], tuple[Any, ...]]] = {}
    found = []
    for model in models:
        for field, info in model.model_fields.items():
            definition = _definition(info)
            first = seen.setdefault(field, (model, definition))
            if first[1] != definition:
                found.append(f"{field}: {first[0].__name__} and {model.__name__}")
    return found


def test_the_environment_names_every_setting_of_every_class() -> None:
    named = {env_name(model, field) for model in SERVICE_SETTINGS.values() for field in model.model_fields}
    assert named == set(ENVIRONMENT)


@pytest.mark.usefixtures("environment")
def test_each_service_reads_every_setting_of_the_groups_it_includes() -> None:
    for name, model in SERVICE_SETTINGS.items():
        assert defaults(model) == [], name  # every setting came from its variable
        for group in GROUPS:
            if issubclass(model, group):
                assert unread(model, group) == [], (name, group.__name__)


def test_every_group_is_shared_by_services_and_every_setting_is_read_by_one() -> None:
    for group in GROUPS[1:]:  # the base: every service
        including = [name for name, model in SERVICE_SETTINGS.items() if issubclass(model, group)]
        assert len(including) >= 2, (group.__name__, including)
    read = {field for model in SERVICE_SETTINGS.values() for field in model.model_fields}
    assert {field for group in GROUPS for field in group.model_fields} <= read


def test_no_two_classes_define_a_setting_differently() -> None:
    assert conflicts((*GROUPS, *SERVICE_SETTINGS.values())) == []


@pytest.mark.usefixtures("environment")
def test_the_checks_catch_a_class_that_reads_a_group_its_own_way() -> None:
    class Prefixed(ChunkerSettings):
        model_config = SettingsConfigDict(env_prefix="OTHER_")

    class Redefined(ChunkerSettings):
        llm_max_attempts: int = Field(3, ge=1)

    assert "llm_model" in unread(Prefixed, LLMSettings)
    assert "chunk_chars" in defaults(Prefixed)
    assert conflicts((ChunkerSettings, Redefined)) == ["llm_max_attempts: ChunkerSettings and Redefined"]
