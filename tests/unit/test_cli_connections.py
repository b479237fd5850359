"""The CLI's connections to the gateway: it lets an idle one go before the gateway closes it, so a call
after any idle time never goes out on a connection the gateway is closing."""

from __future__ import annotations

from fastapi import FastAPI

from docsum_cli.client import KEEPALIVE_EXPIRY_S, Gateway
from docsum_gateway.app import server
from docsum_gateway.settings import GatewaySettings


def test_the_cli_keeps_an_idle_connection_for_less_time_than_the_gateway_keeps_it() -> None:
    """Both at 5 s (httpx's default and uvicorn's), a call made after the client sat idle 5 s raced the
    gateway's close and failed before any answer ("Server disconnected"), as a test's client met."""
    gateway = server(GatewaySettings(_env_file=None), FastAPI())
    client = Gateway("http://127.0.0.1:8000", key="k" * 24)
    assert client._http._transport._pool._keepalive_expiry == KEEPALIVE_EXPIRY_S  # type: ignore[attr-defined]
    assert KEEPALIVE_EXPIRY_S < gateway.timeout_keep_alive
