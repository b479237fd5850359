"""The gateway's FastAPI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from docsum_shared.db import connect_pool, migrate
from docsum_shared.kafka import ensure_topics, make_producer
from docsum_shared.settings import Settings, get_settings

from .limits import BodySizeLimit
from .progress import ProgressHub
from .routers import maintenance, progress, tasks
from .security import parse_api_keys

# Room for the multipart framing around the files themselves.
_MULTIPART_SLACK = 64 * 1024


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    api_keys = parse_api_keys(settings.api_keys)
    if not api_keys:
        raise SystemExit("DOCSUM_API_KEYS is not set: give the gateway at least one 'owner=key' pair")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.pool = await connect_pool(settings.database_url, max_size=settings.db_pool_max)
        await migrate(app.state.pool)
        await ensure_topics(settings)
        app.state.producer = make_producer(settings)
        await app.state.producer.start()
        app.state.progress = ProgressHub(settings)
        app.state.progress.start()
        try:
            yield
        finally:
            await app.state.progress.stop()
            await app.state.producer.stop()
            await app.state.pool.close()

    app = FastAPI(title="docsum", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.api_keys = api_keys
    app.include_router(tasks.router)
    app.include_router(maintenance.router)
    app.include_router(progress.router)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    max_body = settings.max_files_per_task * settings.max_file_bytes + _MULTIPART_SLACK
    app.add_middleware(BodySizeLimit, max_bytes=max_body)
    return app
