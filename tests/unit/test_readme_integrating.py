"""The README's "Integrating" sections on Idempotency-Key and webhooks say what the gateway does: its
headers, statuses, limits and defaults are the code's, the webhook events listed are the ones an endpoint
may ask for, and both recipes for verifying a delivery accept a signed one and refuse a forged one."""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from docsum_gateway.idempotency import IN_FLIGHT_RETRY_AFTER_S, MAX_KEY_CHARS, REPLAYED_HEADER
from docsum_gateway.settings import GatewaySettings
from docsum_gateway.webhooks.policy import Backoff
from docsum_shared.outbox import WebhookEvent

README = Path(__file__).resolve().parents[2] / "README.md"


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"### {title}")
    return text[start : text.index("\n### ", start + 1)]


def _default(name: str) -> Any:
    return GatewaySettings.model_fields[name].default


def test_the_idempotency_section_tells_what_the_gateway_does() -> None:
    told = " ".join(_section("Retries that never make a second task").split())
    assert f"`{REPLAYED_HEADER}: true`" in told
    assert f"`Retry-After: {IN_FLIGHT_RETRY_AFTER_S}`" in told
    assert '`type: "idempotency_key_reused"`' in told and f"over {MAX_KEY_CHARS} characters" in told
    assert _default("idempotency_key_ttl_s") == 24 * 3600 and "`DOCSUM_IDEMPOTENCY_KEY_TTL_S` (24 h)" in told
    assert "per (deployment, owner, key)" in told  # migration 0037's key
    # The files are not always copied into PostgreSQL: with an object store, only their locations are.
    assert "copied into PostgreSQL" not in told
    assert _default("blob_store") == "postgresql" and "`DOCSUM_BLOB_STORE=postgresql`" in told
    assert "never the files or the fields themselves" in told


def test_the_webhook_events_listed_are_the_ones_an_endpoint_may_ask_for() -> None:
    told = _section("Results pushed: webhooks")
    events = told[told.index("- Events:") : told.index("The body is")]
    assert set(re.findall(r"`((?:task|document)\.[a-z_]+)`", events)) == {e.value for e in WebhookEvent}


def test_the_retries_and_retention_told_are_the_defaults() -> None:
    told = " ".join(_section("Results pushed: webhooks").split())
    backoff = Backoff(_default("webhook_backoff_first_s"), _default("webhook_backoff_max_s"),
                      _default("webhook_retry_for_s"))  # fmt: skip
    event = now = datetime(2026, 12, 1, tzinfo=UTC)
    attempts = 1
    while (due := backoff.next_attempt(event, now, attempts)) is not None:
        now, attempts = due, attempts + 1
    assert f"{attempts} attempts" in told  # each attempt, the first one included
    assert _default("webhook_retain_s") == 7 * 24 * 3600 and "`DOCSUM_WEBHOOK_RETAIN_S` (7 days)" in told


def _block(told: str, language: str, after: str) -> str:
    start = told.index(f"```{language}\n", told.index(after)) + len(language) + 4
    return told[start : told.index("```", start)]


@pytest.fixture
def signed() -> tuple[str, bytes, dict[str, str]]:
    """The README's secret, and a delivery signed with it as the gateway signs one (non-ASCII in the body)."""
    told = _section("Results pushed: webhooks")
    (secret,) = set(re.findall(r"whsec_[A-Za-z0-9+/=]+", _block(told, "python", "Verify a delivery")))
    body = '{"type": "task.finished", "timestamp": "2026-12-01T08:00:00+00:00", "data": {"title": "摘要 50%"}}'
    now = datetime.now(UTC)
    headers = {
        "webhook-id": "msg_0f1e2d3c4b5a69788796a5b4c3d2e1f0",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign("msg_0f1e2d3c4b5a69788796a5b4c3d2e1f0", now, body),
    }
    return told, body.encode(), headers


def test_the_python_recipe_accepts_a_delivery_and_refuses_a_forged_or_stale_one(
    signed: tuple[str, bytes, dict[str, str]],
) -> None:
    told, body, headers = signed
    scope: dict[str, Any] = {}
    exec(_block(told, "python", "Verify a delivery"), scope)  # noqa: S102 - the README's own recipe
    assert scope["on_delivery"](body, headers)["data"]["title"] == "摘要 50%"
    with pytest.raises(WebhookVerificationError):
        scope["on_delivery"](body.replace(b"50%", b"51%"), headers)
    stale = int((datetime.now(UTC) - timedelta(minutes=6)).timestamp())
    with pytest.raises(WebhookVerificationError):
        scope["on_delivery"](body, {**headers, "webhook-timestamp": str(stale)})


def test_the_shell_recipe_accepts_a_delivery_and_refuses_a_forged_one(
    signed: tuple[str, bytes, dict[str, str]], tmp_path: Path
) -> None:
    told, body, headers = signed
    recipe = _block(told, "bash", "In a shell, with openssl")

    def run(received: bytes) -> str:
        (tmp_path / "body.json").write_bytes(received)
        env = {"PATH": "/usr/bin:/bin", **{k.replace("-", "_"): v for k, v in headers.items()}}
        return subprocess.run(
            ["bash", "-c", recipe], cwd=tmp_path, env=env, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    assert run(body) == "verified"
    assert run(body.replace(b"50%", b"51%")) == "forged"
