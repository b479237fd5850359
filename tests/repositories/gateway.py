"""The gateway's repository contract: a task registered with its documents and their bytes, each task
its owner's, stored whole or not at all, as TaskRepository keeps them on PostgreSQL and its fake in memory.

A subclass gives `repo` and reads back what it stored (no load of the gateway's returns it: the read
side is docsum_shared.readmodel).

And the owners' re-drive gates (RedriveGatesContract): one claim at a time per owner, held under a
lease only its own claim renews or releases, at most so many claims a minute, a refusal spending nothing.
"""

from __future__ import annotations

import abc
import hashlib
import uuid
from dataclasses import dataclass
from typing import Protocol

import asyncpg
import pytest

from docsum_gateway.repository import Gate, NewDocument, Running, new_id
from docsum_gateway.uploads import Spool, UploadedFile
from docsum_shared.options import TaskOptions
from docsum_shared.states import DocumentStatus, TaskStatus
from docsum_shared.taskrate import Admission


class TaskStore(Protocol):
    async def create_task(
        self, owner: str, title: str | None, documents: list[NewDocument], options: TaskOptions
    ) -> str: ...
    async def task_status(self, task_id: str) -> str | None: ...


class GateStore(Protocol):
    async def claim(self, owner: str, per_minute: int, lease_s: float) -> Gate | Running | Admission: ...
    async def renew(self, gate: Gate, lease_s: float) -> None: ...
    async def release(self, gate: Gate) -> None: ...


@dataclass(frozen=True)
class StoredTask:
    owner: str
    title: str | None
    status: str
    options: TaskOptions


@dataclass(frozen=True)
class StoredDocument:
    id: str
    position: int
    filename: str
    content_type: str | None
    blob_sha256: str
    size_bytes: int
    status: str


def uploaded(data: bytes, filename: str = "a.txt", content_type: str | None = "text/plain") -> UploadedFile:
    """A received file as the upload parser leaves it: spooled and hashed."""
    spool = Spool(threshold=1 << 20)
    spool.write(data)
    return UploadedFile(filename, content_type, spool, hashlib.sha256(data))


def document(data: bytes, filename: str = "a.txt", content_type: str | None = "text/plain") -> NewDocument:
    return NewDocument(new_id(), uploaded(data, filename, content_type), filename)


def _owner() -> str:
    return f"owner-{uuid.uuid4().hex[:12]}"


def _bytes() -> bytes:
    return f"text {uuid.uuid4()}".encode()  # distinct bytes per case: blobs are shared by hash


class GatewayRepositoryContract(abc.ABC):
    repo: TaskStore

    # --- what the repository stored, read back ------------------------------------------------------

    @abc.abstractmethod
    async def stored_task(self, task_id: str) -> StoredTask | None: ...

    @abc.abstractmethod
    async def stored_documents(self, task_id: str) -> list[StoredDocument]:
        """The task's documents, in their order."""

    @abc.abstractmethod
    async def stored_blob(self, sha256: str) -> bytes | None: ...

    @abc.abstractmethod
    async def tasks_of(self, owner: str) -> list[str]: ...

    # --- the cases ------------------------------------------------------------------------------------

    async def test_a_new_task_is_its_owners_and_processing(self) -> None:
        owner = _owner()
        options = TaskOptions(strict=True, language="fr", length="brief", style="bullets")
        task_id = await self.repo.create_task(owner, "Notes", [document(_bytes())], options)
        assert str(uuid.UUID(task_id, version=4)) == task_id  # a canonical uuid4: nobody guesses another's
        assert await self.stored_task(task_id) == StoredTask(owner, "Notes", TaskStatus.PROCESSING, options)
        assert await self.repo.task_status(task_id) == TaskStatus.PROCESSING
        assert await self.tasks_of(owner) == [task_id]

    async def test_two_creations_are_two_tasks_each_of_its_owner(self) -> None:
        alice, bob = _owner(), _owner()
        data = _bytes()
        first = await self.repo.create_task(alice, None, [document(data)], TaskOptions())
        second = await self.repo.create_task(bob, None, [document(data)], TaskOptions())
        assert first != second
        assert (await self.tasks_of(alice), await self.tasks_of(bob)) == ([first], [second])
        stored = await self.stored_task(first)
        assert stored is not None and stored.title is None

    async def test_the_documents_are_pending_in_the_order_given(self) -> None:
        docs = [document(_bytes(), "b.txt"), document(_bytes(), "a.md", "text/markdown"), document(b"", "e.txt", None)]
        task_id = await self.repo.create_task(_owner(), None, docs, TaskOptions())
        assert await self.stored_documents(task_id) == [
            StoredDocument(d.id, i, d.filename, d.file.content_type, d.file.sha256, d.file.size, DocumentStatus.PENDING)
            for i, d in enumerate(docs)
        ]

    async def test_the_bytes_are_stored_once_by_their_hash(self) -> None:
        data = _bytes()
        same = [document(data, "one.txt"), document(data, "two.txt")]
        task_id = await self.repo.create_task(_owner(), None, same, TaskOptions())
        shas = {d.blob_sha256 for d in await self.stored_documents(task_id)}
        assert shas == {hashlib.sha256(data).hexdigest()}
        assert await self.stored_blob(hashlib.sha256(data).hexdigest()) == data
        # Another task with the same bytes shares the stored blob.
        again = await self.repo.create_task(_owner(), None, [document(data)], TaskOptions())
        assert {d.blob_sha256 for d in await self.stored_documents(again)} == shas
        assert await self.stored_blob(hashlib.sha256(data).hexdigest()) == data

    async def test_a_document_id_already_stored_refuses_the_whole_task(self) -> None:
        owner = _owner()
        taken = document(_bytes())
        first = await self.repo.create_task(owner, None, [taken], TaskOptions())
        fresh = _bytes()
        clash = NewDocument(taken.id, uploaded(_bytes()), "clash.txt")
        with pytest.raises(asyncpg.UniqueViolationError):
            await self.repo.create_task(owner, "again", [document(fresh), clash], TaskOptions())
        assert await self.tasks_of(owner) == [first]  # nothing of the refused task: no task, no document
        assert await self.stored_blob(hashlib.sha256(fresh).hexdigest()) is None  # and not its bytes
        assert [d.filename for d in await self.stored_documents(first)] == ["a.txt"]

    async def test_a_task_listing_a_document_id_twice_is_refused(self) -> None:
        owner = _owner()
        twice = document(_bytes())
        with pytest.raises(asyncpg.UniqueViolationError):
            await self.repo.create_task(owner, None, [twice, twice], TaskOptions())
        assert await self.tasks_of(owner) == []

    async def test_the_status_of_no_such_task_is_none(self) -> None:
        assert await self.repo.task_status(new_id()) is None


LEASE_S = 60.0  # a lease that outlives every case
OVER = 0.0  # a lease over as soon as it is taken: the next claim finds the gate open


async def _gate(store: GateStore, owner: str, per_minute: int = 0, lease_s: float = LEASE_S) -> Gate:
    claimed = await store.claim(owner, per_minute, lease_s)
    assert isinstance(claimed, Gate), claimed
    return claimed


class RedriveGatesContract(abc.ABC):
    gates: GateStore

    @abc.abstractmethod
    async def stored_tat(self, owner: str) -> float | None:
        """The owner's theoretical arrival time as stored (None: no row)."""

    async def test_a_claim_holds_the_gate_until_it_is_released(self) -> None:
        owner = _owner()
        gate = await _gate(self.gates, owner)
        assert gate.owner == owner
        assert await self.gates.claim(owner, 0, LEASE_S) == Running()
        assert isinstance(await self.gates.claim(_owner(), 0, LEASE_S), Gate)  # another owner's gate is its own
        await self.gates.release(gate)
        again = await _gate(self.gates, owner)
        assert again.claimed_at != gate.claimed_at  # a new token

    async def test_a_gate_whose_lease_ran_out_is_claimed_again(self) -> None:
        owner = _owner()
        await _gate(self.gates, owner, lease_s=OVER)
        assert isinstance(await self.gates.claim(owner, 0, LEASE_S), Gate)

    async def test_renewing_holds_the_gate_past_its_first_lease(self) -> None:
        owner = _owner()
        gate = await _gate(self.gates, owner, lease_s=OVER)
        await self.gates.renew(gate, LEASE_S)
        assert await self.gates.claim(owner, 0, LEASE_S) == Running()

    async def test_a_stale_claim_neither_renews_nor_releases_a_newer_one(self) -> None:
        owner = _owner()
        stale = await _gate(self.gates, owner, lease_s=OVER)
        await _gate(self.gates, owner)  # its lease ran out: a newer claim holds the gate
        await self.gates.release(stale)
        assert await self.gates.claim(owner, 0, LEASE_S) == Running()
        await self.gates.renew(stale, OVER)  # would end the newer lease, were it the stale claim's
        assert await self.gates.claim(owner, 0, LEASE_S) == Running()

    async def test_claims_are_counted_per_owner_at_the_rate(self) -> None:
        owner = _owner()
        for _ in range(2):
            await self.gates.release(await _gate(self.gates, owner, per_minute=2))
        tat = await self.stored_tat(owner)
        refused = await self.gates.claim(owner, 2, LEASE_S)
        assert isinstance(refused, Admission) and not refused.allowed
        assert 1 <= refused.retry_after_s <= 30  # the next slot: 60/2 s after the burst of 2
        assert await self.stored_tat(owner) == tat  # a refusal books nothing
        assert isinstance(await self.gates.claim(_owner(), 2, LEASE_S), Gate)  # another owner's rate is its own

    async def test_a_claim_refused_as_running_spends_no_rate(self) -> None:
        owner = _owner()
        gate = await _gate(self.gates, owner, per_minute=2)
        tat = await self.stored_tat(owner)
        assert await self.gates.claim(owner, 2, LEASE_S) == Running()
        assert await self.stored_tat(owner) == tat
        await self.gates.release(gate)
        assert isinstance(await self.gates.claim(owner, 2, LEASE_S), Gate)  # the second of two a minute

    async def test_no_rate_books_nothing(self) -> None:
        owner = _owner()
        for _ in range(3):
            await self.gates.release(await _gate(self.gates, owner, per_minute=0))
        assert await self.stored_tat(owner) == 0.0
