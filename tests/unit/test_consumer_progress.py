"""One partition's progress in the consumer: the offset to commit is one past the last of the offsets that
are done with no unfinished one before them, so a crash redelivers only (and all of) the unfinished work."""

from __future__ import annotations

from docsum_shared.consumer import _PartitionProgress
from docsum_shared.lanes import Lanes


def progress(*offsets: int) -> _PartitionProgress:
    """Progress with `offsets` handed to handlers, in that order."""
    p = _PartitionProgress()
    for offset in offsets:
        p.add(offset)
    return p


def test_nothing_to_commit_at_first() -> None:
    assert _PartitionProgress().committable is None
    assert progress(0, 1, 2).committable is None
    assert progress(0, 1, 2).committed is None  # only the consumer records what it committed


def test_finishing_in_order_moves_the_offset_one_past_each() -> None:
    p = progress(10, 11, 12)
    p.finish(10)
    assert p.committable == 11
    p.finish(11)
    assert p.committable == 12
    p.finish(12)
    assert p.committable == 13
    assert not p.pending


def test_out_of_order_finish_waits_for_the_lowest_unfinished() -> None:
    p = progress(0, 1, 2, 3)
    p.finish(2)
    p.finish(3)
    assert p.committable is None  # 0 is not done: committing past it would lose it on a crash
    p.finish(1)
    assert p.committable is None
    p.finish(0)
    assert p.committable == 4  # all done at once
    assert not p.pending


def test_a_gap_holds_the_offset_at_the_unfinished_one() -> None:
    p = progress(5, 6, 7, 8)
    p.finish(5)
    p.finish(7)
    p.finish(8)
    assert p.committable == 6  # 6 is redelivered after a crash; 7 and 8 (done) would be too
    assert list(p.pending) == [6, 7, 8]
    p.finish(6)
    assert p.committable == 9
    assert not p.pending


def test_finishing_an_unknown_offset_changes_nothing() -> None:
    p = progress(0, 1)
    p.finish(42)
    assert p.committable is None
    assert p.pending == {0: False, 1: False}
    p.finish(0)
    p.finish(7)
    assert p.committable == 1
    assert p.pending == {1: False}


def test_finishing_on_an_empty_partition_changes_nothing() -> None:
    p = _PartitionProgress()
    p.finish(0)
    assert p.committable is None
    assert not p.pending


def test_a_repeated_finish_changes_nothing() -> None:
    p = progress(0, 1, 2)
    p.finish(1)
    p.finish(1)
    assert p.committable is None
    assert p.pending == {0: False, 1: True, 2: False}
    p.finish(0)
    assert p.committable == 2
    p.finish(0)  # already committable: not moved back, not moved on
    p.finish(1)
    assert p.committable == 2
    assert p.pending == {2: False}


def test_offsets_added_after_all_were_done() -> None:
    p = progress(0, 1)
    p.finish(0)
    p.finish(1)
    assert p.committable == 2
    p.add(2)
    p.add(3)
    assert p.committable == 2  # the new ones are not done: the offset stays
    p.finish(3)
    assert p.committable == 2
    p.finish(2)
    assert p.committable == 4


def test_offsets_need_not_be_contiguous() -> None:
    """Compacted topics and transaction markers leave holes in a partition's offsets."""
    p = progress(3, 9, 20)
    p.finish(3)
    assert p.committable == 4
    p.finish(20)
    assert p.committable == 4
    p.finish(9)
    assert p.committable == 21


def test_the_committed_offset_is_left_to_the_consumer() -> None:
    p = progress(0)
    p.finish(0)
    p.committed = p.committable  # what ConsumerService._commit_progress does after a commit
    p.add(1)
    p.finish(1)
    assert (p.committed, p.committable) == (1, 2)


def test_a_busy_key_queues_its_messages_without_opening_a_lane() -> None:
    lanes: Lanes[str, str] = Lanes()
    assert lanes.add("a", "a0")
    assert not lanes.add("a", "a1")  # behind a0: no second slot
    assert lanes.add("b", "b0")
    assert lanes.held == 3
    assert lanes.leading("a", 1) == ["a0"] and lanes.leading("a", 5) == ["a0", "a1"]
    lanes.done("a")
    assert lanes.leading("a", 1) == ["a1"]  # the next of the key, in order, in the same slot
    lanes.done("a")
    assert lanes.leading("a", 1) == []
    assert lanes.add("a", "a2")  # the lane closed: a new one opens
    lanes.close("a")
    lanes.close("b")  # handed back: nothing held any more
    assert lanes.held == 0


def test_lanes_waiting_for_a_slot_are_handed_back_in_the_order_they_opened() -> None:
    lanes: Lanes[tuple[str, int], str] = Lanes()
    for lane in [("t", 0), ("u", 0), ("t", 1)]:
        lanes.add(lane, f"{lane}")
        lanes.ready.append(lane)
    lanes.close_ready(lambda lane: lane[0] == "t")  # one topic's lanes: its partitions were revoked
    assert list(lanes.ready) == [("u", 0)] and lanes.held == 1
    assert lanes.next_ready() == ("u", 0) and lanes.next_ready() is None
