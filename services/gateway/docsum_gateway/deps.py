"""Dependencies of the routes: settings, the pool, the producer, the calling owner and the task id."""

from __future__ import annotations

from typing import Annotated

import asyncpg
from aiokafka import AIOKafkaProducer
from fastapi import Depends, HTTPException, Request, Security, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .inputs import task_id_path
from .security import bearer_token, owner_for
from .settings import GatewaySettings

# Declares the scheme in the OpenAPI schema; the header itself is read by `get_owner`.
_bearer = HTTPBearer(auto_error=False, description="An API key from DOCSUM_API_KEYS: `Authorization: Bearer <key>`.")


def get_settings(request: Request) -> GatewaySettings:
    return request.app.state.settings


def get_pool(request: Request) -> asyncpg.Pool:
    return request.app.state.pool


def get_producer(request: Request) -> AIOKafkaProducer:
    return request.app.state.producer


def get_owner(request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)]) -> str:
    token = bearer_token(request.headers.get("authorization"))
    owner = owner_for(request.app.state.api_keys, token) if token else None
    if owner is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "a valid API key is required (Authorization: Bearer <key>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return owner


SettingsDep = Annotated[GatewaySettings, Depends(get_settings)]
PoolDep = Annotated[asyncpg.Pool, Depends(get_pool)]
ProducerDep = Annotated[AIOKafkaProducer, Depends(get_producer)]
OwnerDep = Annotated[str, Depends(get_owner)]
# After OwnerDep in a signature: a caller without a key learns nothing about ids.
TaskIdDep = Annotated[str, Depends(task_id_path)]
