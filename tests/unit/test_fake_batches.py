"""The stand-in's Batch and Files APIs and its flex tier, driven over HTTP by the real `openai` client."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from openai.types import Batch, FileDeleted, FileObject
from openai.types.chat import ChatCompletion

from tests.fake_batches import EXPIRED_MESSAGE, HOLD_POINTS, SERVER_ERROR_MESSAGE, enqueued_tokens
from tests.fake_llm import FakeLLM, FakeLLMServer

MODEL = "stand-in-1"
# A provider hour lasts 0.1 s: the 24 h window 2.4 s. Validating, the lines and finalizing take 0.1 s each.
FAST = {
    "batch_time_scale": 1 / 36000,
    "batch_validating_s": 3600.0,
    "batch_in_progress_s": 3600.0,
    "batch_finalizing_s": 3600.0,
    "batch_cancelling_s": 3600.0,
}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


@pytest.fixture
def llm(server: FakeLLMServer) -> Iterator[FakeLLM]:
    server.llm.reset(config=True)
    server.llm.configure(**FAST)
    yield server.llm
    server.llm.reset(config=True)


@pytest.fixture(scope="module")
def client(server: FakeLLMServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=5) as client:
        yield client


def body(text: str, model: str = MODEL) -> dict[str, Any]:
    messages = [{"role": "system", "content": "Summarize."}, {"role": "user", "content": f"<text>\n{text}\n</text>"}]
    return {"model": model, "messages": messages}


def line(custom_id: str, text: str, **changes: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body(text), **changes}


def lines(n: int, prefix: str = "doc") -> list[dict[str, Any]]:
    return [line(f"{prefix}-{i}", f"Sentence number {i} of {prefix}. Another one.") for i in range(n)]


def upload(client: openai.OpenAI, rows: list[dict[str, Any]] | bytes) -> FileObject:
    content = rows if isinstance(rows, bytes) else "".join(json.dumps(r) + "\n" for r in rows).encode()
    return client.files.create(file=("input.jsonl", content), purpose="batch")


def submit(client: openai.OpenAI, rows: list[dict[str, Any]], metadata: dict[str, str] | None = None) -> Batch:
    input_file = upload(client, rows)
    return client.batches.create(
        input_file_id=input_file.id, endpoint="/v1/chat/completions", completion_window="24h", metadata=metadata
    )


def poll(client: openai.OpenAI, batch_id: str, until: Callable[[Batch], bool], timeout: float = 10.0) -> list[Batch]:
    """Every state the batch is seen in until `until` holds (bounded: fails after `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    seen = [client.batches.retrieve(batch_id)]
    while not until(seen[-1]):
        assert time.monotonic() < deadline, f"batch {batch_id} still {seen[-1].status}"
        time.sleep(0.02)
        seen.append(client.batches.retrieve(batch_id))
    return seen


def terminal(batch: Batch) -> bool:
    return batch.status in ("completed", "failed", "expired", "cancelled")


def read_jsonl(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [json.loads(row) for row in client.files.content(file_id).text.splitlines()]


def test_a_batch_runs_to_completed_and_its_shuffled_output_matches_by_custom_id(
    llm: FakeLLM, client: openai.OpenAI
) -> None:
    llm.configure(batch_shuffle_output=True)
    rows = lines(12)
    created = submit(client, rows, metadata={"task": "t-1", "owner": "alice"})
    assert (created.status, created.metadata, created.endpoint) == (
        "validating",
        {"task": "t-1", "owner": "alice"},
        "/v1/chat/completions",
    )
    assert created.id.startswith("batch_") and created.completion_window == "24h" and created.model == MODEL
    assert created.expires_at is not None and created.expires_at >= created.created_at

    seen = poll(client, created.id, terminal)
    statuses = [b.status for b in seen]
    order = ["validating", "in_progress", "finalizing", "completed"]
    assert statuses[-1] == "completed" and [order.index(s) for s in statuses] == sorted(
        order.index(s) for s in statuses
    )
    done = seen[-1]
    assert done.request_counts is not None and done.request_counts.model_dump() == {
        "total": 12,
        "completed": 12,
        "failed": 0,
    }
    stamps = [done.created_at, done.in_progress_at, done.finalizing_at, done.completed_at]
    assert None not in stamps and stamps == sorted(stamps)  # type: ignore[type-var]
    assert done.failed_at is done.expired_at is done.cancelled_at is None and done.error_file_id is None

    output = read_jsonl(client, done.output_file_id)
    assert sorted(o["custom_id"] for o in output) == sorted(r["custom_id"] for r in rows)
    assert [o["custom_id"] for o in output] != [r["custom_id"] for r in rows]  # any order: match by custom_id
    for out in output:
        assert out["id"].startswith("batch_req_") and out["error"] is None
        assert out["response"]["status_code"] == 200 and out["response"]["request_id"]
    # Each line is answered as the same realtime call is: same text, same usage.
    by_id = {o["custom_id"]: o["response"]["body"] for o in output}
    realtime = client.chat.completions.create(**rows[3]["body"])
    assert by_id["doc-3"]["choices"][0]["message"]["content"] == realtime.choices[0].message.content
    assert realtime.usage is not None and by_id["doc-3"]["usage"] == realtime.usage.model_dump(exclude_none=True)
    assert done.usage is not None and done.usage.input_tokens == sum(
        b["usage"]["prompt_tokens"] for b in by_id.values()
    )

    batch_entries = [e for e in llm.entries() if e.tier == "batch"]
    assert sorted(e.custom_id or "" for e in batch_entries) == sorted(by_id)
    assert {e.batch_id for e in batch_entries} == {created.id} and all(e.status == 200 for e in batch_entries)
    output_file = client.files.retrieve(done.output_file_id or "")
    assert output_file.purpose == "batch_output" and output_file.bytes > 0


def test_the_output_keeps_the_input_order_unless_told_to_shuffle(llm: FakeLLM, client: openai.OpenAI) -> None:
    rows = lines(12)
    done = poll(client, submit(client, rows).id, terminal)[-1]
    assert [o["custom_id"] for o in read_jsonl(client, done.output_file_id)] == [r["custom_id"] for r in rows]


def test_lines_told_to_fail_and_lines_refused_land_in_the_error_file(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(batch_fail_custom_ids=["doc-1"], batch_fail_lines=[3])
    rows = lines(5)
    rows[2]["body"]["messages"][1]["content"] += " FAKE_LLM_REJECT"  # the provider refuses this prompt: 400
    done = poll(client, submit(client, rows).id, terminal)[-1]
    assert done.status == "completed" and done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 3)
    assert sorted(o["custom_id"] for o in read_jsonl(client, done.output_file_id)) == ["doc-0", "doc-4"]
    errors = {e["custom_id"]: e for e in read_jsonl(client, done.error_file_id)}
    assert errors["doc-3"]["response"]["status_code"] == 500  # by its position
    assert errors["doc-1"]["error"] is None and errors["doc-1"]["response"]["status_code"] == 500
    assert errors["doc-1"]["response"]["body"]["error"] == {
        "message": SERVER_ERROR_MESSAGE,
        "type": "server_error",
        "param": None,
        "code": None,
    }
    assert errors["doc-2"]["response"]["status_code"] == 400
    assert errors["doc-2"]["response"]["body"]["error"]["code"] == "invalid_prompt"
    # Failed lines are recorded, and not billed.
    costs = llm.summary(entries=False)["cost_by_tier"]["batch"]
    assert costs["calls"] == 2
    assert sorted(e.status for e in llm.entries() if e.tier == "batch") == [200, 200, 400, 500, 500]


def test_an_expired_batch_keeps_its_finished_lines_and_reports_the_rest_as_batch_expired(
    llm: FakeLLM, client: openai.OpenAI
) -> None:
    llm.configure(batch_expire_after_lines=2)
    rows = lines(5)
    done = poll(client, submit(client, rows).id, terminal)[-1]
    assert done.status == "expired" and done.expired_at is not None and done.completed_at is None
    assert done.request_counts is not None and done.request_counts.model_dump() == {
        "total": 5,
        "completed": 2,
        "failed": 0,
    }
    assert [o["custom_id"] for o in read_jsonl(client, done.output_file_id)] == ["doc-0", "doc-1"]
    expired = read_jsonl(client, done.error_file_id)
    assert [e["custom_id"] for e in expired] == ["doc-2", "doc-3", "doc-4"]
    assert all(e["response"] is None for e in expired)
    assert all(e["error"] == {"code": "batch_expired", "message": EXPIRED_MESSAGE} for e in expired)
    assert sorted(e.custom_id or "" for e in llm.entries() if e.tier == "batch") == ["doc-0", "doc-1"]


def test_a_cancelled_batch_keeps_its_finished_lines_and_runs_no_more(llm: FakeLLM, client: openai.OpenAI) -> None:
    # A provider hour lasts 1 s here (the window 24 s): two lines run, the rest wait for the cancel.
    llm.configure(batch_time_scale=1 / 3600, batch_validating_s=60.0, batch_in_progress_s=None, batch_line_s=60.0)
    llm.configure(batch_cancelling_s=360.0, batch_expire_after_lines=2)
    created = submit(client, lines(5))
    poll(client, created.id, lambda b: b.request_counts is not None and b.request_counts.completed == 2)
    cancelling = client.batches.cancel(created.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    done = poll(client, created.id, terminal)[-1]
    assert done.status == "cancelled" and done.cancelled_at is not None and done.expired_at is None
    assert [o["custom_id"] for o in read_jsonl(client, done.output_file_id)] == ["doc-0", "doc-1"]
    unrun = read_jsonl(client, done.error_file_id)
    assert [e["custom_id"] for e in unrun] == ["doc-2", "doc-3", "doc-4"]
    assert {e["error"]["code"] for e in unrun} == {"batch_cancelled"}
    assert len([e for e in llm.entries() if e.tier == "batch"]) == 2
    with pytest.raises(openai.ConflictError, match="Cannot cancel a batch with status 'cancelled'"):
        client.batches.cancel(created.id)


def test_batches_are_listed_newest_first_with_their_metadata_page_by_page(llm: FakeLLM, client: openai.OpenAI) -> None:
    ids = [submit(client, lines(1, f"b{i}"), metadata={"outbox": f"row-{i}"}).id for i in range(3)]
    first = client.batches.list(limit=2)
    assert [b.id for b in first.data] == ids[::-1][:2] and first.has_more is True
    assert [b.metadata for b in first.data] == [{"outbox": "row-2"}, {"outbox": "row-1"}]
    second = client.batches.list(limit=2, after=first.data[-1].id)
    assert [b.id for b in second.data] == [ids[0]] and second.has_more is False
    assert [b.id for b in client.batches.list(limit=1)] == ids[::-1]  # the client pages through all of them


def test_metadata_over_openai_limits_is_refused(llm: FakeLLM, client: openai.OpenAI) -> None:
    input_file = upload(client, lines(1))
    for metadata in ({f"k{i}": "v" for i in range(17)}, {"k" * 65: "v"}, {"k": "v" * 513}):
        with pytest.raises(openai.BadRequestError) as refused:
            client.batches.create(
                input_file_id=input_file.id, endpoint="/v1/chat/completions", completion_window="24h", metadata=metadata
            )
        assert refused.value.param == "metadata"
    assert client.batches.list().data == []


def test_a_batch_over_the_enqueued_token_limit_fails_validation(llm: FakeLLM, client: openai.OpenAI) -> None:
    first_rows, second_rows = lines(4), lines(2, "more")
    # Each fits under the limit alone; together they do not.
    assert enqueued_tokens(first_rows) < 100 and enqueued_tokens(second_rows) < 100
    assert enqueued_tokens(first_rows + second_rows) > 100
    llm.configure(batch_enqueued_token_limit=100, batch_expire_after_lines=0)  # the first batch stays in progress
    first = submit(client, first_rows)
    poll(client, first.id, lambda b: b.status == "in_progress")
    second = submit(client, second_rows)
    assert second.status == "validating"
    failed = poll(client, second.id, terminal)[-1]
    assert failed.status == "failed" and failed.failed_at is not None and failed.in_progress_at is None
    assert failed.errors is not None and failed.errors.data is not None and len(failed.errors.data) == 1
    error = failed.errors.data[0]
    assert error.code == "token_limit_exceeded" and error.line is None
    assert error.message == (
        f"Enqueued token limit reached for {MODEL} in organization org-fakellm. Limit: 100 enqueued tokens. "
        "Please try again once some in_progress batches have been completed."
    )
    assert failed.output_file_id is None and failed.request_counts is not None and failed.request_counts.total == 0
    assert not [e for e in llm.entries() if e.batch_id == second.id]


def test_a_create_whose_response_is_lost_still_made_the_batch(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(batch_lose_create_next=1)
    input_file = upload(client, lines(2))
    with pytest.raises(openai.APIConnectionError):
        client.batches.create(
            input_file_id=input_file.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"outbox": "row-7"},
        )
    found = [b for b in client.batches.list() if (b.metadata or {}).get("outbox") == "row-7"]
    assert len(found) == 1 and found[0].input_file_id == input_file.id
    assert poll(client, found[0].id, terminal)[-1].status == "completed"
    again = submit(client, lines(1, "next"))  # only the next create was lost
    assert again.status == "validating" and llm.config()["batch_lose_create_next"] == 0


def test_a_client_retrying_a_lost_create_pays_for_a_second_batch(llm: FakeLLM, client: openai.OpenAI) -> None:
    """What the stand-in lets a test see: the SDK's own retry of a create whose response was lost makes
    a second batch, and the ledger bills both."""
    llm.configure(batch_lose_create_next=1)
    input_file = upload(client, lines(2))
    retried = client.with_options(max_retries=1).batches.create(
        input_file_id=input_file.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"k": "v"}
    )
    made = client.batches.list().data
    assert len(made) == 2 and {b.input_file_id for b in made} == {input_file.id} and retried.id in {b.id for b in made}
    for batch in made:
        poll(client, batch.id, terminal)
    assert llm.summary(entries=False)["cost_by_tier"]["batch"]["calls"] == 4 and llm.repeats() == 2


def test_input_files_are_validated_as_openai_validates_them(llm: FakeLLM, client: openai.OpenAI) -> None:
    rows = lines(3)
    bad = [
        rows[0],
        {**rows[1], "custom_id": "doc-0"},
        {**rows[2], "method": "GET"},
        line("doc-9", "x", url="/v1/embeddings"),
        line("doc-8", "x", body=body("x", model="other-model")),
    ]
    content = "".join(json.dumps(r) + "\n" for r in bad).encode() + b"{not json\n"
    failed = poll(client, submit_raw(client, content).id, terminal)[-1]
    assert failed.status == "failed" and failed.errors is not None and failed.errors.data is not None
    assert [(e.line, e.code) for e in failed.errors.data] == [
        (2, "duplicate_custom_id"),
        (3, "invalid_request"),
        (4, "url_mismatch"),
        (5, "model_mismatch"),
        (6, "invalid_json_line"),
    ]
    llm.configure(batch_max_lines=3)
    failed = poll(client, submit(client, lines(4)).id, terminal)[-1]
    assert failed.errors is not None and [e.code for e in failed.errors.data or []] == ["too_many_tasks"]
    failed = poll(client, submit_raw(client, b"\n").id, terminal)[-1]
    assert failed.errors is not None and [e.code for e in failed.errors.data or []] == ["empty_file"]
    llm.configure(batch_max_file_bytes=100)
    with pytest.raises(openai.BadRequestError, match="over the maximum of 100 bytes"):
        upload(client, lines(3))


def submit_raw(client: openai.OpenAI, content: bytes) -> Batch:
    input_file = upload(client, content)
    return client.batches.create(input_file_id=input_file.id, endpoint="/v1/chat/completions", completion_window="24h")


def test_files_are_stored_read_and_deleted(llm: FakeLLM, client: openai.OpenAI) -> None:
    rows = lines(2)
    stored = upload(client, rows)
    assert (stored.purpose, stored.status, stored.filename) == ("batch", "processed", "input.jsonl")
    assert stored.id.startswith("file-") and stored.bytes == len(client.files.content(stored.id).content)
    assert client.files.retrieve(stored.id) == stored
    assert [json.loads(r) for r in client.files.content(stored.id).text.splitlines()] == rows
    deleted = client.files.delete(stored.id)
    assert (deleted.id, deleted.deleted) == (stored.id, True)
    with pytest.raises(openai.NotFoundError, match=f"No such File object: {stored.id}"):
        client.files.retrieve(stored.id)
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nope")


def test_flex_calls_can_be_refused_resource_unavailable_and_are_not_billed(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(flex_unavailable_rate=1.0)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(**body("A flex call."), service_tier="flex")
    assert refused.value.status_code == 429 and refused.value.code == "resource_unavailable"
    assert "Resource unavailable" in refused.value.message
    realtime = client.chat.completions.create(**body("A flex call."))  # realtime calls are served
    assert realtime.choices[0].message.content
    llm.configure(flex_unavailable_rate=0.0)
    flex = client.chat.completions.create(**body("A flex call."), service_tier="flex")
    assert flex.service_tier == "flex" and flex.choices[0].message.content == realtime.choices[0].message.content
    assert [(e.tier, e.status, e.error) for e in llm.entries()] == [
        ("flex", 429, "flex_unavailable"),
        ("realtime", 200, None),
        ("flex", 200, None),
    ]
    assert llm.summary(entries=False)["cost_by_tier"]["flex"]["calls"] == 1


def test_the_ledger_bills_batch_lines_and_flex_calls_at_half_the_realtime_price(
    llm: FakeLLM, client: openai.OpenAI, server: FakeLLMServer
) -> None:
    texts = [f"Document {i} says something. Then more." for i in range(4)]
    for text in texts:
        client.chat.completions.create(**body(text))
        client.chat.completions.create(**body(text), service_tier="flex")
    rows = [line(f"doc-{i}", text) for i, text in enumerate(texts)]
    assert poll(client, submit(client, rows).id, terminal)[-1].status == "completed"
    ledger = httpx.get(f"{server.url}/_ledger", params={"entries": False}).json()
    tiers = ledger["cost_by_tier"]
    assert {name: tier["calls"] for name, tier in tiers.items()} == {"realtime": 4, "flex": 4, "batch": 4}
    for name in ("flex", "batch"):
        assert tiers[name]["prompt_tokens"] == tiers["realtime"]["prompt_tokens"]
        assert tiers[name]["completion_tokens"] == tiers["realtime"]["completion_tokens"]
        assert tiers[name]["cost_usd"] == pytest.approx(tiers["realtime"]["cost_usd"] / 2)
    assert tiers["realtime"]["cost_usd"] > 0
    assert ledger["cost_usd"] == pytest.approx(2 * tiers["realtime"]["cost_usd"])
    assert ledger["repeats"] == 8  # the same prompts, paid three times each
    entries = httpx.get(f"{server.url}/_ledger", params={"text": False}).json()["entries"]
    assert {(e["tier"], e["price_factor"]) for e in entries} == {("realtime", 1.0), ("flex", 0.5), ("batch", 0.5)}


def test_batch_knobs_are_set_over_http_and_checked(llm: FakeLLM, server: FakeLLMServer) -> None:
    with httpx.Client(base_url=server.url) as http:
        config = http.post("/_config", json={"batch_shuffle_output": True, "flex_unavailable_rate": 0.5}).json()
        assert (config["batch_shuffle_output"], config["flex_unavailable_rate"]) == (True, 0.5)
        bad_fields = ({"batch_time_scale": 0}, {"flex_unavailable_rate": 2}, {"batch_fail_custom_ids": "x"})
        for bad in (*bad_fields, {"batch_fail_lines": [-1]}, {"batch_fail_lines": [True]}):
            assert http.post("/_config", json=bad).status_code == 400, bad
        # All or nothing: a bad batch field leaves the realtime fields as they were.
        assert http.post("/_config", json={"latency_s": 1, "batch_line_s": -1}).status_code == 400
        assert llm.latency_s == 0.0


def test_dialects_without_a_batch_api_answer_404(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(dialect="ollama")
    with pytest.raises(openai.NotFoundError):
        client.batches.list()


def test_every_answer_parses_strictly_as_the_openai_types(llm: FakeLLM, server: FakeLLMServer) -> None:
    """The client's own parsing is lenient; pydantic validation of the raw JSON is not."""
    llm.configure(batch_expire_after_lines=1, batch_fail_custom_ids=["doc-1"])
    content = "".join(json.dumps(r) + "\n" for r in lines(3)).encode()
    with httpx.Client(base_url=server.base_url, timeout=5) as http:
        raw_file = http.post("/files", files={"file": ("in.jsonl", content)}, data={"purpose": "batch"}).json()
        FileObject.model_validate(raw_file, strict=True)
        create = {"input_file_id": raw_file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        raw = http.post("/batches", json={**create, "metadata": {"k": "v"}}).json()
        seen = [Batch.model_validate(raw, strict=True)]
        deadline = time.monotonic() + 10
        while not terminal(seen[-1]):
            assert time.monotonic() < deadline
            time.sleep(0.02)
            seen.append(Batch.model_validate(http.get(f"/batches/{raw['id']}").json(), strict=True))
        assert {b.status for b in seen} >= {"validating", "expired"}
        page = http.get("/batches", params={"limit": 5}).json()
        assert set(page) == {"object", "data", "first_id", "last_id", "has_more"}
        assert [Batch.model_validate(b, strict=True).id for b in page["data"]] == [raw["id"]]
        output = http.get(f"/files/{seen[-1].output_file_id}/content").text.splitlines()
        ChatCompletion.model_validate(json.loads(output[0])["response"]["body"], strict=True)
        errors = [json.loads(row) for row in http.get(f"/files/{seen[-1].error_file_id}/content").text.splitlines()]
        for error in errors:
            assert set(error) == {"id", "custom_id", "response", "error"}
        deleted = http.delete(f"/files/{raw_file['id']}").json()
        FileDeleted.model_validate(deleted, strict=True)
        refused = http.post("/batches", json={**create, "completion_window": "1h"})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "completion_window"


# ------------------------------------------------------------------------------------------------------
# batch_hold: a request kept at a named point until the test lets it go


def create(client: openai.OpenAI, input_file_id: str) -> Batch:
    return client.batches.create(input_file_id=input_file_id, endpoint="/v1/chat/completions", completion_window="24h")


def held(**counts: int) -> dict[str, int]:
    """What `FakeLLM.held` answers when `counts` requests wait at those points and none elsewhere."""
    return {point: counts.get(point, 0) for point in HOLD_POINTS}


def send_and_stay(server: FakeLLMServer, request: httpx.Request) -> socket.socket:
    """Sends `request` on a connection of its own and reads nothing back: closing the socket is its
    client going away (a process killed while it waits)."""
    request.read()
    head = f"{request.method} {request.url.raw_path.decode()} HTTP/1.1\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in request.headers.items()) + "\r\n"
    connection = socket.create_connection(("127.0.0.1", server.port))
    connection.sendall(head.encode() + request.content)
    return connection


def test_a_held_upload_stores_nothing_until_its_point_is_configured_away(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(batch_hold=["upload"])
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(upload, client, lines(2))
        assert llm.wait_held("upload")
        assert not pending.done() and llm.batches.files == {} and llm.held() == held(upload=1)
        llm.configure(batch_hold=[])
        stored = pending.result(timeout=5)
    assert list(llm.batches.files) == [stored.id] and llm.held() == held()
    assert [json.loads(r) for r in client.files.content(stored.id).text.splitlines()] == lines(2)


def test_a_held_create_creates_nothing_until_released_over_http(
    llm: FakeLLM, client: openai.OpenAI, server: FakeLLMServer
) -> None:
    input_file = upload(client, lines(2))
    with httpx.Client(base_url=server.url) as http:
        assert http.post("/_config", json={"batch_hold": ["create"]}).json()["batch_hold"] == ["create"]
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(create, client, input_file.id)
            assert llm.wait_held("create")
            assert http.get("/_held").json() == held(create=1)
            assert client.batches.list().data == [] and not pending.done()
            assert http.post("/_config", json={"batch_hold": []}).status_code == 200
            created = pending.result(timeout=5)
        assert http.get("/_held").json() == held()
    assert [b.id for b in client.batches.list()] == [created.id] and created.status == "validating"


def test_a_batch_whose_create_is_held_after_creating_it_exists_and_runs(llm: FakeLLM, client: openai.OpenAI) -> None:
    input_file = upload(client, lines(2))
    llm.configure(batch_hold=["created"])
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(create, client, input_file.id)
        assert llm.wait_held("created")
        listed = client.batches.list().data
        assert len(listed) == 1 and listed[0].input_file_id == input_file.id
        assert poll(client, listed[0].id, terminal)[-1].status == "completed"  # on its clock, while held
        assert not pending.done() and llm.held() == held(created=1)
        llm.configure(batch_hold=[])
        created = pending.result(timeout=5)
    assert created.id == listed[0].id and created.status == "validating"  # the batch as it was created
    assert llm.held() == held()


def test_retrieves_and_content_reads_are_held_and_counted_point_by_point(
    llm: FakeLLM, client: openai.OpenAI, server: FakeLLMServer
) -> None:
    created = submit(client, lines(2))
    input_file_id = created.input_file_id
    llm.configure(batch_hold=["retrieve", "content"])
    with ThreadPoolExecutor(3) as pool:
        retrieves = [pool.submit(client.batches.retrieve, created.id) for _ in range(2)]
        content = pool.submit(client.files.content, input_file_id)
        assert llm.wait_held("retrieve", 2) and llm.wait_held("content", 1)
        assert httpx.get(f"{server.url}/_held").json() == llm.held() == held(retrieve=2, content=1)
        # The other endpoints are not held.
        assert [b.id for b in client.batches.list()] == [created.id]
        assert client.files.retrieve(input_file_id).id == input_file_id
        assert not any(f.done() for f in retrieves) and not content.done()
        llm.configure(batch_hold=["content"])
        assert {f.result(timeout=5).id for f in retrieves} == {created.id}
        assert llm.held() == held(content=1) and not content.done()
        llm.configure(batch_hold=[])
        assert [json.loads(r) for r in content.result(timeout=5).text.splitlines()] == lines(2)
    assert llm.held() == held()


def test_a_reset_of_the_config_releases_a_held_request(
    llm: FakeLLM, client: openai.OpenAI, server: FakeLLMServer
) -> None:
    llm.configure(batch_hold=["upload", "retrieve"])
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(upload, client, lines(1))
        assert llm.wait_held("upload")
        assert httpx.post(f"{server.url}/_reset", json={"config": True}).json()["config"]["batch_hold"] == []
        stored = pending.result(timeout=5)
    assert list(llm.batches.files) == [stored.id] and llm.held() == held()


def test_a_held_request_whose_client_leaves_goes_no_further(llm: FakeLLM, server: FakeLLMServer) -> None:
    content = "".join(json.dumps(r) + "\n" for r in lines(2)).encode()
    files = {"file": ("in.jsonl", content)}
    llm.configure(batch_hold=["upload"])
    leaving = send_and_stay(
        server, httpx.Request("POST", f"{server.base_url}/files", files=files, data={"purpose": "batch"})
    )
    assert llm.wait_held("upload")
    leaving.close()
    assert llm.wait_held("upload", 0)  # it stopped waiting while its point is still held: its client left
    llm.configure(batch_hold=[])
    assert llm.batches.files == {}

    with httpx.Client(base_url=server.base_url, timeout=5) as http:
        input_file = http.post("/files", files=files, data={"purpose": "batch"}).json()
        llm.configure(batch_hold=["created"])
        body = {"input_file_id": input_file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        leaving = send_and_stay(server, httpx.Request("POST", f"{server.base_url}/batches", json=body))
        assert llm.wait_held("created")
        leaving.close()
        assert llm.wait_held("created", 0)
        llm.configure(batch_hold=[])
        made = http.get("/batches").json()["data"]
        assert [b["input_file_id"] for b in made] == [input_file["id"]]  # the batch made before it left stays
        deadline = time.monotonic() + 10
        while http.get(f"/batches/{made[0]['id']}").json()["status"] != "completed":
            assert time.monotonic() < deadline
            time.sleep(0.02)


def test_batch_hold_names_known_points_only(llm: FakeLLM, server: FakeLLMServer) -> None:
    with pytest.raises(ValueError, match="batch_hold must be a list of points"):
        llm.configure(batch_hold=["uplaod"])
    with httpx.Client(base_url=server.url) as http:
        for bad in (["upload", "nowhere"], "upload", [1], None):
            assert http.post("/_config", json={"batch_hold": bad}).status_code == 400, bad
    assert llm.config()["batch_hold"] == []
    with pytest.raises(ValueError, match="no hold point"):
        llm.wait_held("nowhere")
    assert llm.configure(batch_hold=list(HOLD_POINTS))["batch_hold"] == list(HOLD_POINTS)


def test_an_answer_can_hold_what_a_model_may_write_escaped_in_the_file(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(batch_answer_text={"number 1 of": "A NUL \x00 and half a pair \ud800."})
    done = poll(client, submit(client, lines(3)).id, terminal)[-1]
    content = client.files.content(done.output_file_id or "").content
    assert content.isascii() and b"\\u0000" in content and b"\\ud800" in content  # JSON escapes, valid UTF-8
    by_id = {o["custom_id"]: o["response"]["body"] for o in read_jsonl(client, done.output_file_id)}
    assert by_id["doc-1"]["choices"][0]["message"]["content"] == "A NUL \x00 and half a pair \ud800."
    assert "\x00" not in by_id["doc-0"]["choices"][0]["message"]["content"]


def test_an_output_line_can_be_written_verbatim(llm: FakeLLM, client: openai.OpenAI) -> None:
    deep = '{"custom_id": "{custom_id}", "response": {"status_code": 200, "body": ' + "[" * 1000 + "]" * 1000 + "}}"
    llm.configure(batch_answer_line={"number 2 of": deep})
    done = poll(client, submit(client, lines(3)).id, terminal)[-1]
    rows = client.files.content(done.output_file_id or "").text.splitlines()
    assert len(rows) == 3 and rows.count(deep.replace("{custom_id}", "doc-2")) == 1
    assert done.request_counts is not None and done.request_counts.completed == 3


def test_requests_about_a_marked_batch_or_its_files_or_the_listing_are_refused(
    llm: FakeLLM, client: openai.OpenAI
) -> None:
    marked, other = submit(client, lines(2, "marked")), submit(client, lines(2, "other"))
    done = poll(client, marked.id, terminal)[-1]
    llm.configure(
        batch_refuse=[
            {"point": "retrieve", "status": 403, "marker": "of marked."},
            {"point": "content", "status": 400, "marker": "of marked."},
        ]
    )
    with pytest.raises(openai.PermissionDeniedError):
        client.batches.retrieve(marked.id)
    with pytest.raises(openai.BadRequestError):
        client.files.content(done.output_file_id or "")
    assert client.batches.retrieve(other.id).id == other.id  # another batch is answered as usual
    assert list(client.batches.list(limit=10))
    llm.configure(batch_refuse=[{"point": "list", "status": 400}])
    with pytest.raises(openai.BadRequestError):
        client.batches.list(limit=10)
    for bad in ([{"point": "create", "status": 400}], [{"point": "list", "status": 500}], {"list": 400}):
        with pytest.raises(ValueError, match="batch_refuse"):
            llm.configure(batch_refuse=bad)


def test_files_and_batches_belong_to_the_api_key_that_made_them(
    llm: FakeLLM, client: openai.OpenAI, server: FakeLLMServer
) -> None:
    batch = submit(client, lines(2), metadata={"docsum_batch": "dsb_1"})
    done = poll(client, batch.id, terminal)[-1]
    with openai.OpenAI(base_url=server.base_url, api_key="another-account", max_retries=0, timeout=5) as other:
        with pytest.raises(openai.NotFoundError):
            other.batches.retrieve(batch.id)
        with pytest.raises(openai.NotFoundError):
            other.files.content(done.output_file_id or "")
        with pytest.raises(openai.NotFoundError):
            other.batches.cancel(batch.id)
        assert list(other.batches.list(limit=100)) == []
        with pytest.raises(openai.NotFoundError):  # nor can it make a batch of another account's file
            other.batches.create(
                input_file_id=batch.input_file_id, endpoint="/v1/chat/completions", completion_window="24h"
            )
    assert [b.id for b in client.batches.list(limit=100)] == [batch.id]
