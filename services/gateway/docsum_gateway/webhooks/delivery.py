"""The loop that sends the webhooks' outbox: due deliveries claimed (any gateway replica, each row by one),
each POSTed once, signed by Standard Webhooks with its endpoint's secret, and its outcome recorded.

A delivery is sent at least once: a gateway killed between the POST and the record leaves it claimed until
its lease ends, and then any replica sends it again, with the same webhook-id (receivers deduplicate on
it). The request obeys the intake's rules (docsum_shared.outbound): the owner's hosts and ports, public
addresses only unless listed, the connection pinned to the address checked, no redirects, timeouts, and
at most webhook_response_max_bytes of the answer read.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import asyncpg
import httpx2
from standardwebhooks import Webhook

from docsum_shared import db, outbound
from docsum_shared.db import WEBHOOKS_DUE
from docsum_shared.errors import ItemFailed
from docsum_shared.retry import keep_running
from docsum_shared.uris import shown

from ..settings import GatewaySettings
from . import repository
from .policy import Backoff, Outcome, answered

log = logging.getLogger(__name__)
READ_BLOCK = 16 * 1024


def backoff(settings: GatewaySettings) -> Backoff:
    return Backoff(settings.webhook_backoff_first_s, settings.webhook_backoff_max_s, settings.webhook_retry_for_s)


def total_s(settings: GatewaySettings) -> float:
    """The longest one attempt takes (resolving, connecting, sending, the answer's first bytes)."""
    return 3 * settings.webhook_timeout_s


def signed_headers(due: repository.Due, now: datetime) -> dict[str, str]:
    """Standard Webhooks' headers: the delivery's id, this attempt's time, and the signature of both with
    the body (a fresh time each attempt: a receiver refuses a signature over five minutes old)."""
    return {
        "webhook-id": due.id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(due.secret).sign(due.id, now, due.payload),
        "content-type": "application/json",
        "user-agent": "docsum-webhooks/1",
    }


async def post(due: repository.Due, settings: GatewaySettings) -> Outcome:
    """One attempt at the delivery: what came of it (never raises for the endpoint's faults)."""
    access = settings.intake_access(due.owner)
    try:
        source = outbound.parse_http(due.url, access, "the endpoint's url")
        async with (
            asyncio.timeout(total_s(settings)),
            httpx2.AsyncClient(
                timeout=httpx2.Timeout(settings.webhook_timeout_s), follow_redirects=False, trust_env=False
            ) as client,
        ):
            headers = signed_headers(due, datetime.now(UTC))
            request = await outbound.pinned_request(
                client, "POST", source, due.url, access, headers=headers, content=due.payload.encode()
            )
            return await _sent(client, request, settings.webhook_response_max_bytes)
    except ItemFailed as exc:  # not allowed (any more), or no address: the owner can fix it and resend
        return Outcome(None, str(exc))
    except TimeoutError:
        return Outcome(None, f"no answer within {total_s(settings):g} s (DOCSUM_WEBHOOK_TIMEOUT_S)")
    except httpx2.TimeoutException as exc:
        return Outcome(None, f"no answer within {settings.webhook_timeout_s:g} s: {type(exc).__name__}")
    except httpx2.HTTPError as exc:  # its text may hold the URL: only its kind is told
        return Outcome(None, f"the request failed: {type(exc).__name__}")


async def _sent(client: httpx2.AsyncClient, request: httpx2.Request, cap: int) -> Outcome:
    """Send `request` and read at most `cap` bytes of the answer: its status is what counts."""
    response = await client.send(request, stream=True)
    try:
        read = 0
        async for block in response.aiter_bytes(READ_BLOCK):
            read += len(block)
            if read > cap:
                break  # the rest is not read: the connection is closed with it
        location = response.headers.get("location")
        return answered(response.status_code, shown(location) if location else None)
    finally:
        await response.aclose()


async def deliver(pool: asyncpg.Pool, due: repository.Due, settings: GatewaySettings) -> Outcome:
    """One attempt, recorded: delivered, due again after its back-off, or given up after a day."""
    outcome = await post(due, settings)
    next_at = None
    if not outcome.delivered:
        next_at = backoff(settings).next_attempt(due.created_at, await repository.now(pool), due.attempt)
        log.warning(
            "webhook %s attempt %d: %s; %s", due.id, due.attempt, outcome.error,
            f"again at {next_at:%H:%M:%S}" if next_at else "given up",
        )  # fmt: skip
    await repository.record_attempt(pool, due, outcome, next_at)
    return outcome


async def deliver_once(pool: asyncpg.Pool, settings: GatewaySettings) -> int:
    """The due deliveries of one round, sent side by side; how many were claimed."""
    lease_s = total_s(settings) + settings.webhook_poll_s  # past any attempt that is still running
    claimed = await repository.claim_due(pool, settings.deployment, settings.webhook_batch, lease_s)
    await asyncio.gather(*(deliver(pool, due, settings) for due in claimed))
    return len(claimed)


async def deliver_until(stop: asyncio.Event, pool: asyncpg.Pool, settings: GatewaySettings) -> None:
    """Send as soon as deliveries are written (their transaction's notification), and every
    webhook_poll_s all the same (retries fall due; a notification sent while the database restarts is lost)."""
    written = asyncio.Event()
    async with asyncio.TaskGroup() as together:
        listening = together.create_task(
            db.listen(settings.database_url, WEBHOOKS_DUE, lambda _: written.set(), "webhook deliveries")
        )
        await keep_running(
            "webhook deliveries",
            lambda: deliver_once(pool, settings),
            every_s=settings.webhook_poll_s,
            stop=stop,
            wake=written,
        )
        listening.cancel()
