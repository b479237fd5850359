"""`docsum summarize` submits with an Idempotency-Key, and sends a submission whose answer was lost again
with the same key and the same bytes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from docsum_cli import client as cli_client
from docsum_cli.client import SUBMIT_RETRY_WAITS_S, Gateway, GatewayError

CREATED = {"task_id": "t1", "status": "PROCESSING", "documents": [{"document_id": "d1", "filename": "a.txt"}]}


def _gateway(answers: list[httpx.Response | Exception], sent: list[tuple[httpx.Request, bytes]]) -> Gateway:
    def respond(request: httpx.Request) -> httpx.Response:
        sent.append((request, request.read()))
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    gateway = Gateway("http://gateway.test", key="k" * 32)
    gateway._http = httpx.Client(base_url="http://gateway.test", transport=httpx.MockTransport(respond))
    return gateway


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []
    monkeypatch.setattr(cli_client.time, "sleep", waits.append)
    return waits


def _document(tmp_path: Path) -> Path:
    path = tmp_path / "a.txt"
    path.write_text("The tide came in at dawn.")
    return path


def test_a_lost_answer_is_asked_for_again_with_the_same_key_and_bytes(tmp_path: Path, slept: list[float]) -> None:
    sent: list[tuple[httpx.Request, bytes]] = []
    lost = [httpx.RemoteProtocolError("Server disconnected without sending a response."), httpx.ReadTimeout("slow")]
    gateway = _gateway([*lost, httpx.Response(201, json=CREATED, headers={"Idempotent-Replayed": "true"})], sent)
    assert gateway.submit([_document(tmp_path)], "Q3") == CREATED
    keys = [r.headers["Idempotency-Key"] for r, _ in sent]
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0].startswith('"') and len(keys[0]) == 38
    assert all(body.count(b"\r\n\r\nThe tide came in at dawn.\r\n") == 1 for _, body in sent)  # the file re-read
    assert slept == list(SUBMIT_RETRY_WAITS_S[:2])


def test_each_submission_has_a_key_of_its_own(tmp_path: Path, slept: list[float]) -> None:
    sent: list[tuple[httpx.Request, bytes]] = []
    gateway = _gateway([httpx.Response(201, json=CREATED), httpx.Response(201, json=CREATED)], sent)
    gateway.submit([_document(tmp_path)])
    gateway.submit([_document(tmp_path)])
    assert sent[0][0].headers["Idempotency-Key"] != sent[1][0].headers["Idempotency-Key"]
    assert slept == []


def test_a_submission_still_being_stored_is_waited_for(tmp_path: Path, slept: list[float]) -> None:
    sent: list[tuple[httpx.Request, bytes]] = []
    busy = httpx.Response(409, headers={"Retry-After": "2"}, json={"detail": "being stored now"})
    gateway = _gateway([busy, httpx.Response(201, json=CREATED)], sent)
    assert gateway.submit([_document(tmp_path)]) == CREATED
    assert slept == [2.0] and len({r.headers["Idempotency-Key"] for r, _ in sent}) == 1


def test_a_gateway_that_stays_unreachable_is_reported(tmp_path: Path, slept: list[float]) -> None:
    sent: list[tuple[httpx.Request, bytes]] = []
    down = [httpx.ConnectError("refused") for _ in range(len(SUBMIT_RETRY_WAITS_S) + 1)]
    with pytest.raises(GatewayError, match="cannot reach the gateway"):
        _gateway(list(down), sent).submit([_document(tmp_path)])
    assert len(sent) == len(SUBMIT_RETRY_WAITS_S) + 1 and slept == list(SUBMIT_RETRY_WAITS_S)


def test_a_refusal_is_not_retried(tmp_path: Path, slept: list[float]) -> None:
    sent: list[tuple[httpx.Request, bytes]] = []
    refused = httpx.Response(422, json={"detail": [{"loc": ["header", "Idempotency-Key"], "msg": "used", "type": "x"}]})
    with pytest.raises(GatewayError, match="422"):
        _gateway([refused], sent).submit([_document(tmp_path)])
    assert len(sent) == 1 and slept == []  # a refusal is an answer: nothing to ask for again
    assert sent[0][0].headers["Idempotency-Key"]
