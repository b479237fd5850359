"""Stored API keys without a database: the key's format, its hash, the constant-time match, the admin
routes' credential and the settings around them; and the task rate limit's decision (GCRA)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from docsum_gateway import security
from docsum_gateway.app import create_app
from docsum_gateway.policy import admit_task
from docsum_gateway.settings import ConfigError, GatewaySettings, check

KEY = "k" * 24
ADMIN = "a" * 24


def test_a_new_key_names_its_id_and_only_its_hash_is_kept() -> None:
    made = security.new_key()
    assert re.fullmatch(r"dsk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}", made.key), made.key
    key_id, secret = security.split_key(made.key) or ("", "")
    assert key_id == made.key_id and made.key.endswith(secret)
    assert secret not in made.key_hash and made.key_hash == security.key_hash(secret)
    assert len(made.key_hash) == 64  # hex SHA-256
    assert security.hash_matches(made.key_hash, secret)
    assert not security.hash_matches(made.key_hash, secret[:-1] + ("A" if secret[-1] != "A" else "B"))
    assert not security.hash_matches(None, secret)  # no such id: refused, after the same work
    assert security.new_key().key_id != made.key_id and security.new_key().key_hash != made.key_hash


@pytest.mark.parametrize(
    "presented",
    ["", "dsk_", "dsk_0123456789ab", "dsk_0123456789ab_short", "dsk_0123456789AB_" + "x" * 43,
     "dsx_0123456789ab_" + "x" * 43, "dsk_0123456789ab_" + "x" * 44, "dsk_0123456789ab_" + "x" * 42 + "!"],
)  # fmt: skip
def test_anything_but_the_stored_format_is_no_stored_key(presented: str) -> None:
    assert security.split_key(presented) is None


def test_key_ids_are_what_new_keys_have() -> None:
    assert security.is_key_id(security.new_key().key_id)
    assert not security.is_key_id("0123456789AB") and not security.is_key_id("0123") and not security.is_key_id("x/y")


def test_the_hash_is_keyed_not_a_bare_sha256() -> None:
    import hashlib

    secret = security.new_key().key.rsplit("_", 1)[-1]
    assert security.key_hash(secret) != hashlib.sha256(secret.encode()).hexdigest()


# --- the rate limit's decision -------------------------------------------------------------------------


def test_a_quiet_owner_may_create_a_minutes_worth_at_once_and_then_one_per_interval() -> None:
    now, tat, allowed = 1000.0, None, 0
    for _ in range(10):
        decision = admit_task(tat, now, per_minute=6)
        if decision.allowed:
            allowed += 1
            tat = decision.tat
    assert allowed == 6
    refused = admit_task(tat, now, per_minute=6)
    assert not refused.allowed and refused.tat == tat and refused.retry_after_s == 10
    # Just before the slot: still refused; at it, one more (and only one).
    assert not admit_task(tat, now + 9.5, 6).allowed
    at_slot = admit_task(tat, now + 10, 6)
    assert at_slot.allowed and at_slot.retry_after_s == 0
    assert not admit_task(at_slot.tat, now + 10, 6).allowed


def test_a_steady_client_gets_the_rate_and_no_more() -> None:
    """A request every 0.5 s for 5 minutes: the burst, then exactly one per 60/rate seconds."""
    per_minute, tat, times = 4, None, []
    for step in range(600):
        now = step * 0.5
        decision = admit_task(tat, now, per_minute)
        if decision.allowed:
            tat = decision.tat
            times.append(now)
    assert times[:per_minute] == [0.0, 0.5, 1.0, 1.5]
    gaps = {b - a for a, b in zip(times[per_minute:], times[per_minute + 1 :], strict=False)}
    assert gaps == {15.0}
    assert len(times) <= per_minute + 300 / 15  # never more than the burst plus the rate


def test_retry_after_is_a_whole_second_at_least() -> None:
    decision = admit_task(1000.0 + 60.0 - 0.01 + 0.5, 1000.0, per_minute=120)  # 0.01 s over the tolerance
    assert not decision.allowed and decision.retry_after_s == 1


# --- settings and the admin routes ---------------------------------------------------------------------


def test_an_admin_key_alone_is_enough_to_start_and_a_short_or_shared_one_is_refused() -> None:
    assert check(GatewaySettings(api_keys="", admin_key=SecretStr(ADMIN))) == {}
    with pytest.raises(ConfigError) as short:
        check(GatewaySettings(api_keys=f"alice={KEY}", admin_key=SecretStr("tiny")))
    assert short.value.setting == "DOCSUM_ADMIN_KEY" and "tiny" not in str(short.value)
    with pytest.raises(ConfigError) as shared:
        check(GatewaySettings(api_keys=f"alice={KEY}", admin_key=SecretStr(KEY)))
    assert shared.value.setting == "DOCSUM_ADMIN_KEY"
    with pytest.raises(ConfigError) as neither:
        check(GatewaySettings(api_keys=""))
    assert neither.value.setting == "DOCSUM_API_KEYS" and "DOCSUM_ADMIN_KEY" in neither.value.message


def test_the_ticket_secret_is_never_derived_from_nothing() -> None:
    assert security.ticket_secret(None, {}, ADMIN) != security.ticket_secret(None, {}, "b" * 24)
    assert security.ticket_secret(None, {KEY: "alice"}) == security.ticket_secret(None, {KEY: "alice"}, None)


class Untouchable:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the database was reached ({name})")


def _client(**settings: Any) -> TestClient:
    app = create_app(GatewaySettings(api_keys=f"alice={KEY}", **settings))
    app.state.pool = Untouchable()
    return TestClient(app)


def test_no_admin_key_no_key_routes() -> None:
    client = _client()
    assert not [r for r in client.app.routes if getattr(r, "path", "").startswith("/v1/keys")]  # type: ignore[attr-defined]
    assert client.get("/v1/keys", headers={"Authorization": f"Bearer {KEY}"}).status_code == 404


@pytest.mark.parametrize("token", [None, KEY, ADMIN[:-1], ADMIN + "a", "dsk_0123456789ab_" + "x" * 43])
def test_the_key_routes_take_the_admin_key_only(token: str | None) -> None:
    """An owner's key (or a stored key, or anything else) is refused before the database is reached."""
    client = _client(admin_key=SecretStr(ADMIN))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    for method, path in (("GET", "/v1/keys"), ("POST", "/v1/keys"), ("DELETE", "/v1/keys/0123456789ab")):
        answer = client.request(method, path, headers=headers, json={"owner": "bob"})
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer", (method, answer.text)
        assert "DOCSUM_ADMIN_KEY" in answer.json()["detail"]


def test_the_schema_declares_the_429_and_its_retry_after() -> None:
    schema = _client(admin_key=SecretStr(ADMIN)).get("/openapi.json").json()
    refused = schema["paths"]["/v1/tasks"]["post"]["responses"]["429"]
    assert "Retry-After" in refused["headers"]
    assert {"get", "post"} <= set(schema["paths"]["/v1/keys"]) and "delete" in schema["paths"]["/v1/keys/{key_id}"]
