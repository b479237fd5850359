"""A document's chunks are spread evenly over chunk-created's partitions, on a real broker: each member
of the summarizer group gets an even share of a long document, and a chunk announced again (a re-drive,
a round) goes where it went the first time."""

from __future__ import annotations

from collections import Counter

from docsum_shared.events import ChunkCreated, Topic
from docsum_shared.kafka import ensure_topics, make_producer, publish
from tests.integration.conftest import StackFactory
from tests.integration.helpers import kafka_settings, read_topics


def _chunks(document_id: str, n: int) -> list[ChunkCreated]:
    return [
        ChunkCreated(task_id="t-spread", document_id=document_id, chunk_id=f"{document_id}-c{i:05d}", chunk_index=i)
        for i in range(n)
    ]


async def test_a_documents_chunks_go_round_the_partitions_and_each_always_to_the_same(
    make_stack: StackFactory,
) -> None:
    stack = make_stack(services=())
    settings = kafka_settings(stack.env)
    topic = settings.topic(Topic.CHUNK_CREATED)
    partitions = settings.chunk_topic_partitions
    await ensure_topics(settings, wait_s=30)
    documents = {"d-long": 3 * partitions + 5, "d-short": 3}
    producer = make_producer(settings)
    await producer.start()
    try:
        for document_id, n in documents.items():
            await publish(producer, settings, _chunks(document_id, n), sender=None)
        await publish(producer, settings, _chunks("d-long", 4), sender=None)  # announced again
    finally:
        await producer.stop()

    records = await read_topics(stack.env, [topic])
    where: dict[bytes, set[int]] = {}
    for record in records:
        where.setdefault(record.key, set()).add(record.partition)
    assert all(len(found) == 1 for found in where.values()), where  # a chunk always goes to one partition
    long_ones = Counter(next(iter(where[c.chunk_id.encode()])) for c in _chunks("d-long", documents["d-long"]))
    # 41 chunks over 12 partitions: 3 or 4 each (by their ids' hash: 7 on one, none on two).
    assert set(long_ones) == set(range(partitions)), long_ones
    assert max(long_ones.values()) - min(long_ones.values()) <= 1, long_ones
    short_ones = {next(iter(where[c.chunk_id.encode()])) for c in _chunks("d-short", documents["d-short"])}
    assert len(short_ones) == 3  # consecutive partitions, one each
