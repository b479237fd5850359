"""The CLI's gateway client, doubled for unit tests: one that records what `docsum summarize` would submit,
and the real client with its requests answered by a gateway application in process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from docsum_cli import main as cli
from docsum_cli.client import Gateway


def recording_gateway(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    """The options of every task the CLI submits from now on, in order (each answered task "t1")."""
    sent: list[dict[str, str]] = []

    class Recording:
        def __init__(self, url: str | None) -> None:
            pass

        def submit(self, files: list[Path], title: str | None, options: dict[str, str]) -> dict[str, Any]:
            sent.append(options)
            return {"task_id": "t1"}

    monkeypatch.setattr(cli, "Gateway", Recording)
    return sent


def gateway_in_process(app: FastAPI, key: str) -> Gateway:
    """The CLI's own client (its httpx.Client), its requests answered by `app`."""
    served = TestClient(app)

    def through_the_app(request: httpx.Request) -> httpx.Response:
        answer = served.request(request.method, str(request.url), headers=dict(request.headers), content=request.read())
        return httpx.Response(answer.status_code, headers=answer.headers.multi_items(), content=answer.content)

    gateway = Gateway(url="http://testserver", key=key)
    gateway._http = httpx.Client(
        base_url="http://testserver",
        headers={"Authorization": f"Bearer {key}"},
        transport=httpx.MockTransport(through_the_app),
    )
    return gateway
