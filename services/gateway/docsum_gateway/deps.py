"""Dependencies of the routes: settings, the pool, the producer and the calling owner."""

from __future__ import annotations

from typing import Annotated

import asyncpg
from aiokafka import AIOKafkaProducer
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from docsum_shared.settings import Settings

from .security import owner_for

_bearer = HTTPBearer(auto_error=False)


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_pool(request: Request) -> asyncpg.Pool:
    return request.app.state.pool


def get_producer(request: Request) -> AIOKafkaProducer:
    return request.app.state.producer


def get_owner(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> str:
    owner = owner_for(request.app.state.api_keys, credentials.credentials) if credentials else None
    if owner is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "a valid API key is required (Authorization: Bearer <key>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return owner


SettingsDep = Annotated[Settings, Depends(get_settings)]
PoolDep = Annotated[asyncpg.Pool, Depends(get_pool)]
ProducerDep = Annotated[AIOKafkaProducer, Depends(get_producer)]
OwnerDep = Annotated[str, Depends(get_owner)]
