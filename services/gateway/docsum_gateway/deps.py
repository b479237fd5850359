"""Dependencies of the routes: settings, the pool, the blob store, the publishing port, the calling owner
(and its scope) and the task id."""

from __future__ import annotations

import hmac
from typing import Annotated

import asyncpg
from fastapi import Depends, HTTPException, Request, Security, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from docsum_shared.blobs import BlobStore
from docsum_shared.handlers import Publish
from docsum_shared.scope import Scope

from . import keystore
from .inputs import task_id_path
from .security import bearer_token, owner_for
from .settings import GatewaySettings

# Declares the scheme in the OpenAPI schema; the header itself is read by `get_owner`.
_bearer = HTTPBearer(
    auto_error=False,
    description="An API key (DOCSUM_API_KEYS, or made by `docsum keys create`): `Authorization: Bearer <key>`.",
)
_admin_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="AdminKey",
    description="The operator's DOCSUM_ADMIN_KEY: `Authorization: Bearer <key>`.",
)


def get_settings(request: Request) -> GatewaySettings:
    return request.app.state.settings


def get_pool(request: Request) -> asyncpg.Pool:
    return request.app.state.pool


def get_blobs(request: Request) -> BlobStore:
    return request.app.state.blobs


def get_publish(request: Request) -> Publish:
    """The routes publish through the port the application was given (app.Attach)."""
    publish: Publish = request.app.state.publish
    return publish


def _unauthorized(what: str = "a valid API key") -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED,
        f"{what} is required (Authorization: Bearer <key>)",
        headers={"WWW-Authenticate": "Bearer"},
    )


async def owner_of(env_keys: dict[str, str], pool: asyncpg.Pool, token: str) -> str | None:
    """The owner of an API key: one of DOCSUM_API_KEYS, else a stored key that is not revoked."""
    return owner_for(env_keys, token) or await keystore.owner_of_key(pool, token)


async def get_owner(request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)]) -> str:
    token = bearer_token(request.headers.get("authorization"))
    owner = await owner_of(request.app.state.api_keys, request.app.state.pool, token) if token else None
    if owner is None:
        raise _unauthorized()
    return owner


def require_admin(request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Security(_admin_bearer)]) -> None:
    """The caller presents DOCSUM_ADMIN_KEY (compared in constant time); an owner's key is not enough."""
    admin = request.app.state.settings.admin_key
    token = bearer_token(request.headers.get("authorization"))
    if (
        admin is None
        or token is None
        or not hmac.compare_digest(admin.get_secret_value().encode(), token.encode(errors="surrogateescape"))
    ):
        raise _unauthorized("the admin key (DOCSUM_ADMIN_KEY)")


SettingsDep = Annotated[GatewaySettings, Depends(get_settings)]
PoolDep = Annotated[asyncpg.Pool, Depends(get_pool)]
PublishDep = Annotated[Publish, Depends(get_publish)]
BlobsDep = Annotated[BlobStore, Depends(get_blobs)]
OwnerDep = Annotated[str, Depends(get_owner)]


def get_scope(owner: OwnerDep, settings: SettingsDep) -> Scope:
    """The caller's tasks and endpoints: its owner's, in this gateway's deployment."""
    return Scope(settings.deployment, owner)


ScopeDep = Annotated[Scope, Depends(get_scope)]
# After OwnerDep (or ScopeDep) in a signature: a caller without a key learns nothing about ids.
TaskIdDep = Annotated[str, Depends(task_id_path)]


async def within_task_rate(owner: OwnerDep, pool: PoolDep, settings: SettingsDep) -> None:
    """Books one task creation against the owner's DOCSUM_TASKS_PER_MINUTE, or answers 429."""
    if not settings.tasks_per_minute:
        return
    decision = await keystore.admit_task(pool, owner, settings.tasks_per_minute)
    if not decision.allowed:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"over {settings.tasks_per_minute} new tasks a minute; try again in {decision.retry_after_s} s",
            headers={"Retry-After": str(decision.retry_after_s)},
        )
