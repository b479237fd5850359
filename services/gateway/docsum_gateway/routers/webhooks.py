"""/v1/webhooks: an owner's endpoints, told of its tasks' ends by signed POSTs (Standard Webhooks).

The secret is shown once, in the answer that makes or rotates it. Another owner's endpoint, or delivery,
answers 404 as one that does not exist. A URL is taken only where the intake's rules let a request go
(the owner's allowed hosts and ports, a public address unless listed), and checked again on each attempt.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, status
from pydantic import BaseModel, ConfigDict, Field

from docsum_shared import outbound
from docsum_shared.errors import ItemFailed
from docsum_shared.outbox import WebhookEvent

from ..deps import PoolDep, ScopeDep, SettingsDep
from ..inputs import check_text, invalid, is_task_id
from ..responses import ErrorBody, errors
from ..webhooks import repository
from ..webhooks.policy import new_secret

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "The owner has no such endpoint (or delivery)."}
}
MAX_URL = 2048


class WebhookRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: Annotated[str, Field(max_length=MAX_URL, description="where deliveries are POSTed (http:// or https://)")]
    events: Annotated[list[WebhookEvent], Field(min_length=1, description="the events it is told of")]
    all_tasks: bool = Field(True, description="every task of the owner's; false: only tasks that name it")


class WebhookInfo(BaseModel):
    id: str
    url: str
    events: list[str]
    all_tasks: bool
    created_at: datetime


class WebhookCreated(WebhookInfo):
    secret: str  # "whsec_" + base64: verifies each delivery's webhook-signature; shown this once, never again


class AttemptInfo(BaseModel):
    attempt: int
    at: datetime
    status: int | None = Field(description="the endpoint's HTTP status; null: no answer")
    error: str | None = Field(description="why it failed; null: delivered")


class DeliveryInfo(BaseModel):
    id: str = Field(description="the webhook-id header: the same on every attempt")
    event_type: str
    task_id: str | None
    attempts: int
    next_attempt_at: datetime | None = Field(description="when it is tried next; null: delivered or given up")
    last_status: int | None
    last_error: str | None
    delivered_at: datetime | None
    created_at: datetime
    log: list[AttemptInfo]


def endpoint_id_path(webhook_id: Annotated[str, Path(description="the endpoint's id (a uuid)")]) -> str:
    """The `{webhook_id}` path parameter: 404 if it cannot be an id the gateway made."""
    check_text(("path", "webhook_id"), webhook_id)
    if not is_task_id(webhook_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no webhook {webhook_id}")
    return webhook_id


EndpointIdDep = Annotated[str, Depends(endpoint_id_path)]


def _info(endpoint: repository.Endpoint) -> WebhookInfo:
    return WebhookInfo(**endpoint.__dict__)


def _delivery(delivery: repository.Delivery) -> DeliveryInfo:
    fields = {**delivery.__dict__, "log": [AttemptInfo(**a.__dict__) for a in delivery.log]}
    return DeliveryInfo(**fields)


def _no_endpoint(webhook_id: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no webhook {webhook_id}")


async def _checked_url(url: str, owner: str, settings: SettingsDep) -> str:
    """`url`, if a delivery may go there: the intake's rules for the owner (DOCSUM_INTAKE_OWNERS, else the
    global DOCSUM_INTAKE_HTTP_HOSTS and _PORTS), its host resolving to allowed addresses only; else 422."""
    check_text(("body", "url"), url)
    access = settings.intake_access(owner)
    try:
        await outbound.resolve(outbound.parse_http(url, access, "url"), access)
    except ItemFailed as exc:
        raise invalid(("body", "url"), str(exc), url) from None
    return url


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=WebhookCreated,
    responses={**errors(401, 422), 400: {"model": ErrorBody, "description": "The body cannot be parsed as JSON."}},
)
async def create_webhook(body: WebhookRequest, scope: ScopeDep, pool: PoolDep, settings: SettingsDep) -> WebhookCreated:
    """Register an endpoint; its secret is in this answer only."""
    url = await _checked_url(body.url, scope.owner, settings)
    events = sorted({e.value for e in body.events})
    secret = new_secret()
    endpoint = await repository.create_endpoint(pool, scope, str(uuid.uuid4()), url, events, body.all_tasks, secret)
    return WebhookCreated(**endpoint.__dict__, secret=secret)


@router.get("", response_model=list[WebhookInfo], responses=errors(401))
async def list_webhooks(scope: ScopeDep, pool: PoolDep) -> list[WebhookInfo]:
    return [_info(e) for e in await repository.list_endpoints(pool, scope)]


@router.delete("/{webhook_id}", response_model=WebhookInfo, responses={**errors(401, 422), **NOT_FOUND})
async def delete_webhook(scope: ScopeDep, webhook_id: EndpointIdDep, pool: PoolDep) -> WebhookInfo:
    """Nothing more is sent to the endpoint, not even deliveries still being tried."""
    endpoint = await repository.disable_endpoint(pool, scope, webhook_id)
    if endpoint is None:
        raise _no_endpoint(webhook_id)
    return _info(endpoint)


@router.post("/{webhook_id}/rotate", response_model=WebhookCreated, responses={**errors(401, 422), **NOT_FOUND})
async def rotate_webhook_secret(scope: ScopeDep, webhook_id: EndpointIdDep, pool: PoolDep) -> WebhookCreated:
    """A new secret, in this answer only; every attempt from now on is signed with it."""
    secret = new_secret()
    endpoint = await repository.rotate_secret(pool, scope, webhook_id, secret)
    if endpoint is None:
        raise _no_endpoint(webhook_id)
    return WebhookCreated(**endpoint.__dict__, secret=secret)


@router.get("/{webhook_id}/deliveries", response_model=list[DeliveryInfo], responses={**errors(401, 422), **NOT_FOUND})
async def list_deliveries(
    scope: ScopeDep,
    webhook_id: EndpointIdDep,
    pool: PoolDep,
    limit: Annotated[int, Query(ge=1, le=500, description="the latest this many")] = 50,
) -> list[DeliveryInfo]:
    """The endpoint's latest deliveries, newest first, each with every attempt's status."""
    found = await repository.deliveries(pool, scope, webhook_id, limit)
    if found is None:
        raise _no_endpoint(webhook_id)
    return [_delivery(d) for d in found]


@router.post(
    "/{webhook_id}/deliveries/{delivery_id}/resend",
    response_model=DeliveryInfo,
    responses={**errors(401, 422), **NOT_FOUND},
)
async def resend_delivery(
    scope: ScopeDep,
    webhook_id: EndpointIdDep,
    delivery_id: Annotated[str, Path(max_length=100, description="the delivery's id (its webhook-id)")],
    pool: PoolDep,
) -> DeliveryInfo:
    """Send the delivery again now, with the same webhook-id and body (signed afresh)."""
    check_text(("path", "delivery_id"), delivery_id)
    delivery = await repository.resend(pool, scope, webhook_id, delivery_id)
    if delivery is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no delivery {delivery_id}")
    return _delivery(delivery)
