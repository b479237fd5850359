"""The gateway's FastAPI application, and the server that serves it (`server`: the same for `__main__` and
for the in-process runner)."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import asyncpg
import uvicorn
from fastapi import FastAPI, Request, Response, status
from fastapi.exception_handlers import http_exception_handler
from prometheus_fastapi_instrumentator import Instrumentator
from starlette.exceptions import HTTPException as StarletteHTTPException

from docsum_shared import telemetry
from docsum_shared.blobs import BlobStore, ObjectStoreUnavailable
from docsum_shared.db import connect_pool, migrate
from docsum_shared.handlers import Publish
from docsum_shared.health import database_ready, listen, serve_health
from docsum_shared.kafka import KafkaPublish, ensure_topics, make_producer
from docsum_shared.stage import Attach

from . import settings as gateway_settings
from .progress.recorder.consumer import record_until
from .progress.streams import ProgressFeed
from .routers import keys, maintenance, progress, tasks, web, webhooks
from .security import Tickets, ticket_secret
from .settings import GatewaySettings
from .stage import STAGE
from .uploads import SpoolBudget


@asynccontextmanager
async def on_kafka(settings: GatewaySettings, pool: asyncpg.Pool) -> AsyncIterator[Publish]:
    """How the application reaches the pipeline unless a runner attaches it otherwise (Attach): the
    routes publish with a producer of their own, the progress recorder reads every topic, and the
    stage's loop prunes the log beside it."""
    await ensure_topics(settings)
    producer = make_producer(settings)
    await producer.start()
    port = KafkaPublish(producer, settings)
    # The stage's loop (the pruning), without building its consumer: the recorder builds its own.
    loops = STAGE.loops(settings, pool, STAGE.deps(settings, pool)) if STAGE.loops is not None else None
    pruning = asyncio.create_task(loops(port)) if loops is not None else None
    stop_recording = asyncio.Event()
    recording = asyncio.create_task(record_until(stop_recording, settings, pool))
    try:
        yield port
    finally:
        if pruning is not None:
            pruning.cancel()
        stop_recording.set()
        try:
            await asyncio.wait_for(recording, settings.drain_timeout_s + 5)
        except Exception:  # noqa: BLE001 - stopping anyway; what it did not commit is redelivered
            recording.cancel()
        await producer.stop()


# What a client told that the object store is away waits: the SDK has retried for seconds already.
OBJECT_STORE_RETRY_AFTER_S = 5


def server(settings: GatewaySettings, app: FastAPI, **options: Any) -> uvicorn.Config:
    """How the application is served, wherever it runs."""
    return uvicorn.Config(
        app,
        log_config=None,
        # h11, whatever else is installed: its bound on a request's line and headers (16 KB) holds.
        http="h11",
        ws_ping_interval=settings.progress_heartbeat_s,  # the progress WebSocket's heartbeat
        ws_max_size=settings.ws_max_message_bytes,
        # No compression: a client's 16 KB of deflated bytes would inflate to a whole message in the server,
        # and the progress entries are small.
        ws_per_message_deflate=False,
        **options,
    )


def serving(settings: GatewaySettings, attach: Attach) -> uvicorn.Config:
    """The gateway stage's front (docsum_pipeline.plan.FRONTS): the application reaching the pipeline through `attach`,
    served as `__main__` serves it."""
    return server(settings, create_app(settings, attach=attach))


def create_app(
    settings: GatewaySettings | None = None,
    health_socket: socket.socket | None = None,
    attach: Attach = on_kafka,
) -> FastAPI:
    """The application; a ConfigError (naming the setting) if the settings cannot work. The health port
    is served on `health_socket` when `__main__` bound it already, else bound at start-up."""
    if settings is None:
        settings, api_keys = gateway_settings.load_settings()
    else:
        api_keys = gateway_settings.check(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as running:  # what it started, stopped in the reverse order
            app.state.pool = await connect_pool(settings.database_url, max_size=settings.db_pool_max)
            running.push_async_callback(app.state.pool.close)
            await migrate(app.state.pool)
            running.push_async_callback(app.state.blobs.close)
            if app.state.blobs.objects is not None:  # botocore's models loaded now, not at the first upload
                await app.state.blobs.objects.client()
            app.state.publish = await running.enter_async_context(attach(settings, app.state.pool))
            app.state.progress = ProgressFeed(
                settings.database_url,
                app.state.pool,
                poll_s=settings.progress_poll_s,
                heartbeat_s=settings.progress_heartbeat_s,
            )
            app.state.progress.start()
            running.push_async_callback(app.state.progress.stop)
            health_sock = health_socket
            if health_sock is None and settings.health_port is not None:
                health_sock = listen(settings.health_host, settings.health_port, "DOCSUM_HEALTH_PORT", "gateway")
            if health_sock is not None:
                health = asyncio.create_task(serve_health(health_sock, database_ready(app.state.pool)))
                running.callback(health.cancel)
            yield

    app = FastAPI(title="docsum", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.api_keys = api_keys
    app.state.blobs = BlobStore.of(settings.blob_store)  # its client made at start-up (lifespan)
    app.state.uploads = SpoolBudget(settings.upload_inflight_bytes, settings.upload_inflight_bytes_per_owner)
    admin_key = settings.admin_key.get_secret_value() if settings.admin_key else None
    app.state.tickets = Tickets(
        ticket_secret(gateway_settings.ticket_secret_of(settings), api_keys, admin_key), settings.ws_ticket_ttl_s
    )
    # HTTP metrics (requests, latency by route template and status), served on the health port only:
    # the API port never shows counts across owners.
    Instrumentator(excluded_handlers=["/healthz", "/readyz"]).instrument(app)
    telemetry.instrument_app(app)  # a span per request, with the OpenTelemetry extra (docsum_shared.telemetry)
    app.include_router(tasks.router)
    app.include_router(maintenance.router)
    app.include_router(progress.router)
    app.include_router(webhooks.router)
    if admin_key is not None:  # no operator credential, no key management
        app.include_router(keys.router)
    web.install(app)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        allowed = _methods_of(app, request.url.path) if exc.status_code == status.HTTP_405_METHOD_NOT_ALLOWED else None
        if allowed:
            # Starlette names the methods of the first route of the path only (POST /v1/tasks, not GET).
            exc.headers = {**(exc.headers or {}), "Allow": ", ".join(allowed)}
        return await http_exception_handler(request, exc)

    @app.exception_handler(ObjectStoreUnavailable)
    async def object_store_away(request: Request, exc: ObjectStoreUnavailable) -> Response:
        # The upload's objects could not be written (the task was not made): the client sends it again.
        away = StarletteHTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "the document store (DOCSUM_BLOB_STORE) is not answering now: nothing was stored; send the"
            f" request again after Retry-After seconds ({exc})",
            headers={"Retry-After": str(OBJECT_STORE_RETRY_AFTER_S)},
        )
        return await http_exception_handler(request, away)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            _document_limits(schema, settings)
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _methods_of(app: FastAPI, path: str) -> list[str] | None:
    """The methods the schema documents at `path` (None: not a documented path)."""
    for template, operations in app.openapi()["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path):
            return sorted(method.upper() for method in operations)
    return None


def _document_limits(schema: dict[str, Any], settings: GatewaySettings) -> None:
    """The upload limits in force, in the schema of POST /v1/tasks."""
    body = schema["paths"]["/v1/tasks"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    files = body["properties"]["files"]
    files["maxItems"] = settings.max_files_per_task
    files["description"] += (
        f"; at most {settings.max_files_per_task} files of at most {settings.max_file_bytes} bytes each,"
        f" {settings.upload_bytes} bytes in all"
    )
