"""Settings, read from the environment (pydantic-settings): what every process needs, and the groups
several services share.

`Settings` is what every process reads (Kafka, PostgreSQL, consumers, health, logs, re-drives); each group
that more than one service reads extends it (`LLMSettings`, `BlobSettings`, `IntakeSettings`,
`SizeSettings`, `ReconcileSettings`), and each service's own class (`docsum_<service>.settings`) extends the groups it
reads. Defaults work on one machine with the stack that `make up` starts; every name can be overridden
with an environment variable `DOCSUM_<NAME>` (plus the standard `DATABASE_URL`, `KAFKA_BOOTSTRAP_SERVERS`,
`OPENAI_BASE_URL` and `OPENAI_API_KEY`).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Annotated, Literal, TypeVar, cast
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .approval import Ceiling
from .blobs import parse_blob_store, parse_s3_uri
from .intake_access import PRODUCER_PATTERN, IntakeAccess, OwnerAccess
from .options import Mode, TaskOptions


class SettingConflict(ValueError):
    """Settings that cannot work together: `setting` is the environment variable to fix."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting


# What the shipped secrets say until someone replaces them (deploy/k8s/base/secret.yaml): a deployment that
# kept one would run on a secret everyone who read the repository knows.
PLACEHOLDER = "change-me"


def placeholder_in(setting: str, value: str | None) -> None:
    """SettingConflict when `value` is still a shipped placeholder."""
    if value and PLACEHOLDER in value.casefold():
        raise SettingConflict(
            setting, "still holds the shipped placeholder (CHANGE-ME): replace it with a secret of your own"
        )


class Settings(BaseSettings):
    """What every process reads: Kafka, PostgreSQL, the consumers, health, logs and traces, and what the
    shared code several services run reads (re-drives, the producers' intake topics)."""

    # hide_input_in_errors: a failed validation prints no input (the input holds every secret).
    model_config = SettingsConfigDict(
        env_prefix="DOCSUM_", env_ignore_empty=True, extra="ignore", hide_input_in_errors=True
    )

    # Infrastructure
    kafka_bootstrap_servers: str = Field(
        "127.0.0.1:9092",
        validation_alias=AliasChoices("KAFKA_BOOTSTRAP_SERVERS", "DOCSUM_KAFKA_BOOTSTRAP_SERVERS"),
    )
    database_url: str = Field(
        "postgresql://docsum@127.0.0.1:5433/docsum",
        validation_alias=AliasChoices("DATABASE_URL", "DOCSUM_DATABASE_URL"),
    )
    # Prepended to every topic and consumer group name, so that several deployments (or test runs)
    # can share one cluster without seeing each other's events. It names the deployment too: each task
    # records the one that created it, and a deployment's summarizers admit only their own tasks' work
    # (several deployments may share one database as well).
    topic_prefix: str = ""
    topic_partitions: int = Field(6, ge=1)
    chunk_topic_partitions: int = Field(12, ge=1)  # chunk-created spreads one document's chunks
    db_pool_max: int = Field(10, ge=1)

    # Kafka security: every client (services, gateway, tests) connects with these (kafka.client_options).
    # SASL needs a mechanism and both credentials; SSL verifies the broker with the CA file (or the
    # system's CAs) and presents a client certificate when one is given. The secrets are SecretStr:
    # shown as '**********' in every repr and log line.
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: str | None = None  # PEM: the CA that signed the broker's certificate
    kafka_ssl_certfile: str | None = None  # PEM: the client certificate (mutual TLS)
    kafka_ssl_keyfile: str | None = None  # PEM: its private key
    kafka_ssl_key_password: SecretStr | None = None  # the private key's password, if it has one

    @model_validator(mode="after")
    def _kafka_security_is_complete(self) -> Settings:
        protocol = self.kafka_security_protocol
        sasl = {
            "DOCSUM_KAFKA_SASL_MECHANISM": self.kafka_sasl_mechanism,
            "DOCSUM_KAFKA_SASL_USERNAME": self.kafka_sasl_username,
            "DOCSUM_KAFKA_SASL_PASSWORD": self.kafka_sasl_password,
        }
        if protocol.startswith("SASL_"):
            if missing := [name for name, value in sasl.items() if not value]:
                raise SettingConflict(missing[0], f"not set, and DOCSUM_KAFKA_SECURITY_PROTOCOL={protocol} needs it")
        elif stray := [name for name, value in sasl.items() if value]:
            raise SettingConflict(stray[0], f"set, but DOCSUM_KAFKA_SECURITY_PROTOCOL={protocol} uses no SASL")
        if self.kafka_ssl_keyfile and not self.kafka_ssl_certfile:
            raise SettingConflict("DOCSUM_KAFKA_SSL_CERTFILE", "not set, and DOCSUM_KAFKA_SSL_KEYFILE needs it")
        return self

    @model_validator(mode="after")
    def _no_placeholder_secrets(self) -> Settings:
        placeholder_in("DATABASE_URL", urlsplit(self.database_url).password)
        placeholder_in("DOCSUM_KAFKA_SASL_PASSWORD", _secret(self.kafka_sasl_password))
        placeholder_in("DOCSUM_KAFKA_SSL_KEY_PASSWORD", _secret(self.kafka_ssl_key_password))
        return self

    # Consumers. Messages of one key are handled in order, up to `max_inflight` keys at once; the
    # offset committed is the lowest unfinished one, so a crash loses nothing.
    max_inflight: int = Field(4, ge=1)
    session_timeout_ms: int = Field(10_000, ge=1_000)
    heartbeat_interval_ms: int = Field(3_000, ge=100)
    max_poll_interval_ms: int = Field(300_000, ge=1_000)
    # On SIGTERM or a rebalance, how long in-flight work may take to finish before it is handed back.
    drain_timeout_s: float = Field(20.0, ge=0)

    # Operations: the health port (/healthz, /readyz, /metrics; see health.py) listens only when
    # `health_port` is set, and only on `health_host`.
    health_host: str = "127.0.0.1"
    health_port: int | None = Field(None, ge=1, le=65535)

    # Re-drives (redrive.py, run by the merger's maintenance and the gateway's reconcile).
    # A document that reconcile re-drives this many times in a row without any progress is FAILED
    # with its last error (nothing is re-driven forever).
    redrive_limit: int = Field(10, ge=1)
    # A re-drive publishes its events in batches of this many, each acknowledged before the next is
    # sent: the producer's buffer and the time a re-drive holds its process stay bounded, whatever the backlog.
    redrive_batch_events: int = Field(500, ge=1)
    # A chunk a re-drive announced less than this long ago, whose announcement no summarizer has taken up
    # yet, is on its way (queued behind other work): re-drives (resume, retry, reconcile) leave it alone.
    # Older, it is announced again: a message can be lost (dead-lettered, or a re-drive that stopped
    # between marking and publishing). 0: every re-drive announces every unfinished chunk.
    redrive_announced_s: float = Field(300.0, ge=0)

    # The systems that publish documents on Kafka, each on its own topic intake.<producer> (which the
    # broker's ACLs let only that producer write), and the owners each may act for: Kafka does not tell
    # a consumer who produced a message, so the topic does. '{"crm": ["alice", "bob"]}'; empty: none.
    # Here, not with the other intake settings: every process that creates topics creates these (kafka.py).
    intake_producers: dict[str, list[str]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _producers_are_topic_names(self) -> Settings:
        for producer in self.intake_producers:
            if not PRODUCER_PATTERN.fullmatch(producer):
                raise SettingConflict(
                    "DOCSUM_INTAKE_PRODUCERS",
                    f"producer {producer[:80]!r} is not 1-100 characters of A-Z a-z 0-9 _ - (it names a topic)",
                )
        return self

    # Logs and traces (logs.py, telemetry.py; OpenTelemetry's own OTEL_* variables configure the export)
    log_format: Literal["text", "json"] = "text"  # json: one JSON object per line (set it under Kubernetes)
    trace_file: str | None = None  # also write every finished span to this file, one JSON line each (tests)

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"

    def group(self, service: str) -> str:
        return f"{self.topic_prefix}docsum-{service}"

    @property
    def deployment(self) -> str:
        """The deployment this process belongs to, as tasks record it (migration 0031): its topic prefix,
        since the topics are what a deployment's services share and other deployments do not."""
        return self.topic_prefix


class SizeSettings(Settings):
    """Where a document's size level ends (SMALL, MEDIUM, LARGE): the parser levels each document, the
    chunker cuts a SMALL one as a single chunk."""

    small_max_chars: int = Field(8_000, ge=100)
    medium_max_chars: int = Field(100_000, ge=1_000)


class ReconcileSettings(Settings):
    """How long unfinished work may stay still: the merger's maintenance re-drives what has been idle this
    long, so whoever works on a chunk or a merge (summarizer, merger) marks it active more often."""

    reconcile_idle_s: float = Field(60.0, gt=0)


class LLMSettings(Settings):
    """The LLM: the backend and its limits, what answers may cost and what a task may spend. Read by
    whoever calls it (docsum_llm, for the summarizer and the merger), plans its calls (the chunker) or
    shows its usage (readmodel/views.py, for the gateway and the merger's results)."""

    llm_backend: Literal["extractive", "openai"] = "extractive"
    llm_model: str = "gpt-4o-mini"
    # A streamed call (`llm_stream`) that produces no token for `llm_stall_timeout_s` failed; its first
    # token may take as long as reading the prompt at `llm_min_prompt_tps` tokens a second. Any call may
    # take that long plus writing its answer's bound at `llm_min_output_tps`: a slow local model is never
    # cut off.
    llm_stall_timeout_s: float = Field(60.0, gt=0)
    llm_min_prompt_tps: float = Field(10.0, gt=0)
    llm_min_output_tps: float = Field(2.0, gt=0)
    # Which calls stream: "auto" those to the servers that produce tokens slowly and may stall (llama.cpp's
    # server and Ollama, as the probe finds them: with `llm_probe` off, none), plain calls elsewhere under
    # the ceiling above (a stream costs the client several times a plain call's CPU); "always"; "never".
    llm_stream: Literal["auto", "always", "never"] = "auto"
    # Every answer is bounded (max_tokens): these are for a "standard" length; "brief" gets half,
    # "detailed" twice as much.
    llm_max_tokens_chunk: int = Field(300, ge=16)
    llm_max_tokens_document: int = Field(600, ge=16)
    llm_max_tokens_task: int = Field(800, ge=16)
    # Ask the endpoint at start what it can (llama.cpp /props, Ollama /api/show, vLLM /v1/models) and
    # plan under the context window it states.
    llm_probe: bool = True
    # Sent as `frequency_penalty` when set (-2 to 2): small local models tend to copy their input
    # word for word instead of summarizing it, and 0.5 stops most of that.
    llm_frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    # How the model is asked where its sentences come from: "json_schema" (response_format; an endpoint
    # that refuses it gets "text" from then on), "text" (ids in brackets after each line), or "off" (not
    # asked; its sentences are matched to the text afterwards).
    llm_citations: Literal["json_schema", "text", "off"] = "json_schema"
    # Failed attempts in all after which a chunk (its retries: the summarizer's settings) or a merge is
    # FAILED.
    llm_max_attempts: int = Field(4, ge=1)
    llm_max_inflight: int = Field(4, ge=1)  # LLM calls in flight per process (summarizer, merger)
    # The provider's limits: requests and tokens per minute for the whole cluster (None: no limit), and
    # the model's input budget in tokens (None: unlimited; merges then never split).
    llm_rpm: float | None = Field(None, gt=0)
    llm_tpm: float | None = Field(None, gt=0)
    llm_context_tokens: int | None = Field(None, ge=500)
    # The result cache is per owner: an owner's request is never answered from another owner's, so no
    # answer, figure or timing tells one owner what another submitted. A single-tenant deployment may
    # share it (every owner's identical requests then pay once).
    shared_cache: bool = False
    # Cost approval: a task whose planned LLM calls or cost exceed its owner's ceiling waits for the
    # owner (resume approves, cancel drops). The defaults for every owner, and per owner
    # '{"alice": {"calls": 5000, "cost_usd": 20}}' (an owner listed there gets exactly that ceiling).
    task_max_calls: int | None = Field(None, ge=1)
    task_max_cost_usd: float | None = Field(None, gt=0)
    owner_ceilings: dict[str, Ceiling] = Field(default_factory=dict)
    # USD per million tokens, per model: {"gpt-4o-mini": [0.15, 0.60]} (prompt, completion).
    llm_prices: dict[str, tuple[float, float]] = Field(default_factory=dict)
    # The mode of a task that does not say (TaskOptions.mode): "realtime", "flex" or "batch".
    llm_mode: Mode = "realtime"
    # A flex call refused this many times in a row for lack of capacity is sent at the default tier.
    llm_flex_tries: int = Field(3, ge=1)
    # What a call answered at the flex tier costs, and a batch line, relative to llm_prices.
    llm_flex_price_factor: float = Field(0.5, ge=0)
    llm_batch_price_factor: float = Field(0.5, ge=0)
    openai_base_url: str | None = Field(None, validation_alias=AliasChoices("OPENAI_BASE_URL"))
    openai_api_key: str | None = Field(None, validation_alias=AliasChoices("OPENAI_API_KEY"))
    # An owner's share relative to the others' (1 when not listed): "alice=3,bob=1" gives alice three
    # times bob's tokens while both have work waiting. The summarizer's admission orders owners by it;
    # the merger charges its calls to the owners' shares by it (docsum_llm/shares.py).
    owner_weights: Annotated[dict[str, float], NoDecode] = Field(default_factory=dict)

    @field_validator("owner_weights", mode="before")
    @classmethod
    def _weights_of(cls, value: object) -> object:
        return parse_weights(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _no_placeholder_api_key(self) -> LLMSettings:
        placeholder_in("OPENAI_API_KEY", self.openai_api_key)
        return self

    def max_answer_tokens(self, kind: str, length: str) -> int:
        base = {"chunk": self.llm_max_tokens_chunk, "document": self.llm_max_tokens_document}.get(
            kind, self.llm_max_tokens_task
        )
        return {"brief": base // 2, "detailed": base * 2}.get(length, base)

    def ceiling(self, owner: str) -> Ceiling:
        return self.owner_ceilings.get(owner) or Ceiling(calls=self.task_max_calls, cost_usd=self.task_max_cost_usd)

    def mode(self, options: TaskOptions) -> Mode:
        """The task's mode: its own, else this deployment's default."""
        return options.mode or self.llm_mode

    def cost_usd(self, model: str, prompt_tokens: int, completion_tokens: int, tier: str = "realtime") -> float:
        """What calls cost at `tier`, the tier they were answered at ("realtime", "flex" or "batch")."""
        prompt_price, completion_price = self.llm_prices.get(model, (0.0, 0.0))
        factor = {"flex": self.llm_flex_price_factor, "batch": self.llm_batch_price_factor}.get(tier, 1.0)
        return (prompt_tokens * prompt_price + completion_tokens * completion_price) * factor / 1_000_000


def parse_weights(text: str) -> dict[str, float]:
    """'alice=3,bob=1' as {'alice': 3.0, 'bob': 1.0}; a weight is a positive number."""
    weights: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        owner, sep, number = item.partition("=")
        try:
            weight = float(number)
        except ValueError:
            weight = math.nan
        if not sep or not owner.strip() or not math.isfinite(weight) or weight <= 0:
            raise ValueError(f"{item[:80]!r} is not owner=weight with a positive weight (as in alice=3,bob=1)")
        weights[owner.strip()] = weight
    return weights


def endpoint_key(settings: LLMSettings) -> str:
    """The endpoint and model the rate limit and the learned budget belong to."""
    return f"{settings.openai_base_url or 'openai'}|{settings.llm_model}"


class BlobSettings(Settings):
    """Where document bytes are kept (docsum_shared.blobs): written by the gateway and the parser's intake,
    read by the parser, swept of orphans by the merger's maintenance."""

    # "postgresql" (the default: in the blobs table) or s3://bucket/prefix: S3-compatible storage, with
    # credentials, endpoint and region from the standard AWS variables (AWS_ACCESS_KEY_ID,
    # AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_REGION). A bucket and prefix belong to one database.
    blob_store: str = "postgresql"
    # An object no row names (its writer was killed before the row, or the row was refused) is removed once
    # it was last written this long ago: longer than any upload takes from its object to its row.
    blob_orphan_grace_s: float = Field(3600.0, gt=0)
    blob_sweep_interval_s: float = Field(3600.0, gt=0)  # how often the maintenance looks for orphans

    @model_validator(mode="after")
    def _blob_store_is_known(self) -> BlobSettings:
        try:
            parse_blob_store(self.blob_store)
        except ValueError as exc:
            raise SettingConflict("DOCSUM_BLOB_STORE", f"{exc}: use postgresql or s3://bucket/prefix") from None
        return self


class IntakeSettings(BlobSettings):
    """What a task may bring and how fast an owner may create tasks, whether it comes through the gateway
    or by a producer on Kafka (the parser's intake), and where a producer's documents may come from."""

    max_file_bytes: int = Field(50 * 1024 * 1024, ge=1)
    max_files_per_task: int = Field(100, ge=1)
    # Decoded bytes of one inline document (content_base64); the default fits a 1 MiB broker message.
    intake_inline_max_bytes: int = Field(700 * 1024, ge=1)
    # Directories whose files a file:// URI may name (symlinks and .. resolved first); empty: none.
    intake_file_roots: list[str] = Field(default_factory=list)
    # Hosts an http(s):// URI may name; a loopback, link-local or private address only if listed itself.
    intake_http_hosts: list[str] = Field(default_factory=list)
    # Ports an http(s):// URI may name (on any allowed host): by default only the web's own.
    intake_http_ports: list[int] = Field(default_factory=lambda: [80, 443])
    # Buckets and key prefixes an s3:// URI may name ("s3://bucket" or "s3://bucket/prefix"), read with the
    # AWS_* variables' credentials and endpoint.
    intake_s3_places: list[str] = Field(default_factory=list)
    intake_http_timeout_s: float = Field(10.0, gt=0)  # to connect, and between two reads
    intake_http_total_s: float = Field(120.0, gt=0)  # for a whole download
    # All the files of one task together (each file is also held to max_file_bytes), from any producer.
    max_task_bytes: int = Field(256 * 1024 * 1024, ge=1)
    # Where an owner's documents may come from:
    # '{"alice": {"file_roots": [...], "http_hosts": [...], "s3_places": ["s3://alice-docs/in"]}}'
    # (an owner listed gets exactly that; the others the global intake_file_roots and intake_http_hosts). A
    # file is read only for the owners of the deepest root holding it (intake_access.OwnerAccess.other_roots).
    intake_owners: dict[str, IntakeAccess] = Field(default_factory=dict)
    # Tasks one owner may create per minute, through the gateway or by a producer on Kafka, counted in
    # PostgreSQL across every replica (docsum_shared.taskrate). 0: no limit.
    tasks_per_minute: int = Field(60, ge=0)

    @model_validator(mode="after")
    def _s3_places_are_buckets(self) -> IntakeSettings:
        places = {"DOCSUM_INTAKE_S3_PLACES": self.intake_s3_places}
        places |= {f"DOCSUM_INTAKE_OWNERS ({o}: s3_places)": e.s3_places for o, e in self.intake_owners.items()}
        for setting, listed in places.items():
            for place in listed:
                try:
                    parse_s3_uri(place)
                except ValueError as exc:
                    raise SettingConflict(setting.split(" ")[0], f"{setting}: {exc}") from None
        return self

    def intake_access(self, owner: str) -> OwnerAccess:
        """Where `owner`'s documents may come from: its own entry of intake_owners, else the global lists."""
        return OwnerAccess.of(owner, self.intake_owners.get(owner), self)


S = TypeVar("S", bound=Settings)


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def env_name(model: type[BaseSettings], field: str) -> str:
    """The environment variable that sets `field` of `model`."""
    info = model.model_fields.get(field)
    alias = info.validation_alias if info is not None else None
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return f"DOCSUM_{field.upper()}"


def bad_setting(model: type[BaseSettings], exc: ValidationError) -> tuple[str, str]:
    """(the environment variable, what is wrong with it) for the first error of `exc`."""
    error = exc.errors()[0]
    conflict = error.get("ctx", {}).get("error")
    if isinstance(conflict, SettingConflict):  # a check across settings names the one to fix
        return conflict.setting, str(conflict)
    field = str(error["loc"][0]) if error["loc"] else "?"
    return env_name(model, field), error["msg"]


@lru_cache
def get_settings(model: type[Settings] = Settings) -> Settings:
    """The settings of `model`, read once per process."""
    return model()


def service_settings(service: str, model: type[S]) -> S:
    """A service's settings; a bad one ends the service with one line naming it, not a traceback."""
    try:
        return cast(S, get_settings(model))  # get_settings(model) made it: an instance of model
    except ValidationError as exc:
        setting, problem = bad_setting(model, exc)
        raise SystemExit(f"docsum-{service}: bad setting {setting}: {problem}") from None
