"""The process's call slots (docsum_llm.slots): a free slot to the waiting call of lowest rank, ties and
unranked calls in the order they came, and no slot lost to a waiter cancelled."""

from __future__ import annotations

import asyncio

from docsum_llm.slots import RankedSlots


async def _wait_in_line(slots: RankedSlots, rank: tuple[float, ...] | None, log: list[str], name: str) -> None:
    async with slots.slot(rank):
        log.append(name)
        await asyncio.sleep(0)


async def _queued(slots: RankedSlots, n: int) -> None:
    """Until `n` calls wait (bounded: each turn of the loop lets one more reach its wait)."""
    for _ in range(100):
        if slots.waiting == n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{slots.waiting} waiting, not {n}")


async def test_a_free_slot_goes_to_the_lowest_rank_ties_in_arrival_order_unranked_first() -> None:
    slots = RankedSlots(1)
    await slots.acquire()  # the one slot busy: everyone below waits
    log: list[str] = []
    arrivals = [
        ("spare-1", (1, 5_000.0)),
        ("spare-2", (1, 6_300.0)),
        ("newcomer", (1, 999.0)),
        ("tie-first", (1, 7_000.0)),
        ("tie-second", (1, 7_000.0)),
        ("urgent", (0, 90_000.0)),
        ("merge", None),
    ]
    waiters = []
    for i, (name, rank) in enumerate(arrivals):
        waiters.append(asyncio.create_task(_wait_in_line(slots, rank, log, name)))
        await _queued(slots, i + 1)
    slots.release()
    await asyncio.gather(*waiters)
    assert log == ["merge", "urgent", "newcomer", "spare-1", "spare-2", "tie-first", "tie-second"]
    assert slots.free == 1 and slots.waiting == 0


async def test_a_cancelled_waiter_loses_no_slot_whether_it_was_waiting_or_just_given_one() -> None:
    slots = RankedSlots(2)
    await slots.acquire()
    await slots.acquire()
    log: list[str] = []
    gone = asyncio.create_task(_wait_in_line(slots, (1, 1.0), log, "gone"))
    handed = asyncio.create_task(_wait_in_line(slots, (1, 2.0), log, "handed"))
    last = asyncio.create_task(_wait_in_line(slots, (1, 3.0), log, "last"))
    await _queued(slots, 3)
    gone.cancel()  # cancelled while it waits
    await asyncio.gather(gone, return_exceptions=True)
    slots.release()  # to the next live waiter, not the cancelled one
    handed.cancel()  # cancelled in the same turn it was handed the slot: it passes it on
    slots.release()
    await asyncio.gather(handed, last, return_exceptions=True)
    assert log == ["last"]
    assert slots.free == 2 and slots.waiting == 0  # every slot back
    await asyncio.wait_for(asyncio.gather(slots.acquire(), slots.acquire()), 5)  # both can be taken again
