"""A small client for the gateway's REST API."""

from __future__ import annotations

import json
import mimetypes
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"
# Where `make up` keeps the key it generated for the local stack.
LOCAL_KEY_FILE = Path(".run") / "api-key"
# A re-drive (resume, retry, reconcile) refused because another of the owner's runs, or over the rate,
# is tried again after the gateway's Retry-After, for up to this long in all; then the 429 is shown.
REDRIVE_PATIENCE_S = 15.0
# A submission whose answer was lost (the connection dropped, the answer timed out) is sent again with the
# same Idempotency-Key, after each of these waits in turn: the gateway answers a retry of a task it stored
# with that task, and makes it only if it did not. The first retry goes at once (an answer lost on the way
# back), the later ones give a restarting gateway time. A 409 (the first is being stored) waits its Retry-After.
SUBMIT_RETRY_WAITS_S = (0.0, 1.0, 2.0, 4.0, 8.0)
# How long an idle connection to the gateway is kept for the next request: less than the gateway (uvicorn,
# 5 s) keeps its own, so the client lets one go first. Kept as long as the server keeps it (httpx's 5 s),
# a request sent as the server closed the connection failed with "Server disconnected" before any answer.
KEEPALIVE_EXPIRY_S = 2.0


class GatewayError(Exception):
    pass


def api_key() -> str | None:
    key = os.environ.get("DOCSUM_API_KEY")
    if key:
        return key
    if LOCAL_KEY_FILE.is_file():
        return LOCAL_KEY_FILE.read_text().strip()
    return None


class Gateway:
    def __init__(self, url: str | None = None, key: str | None = None, timeout_s: float = 120.0) -> None:
        key = key or api_key()
        if not key:
            raise GatewayError("no API key: set DOCSUM_API_KEY (make up writes the local one to .run/api-key)")
        self._http = httpx.Client(
            base_url=url or os.environ.get("DOCSUM_GATEWAY_URL", DEFAULT_URL),
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout_s,
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S),
        )

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._answer(self._send(method, path, **kwargs))

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise GatewayError(f"cannot reach the gateway at {self._http.base_url}: {exc}") from exc

    def _answer(self, response: httpx.Response) -> Any:
        if response.is_error:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            if isinstance(detail, list):  # a 422: each invalid input, where it is and what is wrong
                detail = "; ".join(
                    f"{'.'.join(str(p) for p in e.get('loc', [])[1:])}: {e.get('msg')}"
                    for e in detail
                    if isinstance(e, dict)
                )
            raise GatewayError(f"gateway answered {response.status_code}: {detail}")
        return response.json()

    def submit(
        self, paths: list[Path], title: str | None = None, options: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """POST /v1/tasks with a fresh Idempotency-Key; an answer lost on the way is asked for again with
        the same key (SUBMIT_RETRY_WAITS_S), so a retry never makes a second task."""
        data = {**(options or {}), **({"title": title} if title else {})}
        headers = {"Idempotency-Key": f'"{uuid.uuid4()}"'}
        waits = iter(SUBMIT_RETRY_WAITS_S)
        while True:
            handles = [p.open("rb") for p in paths]  # again for each try: a try reads them to the end
            try:
                files = [
                    ("files", (p.name, h, mimetypes.guess_type(p.name)[0] or "application/octet-stream"))
                    for p, h in zip(paths, handles, strict=True)
                ]
                response = self._http.request("POST", "/v1/tasks", files=files, data=data or None, headers=headers)
            except httpx.TransportError as exc:
                wait_s = next(waits, None)
                if wait_s is None:
                    raise GatewayError(f"cannot reach the gateway at {self._http.base_url}: {exc}") from exc
                time.sleep(wait_s)
                continue
            except httpx.HTTPError as exc:
                raise GatewayError(f"cannot reach the gateway at {self._http.base_url}: {exc}") from exc
            finally:
                for h in handles:
                    h.close()
            in_flight = _retry_after(response) if response.status_code == 409 else None
            if in_flight is not None and next(waits, None) is not None:
                time.sleep(in_flight)
                continue
            return self._answer(response)

    def task(self, task_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/tasks/{task_id}")

    def control(self, task_id: str, action: str) -> dict[str, Any]:
        """pause, resume, cancel or retry."""
        if action in ("resume", "retry"):
            return self._redrive(f"/v1/tasks/{task_id}/{action}")
        return self._call("POST", f"/v1/tasks/{task_id}/{action}")

    def failures(self, task_id: str) -> list[dict[str, Any]]:
        return self._call("GET", f"/v1/tasks/{task_id}/failures")

    def reconcile(self) -> dict[str, Any]:
        return self._redrive("/v1/reconcile")

    def _redrive(self, path: str) -> dict[str, Any]:
        """POST a re-drive; a 429 is waited out as its Retry-After says, for REDRIVE_PATIENCE_S in all."""
        waited = 0.0
        while True:
            response = self._send("POST", path)
            wait_s = _retry_after(response) if response.status_code == 429 else None
            if wait_s is None or waited + wait_s > REDRIVE_PATIENCE_S:
                return self._answer(response)
            time.sleep(wait_s)
            waited += wait_s


def _retry_after(response: httpx.Response) -> float | None:
    """The seconds a 429 or 409 asks to wait, when it says (as a number)."""
    value = response.headers.get("Retry-After", "")
    return float(value) if value.isascii() and value.isdigit() else None


class StreamDropped(Exception):
    """The progress stream broke off before its end (the caller reconnects from the last entry it saw)."""


def _sse_events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event name, decoded data) per Server-Sent Event; comment lines (heartbeats) are skipped."""
    name, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", list[str]()
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)


def task_events(gateway: Gateway, task_id: str, after: int = 0) -> Iterator[tuple[str, dict[str, Any]]]:
    """The task's progress stream, GET /v1/tasks/{task_id}/events as SSE: ("snapshot", the task), then
    ("progress", entry) per entry after `after` (sent as Last-Event-ID). Returns when the server ends
    the stream (the task is over); StreamDropped if the connection breaks first."""
    headers = {"Accept": "text/event-stream", **({"Last-Event-ID": str(after)} if after else {})}
    # The server sends a heartbeat every 15 s: a minute of silence is a dead connection.
    timeout = httpx.Timeout(10.0, read=60.0)
    try:
        with gateway._http.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers, timeout=timeout) as response:
            if response.is_error:
                response.read()
                try:
                    detail = response.json().get("detail", response.text)
                except ValueError:
                    detail = response.text
                raise GatewayError(f"gateway answered {response.status_code}: {detail}")
            yield from _sse_events(response.iter_lines())
    except httpx.HTTPError as exc:
        raise StreamDropped(str(exc) or type(exc).__name__) from exc


# --- the owner's tasks, and the operator's keys ------------------------------------------------------

# Where `make up` keeps the admin key it generated for the local stack.
LOCAL_ADMIN_KEY_FILE = Path(".run") / "admin-key"


def admin_key() -> str | None:
    key = os.environ.get("DOCSUM_ADMIN_KEY")
    if key:
        return key
    if LOCAL_ADMIN_KEY_FILE.is_file():
        return LOCAL_ADMIN_KEY_FILE.read_text().strip()
    return None


class OwnerClient(Gateway):
    """The reads of the owner's own tasks that `docsum tasks` and `docsum show` use."""

    def tasks(self, limit: int = 50) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/tasks", params={"limit": limit})


class WebhookClient(Gateway):
    """/v1/webhooks: the owner's webhook endpoints, for `docsum webhooks add|list|remove`."""

    def add(self, url: str, events: list[str], all_tasks: bool = True) -> dict[str, Any]:
        return self._call("POST", "/v1/webhooks", json={"url": url, "events": events, "all_tasks": all_tasks})

    def list(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/webhooks")

    def remove(self, webhook_id: str) -> dict[str, Any]:
        # Quoted: an id is the gateway's to judge (404 for one it never made), never a path of its own.
        return self._call("DELETE", f"/v1/webhooks/{quote(webhook_id, safe='')}")


class KeyAdmin(Gateway):
    """/v1/keys, with the operator's DOCSUM_ADMIN_KEY (not an owner's key)."""

    def __init__(self, url: str | None = None, key: str | None = None, timeout_s: float = 30.0) -> None:
        key = key or admin_key()
        if not key:
            raise GatewayError(
                "no admin key: set DOCSUM_ADMIN_KEY to the gateway's (make up writes the local one to .run/admin-key)"
            )
        super().__init__(url, key, timeout_s)

    def create(self, owner: str, name: str | None = None) -> dict[str, Any]:
        return self._call("POST", "/v1/keys", json={"owner": owner, **({"name": name} if name else {})})

    def list(self, owner: str | None = None, include_revoked: bool = False) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"include_revoked": str(include_revoked).lower()}
        if owner:
            params["owner"] = owner
        return self._call("GET", "/v1/keys", params=params)

    def revoke(self, key_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/keys/{key_id}")
