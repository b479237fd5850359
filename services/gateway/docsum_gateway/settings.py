"""The gateway's settings: the shared ones, the intake's and the LLM's (for task views), the gateway's
own, and the check made before it starts.

A setting that cannot work (a value out of range, an API key too short) is a `ConfigError` naming the
environment variable; `__main__` prints it as one line and exits non-zero, so `make up` can say which
service refused to start and why.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, ValidationError, model_validator

from docsum_shared.settings import IntakeSettings, LLMSettings, SettingConflict, bad_setting, placeholder_in

from .security import MIN_KEY_CHARS, parse_api_keys

# 32 random characters: what deploy/k8s/base/secret.yaml asks for; whoever knows it can mint tickets.
MIN_TICKET_SECRET_CHARS = 32
KiB = 1024
MiB = 1024 * KiB
# PostgreSQL's bytea (where the files go) holds at most 1 GiB - 1 byte.
BYTEA_MAX = 1024 * MiB - 1


class ConfigError(Exception):
    """A setting the gateway cannot start with: `setting` is the environment variable to fix."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        self.message = message


class GatewaySettings(IntakeSettings, LLMSettings):
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 8000
    # "owner=key,owner2=key2": who may call the gateway, and as whom.
    api_keys: str = ""

    # How much of each uploaded file is kept in memory before it spills to a temporary file.
    upload_spool_bytes: int = Field(64 * KiB, ge=0)
    # The upload bytes one gateway process holds at once (in memory and in temporary files), in all and
    # per owner: beyond, 503 (429 for the owner) with Retry-After. Under the 2 GiB /tmp of the Kubernetes pod.
    # Booked as the bytes arrive (what a request declares books nothing).
    upload_inflight_bytes: int = Field(1024 * MiB, ge=1)
    upload_inflight_bytes_per_owner: int = Field(512 * MiB, ge=1)
    # An upload whose body sends nothing for this long is dropped (408) and gives back what it booked.
    upload_idle_s: float = Field(30.0, gt=0, le=3600)
    # A WebSocket ticket (POST /v1/tasks/{task_id}/ticket) is good for one connection within this time.
    ws_ticket_ttl_s: float = Field(30.0, gt=0, le=3600)
    # Signs WebSocket tickets; every replica needs the same one. Unset: derived from the API and admin keys.
    ws_ticket_secret: SecretStr | None = None

    # The largest message the server takes from a WebSocket client; a longer one closes the connection
    # (1009) before it is read. The progress WebSocket takes none (it closes on any message with 1008):
    # this bounds what the server buffers before the route sees it (uvicorn's default is 16 MiB a socket).
    ws_max_message_bytes: int = Field(4 * KiB, ge=125, le=16 * MiB)

    # Progress streams (SSE and WebSocket on /v1/tasks/{task_id}/events).
    # An idle stream gets a heartbeat this often (SSE comment line, WebSocket ping), so proxies keep it.
    progress_heartbeat_s: float = Field(15.0, gt=0, le=300)
    # A stream reads its task's log at least this often, whether or not a NOTIFY woke it.
    progress_poll_s: float = Field(1.0, gt=0, le=60)
    # Open streams this gateway process serves for one owner, and in all (beyond: 429 for SSE, a
    # WebSocket close 1013 "try again later"); each stream holds a connection and up to the bytes below.
    progress_streams_per_owner: int = Field(20, ge=1)
    progress_streams_max: int = Field(200, ge=1)
    # The most log text a stream reads (and holds) at once; a longer backlog is sent in several reads.
    progress_batch_bytes: int = Field(256 * KiB, ge=4 * KiB)
    # A client that has not taken what was sent for this long is dropped (it reconnects with Last-Event-ID).
    progress_stall_s: float = Field(30.0, gt=0, le=600)
    # A finished task's progress log is deleted this long after the task ended (its summaries stay).
    progress_retain_s: float = Field(7 * 24 * 3600.0, gt=0)
    # An Idempotency-Key of POST /v1/tasks is kept this long after its first use: a retry within it gets the
    # first answer; after it the key is free again (and pruned by the same loop as the progress log).
    idempotency_key_ttl_s: float = Field(24 * 3600.0, gt=0)

    # --- Webhooks (README: "Webhooks") ---
    # Each delivery's outbox is looked at this often for deliveries due (a failed one waits its back-off).
    webhook_poll_s: float = Field(1.0, gt=0, le=60)
    # Deliveries one gateway process sends at once (claimed with FOR UPDATE SKIP LOCKED: replicas share).
    webhook_batch: int = Field(20, ge=1, le=1000)
    # A failed delivery waits webhook_backoff_first_s, then twice as long each time up to webhook_backoff_max_s,
    # and is given up webhook_retry_for_s after its event (a day, as Standard Webhooks senders do).
    webhook_backoff_first_s: float = Field(10.0, gt=0)
    webhook_backoff_max_s: float = Field(3600.0, gt=0)
    webhook_retry_for_s: float = Field(24 * 3600.0, gt=0)
    # An endpoint must answer within this long (connect, and between two reads; the whole request: 3x).
    webhook_timeout_s: float = Field(10.0, gt=0, le=300)
    # The most of an endpoint's answer read (its status is what counts; the rest is not read).
    webhook_response_max_bytes: int = Field(64 * KiB, ge=0)
    # A delivery done (delivered, or given up) is kept in the delivery log this long, then pruned.
    webhook_retain_s: float = Field(7 * 24 * 3600.0, gt=0)

    # --- Stored API keys and the task rate limit (README: "API keys and rate limits") ---
    # The operator's credential for /v1/keys (create, list, revoke stored keys). Unset: no /v1/keys routes.
    admin_key: SecretStr | None = None
    # Tasks one owner may create per minute: `tasks_per_minute` of IntakeSettings (the parser counts a
    # producer's new tasks against the same limit); beyond it POST /v1/tasks answers 429.

    # Re-drives one owner may start per minute (POST /v1/reconcile, resume, retry), across every gateway
    # replica, one at a time (beyond: 429). 0: no rate, still one at a time.
    redrives_per_minute: int = Field(6, ge=0)
    # POST /v1/reconcile leaves alone a task or document that moved within this long: it is being worked on.
    redrive_idle_s: float = Field(30.0, ge=0)

    @model_validator(mode="after")
    def _no_placeholder_api_keys(self) -> GatewaySettings:
        placeholder_in("DOCSUM_API_KEYS", self.api_keys)
        return self

    @property
    def upload_bytes(self) -> int:
        """The most file bytes one task may carry."""
        return min(self.max_task_bytes, self.max_files_per_task * self.max_file_bytes)


def ticket_secret_of(settings: GatewaySettings) -> str | None:
    return settings.ws_ticket_secret.get_secret_value() if settings.ws_ticket_secret else None


def load_settings() -> tuple[GatewaySettings, dict[str, str]]:
    """The settings and the API keys ({key: owner}), or a ConfigError for the first bad setting."""
    try:
        settings = GatewaySettings()
    except ValidationError as exc:
        raise ConfigError(*bad_setting(GatewaySettings, exc)) from None
    return settings, check(settings)


def check(settings: GatewaySettings) -> dict[str, str]:
    """What the types alone do not say; returns the API keys."""
    try:
        api_keys = parse_api_keys(settings.api_keys)
    except ValueError as exc:
        raise ConfigError("DOCSUM_API_KEYS", str(exc)) from None
    admin = settings.admin_key.get_secret_value() if settings.admin_key else None
    ticket = ticket_secret_of(settings)
    try:
        placeholder_in("DOCSUM_ADMIN_KEY", admin)
        placeholder_in("DOCSUM_WS_TICKET_SECRET", ticket)
    except SettingConflict as exc:
        raise ConfigError(exc.setting, str(exc)) from None
    if ticket is not None and len(ticket) < MIN_TICKET_SECRET_CHARS:
        raise ConfigError(
            "DOCSUM_WS_TICKET_SECRET", f"has {len(ticket)} characters; it needs {MIN_TICKET_SECRET_CHARS} or more"
        )
    if admin is not None and len(admin) < MIN_KEY_CHARS:
        raise ConfigError("DOCSUM_ADMIN_KEY", f"has {len(admin)} characters; it needs {MIN_KEY_CHARS} or more")
    if admin is not None and admin in api_keys:
        raise ConfigError("DOCSUM_ADMIN_KEY", "is also an owner's key in DOCSUM_API_KEYS; give it a key of its own")
    if not api_keys and admin is None:
        raise ConfigError(
            "DOCSUM_API_KEYS",
            "not set: give the gateway at least one 'owner=key' pair, or DOCSUM_ADMIN_KEY to create stored keys",
        )
    if settings.max_file_bytes > BYTEA_MAX:
        raise ConfigError("DOCSUM_MAX_FILE_BYTES", f"at most {BYTEA_MAX} (what PostgreSQL stores in one value)")
    return api_keys
