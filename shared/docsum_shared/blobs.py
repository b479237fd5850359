"""Document bytes, stored once by sha256 whoever submits them (the gateway's uploads, the documents other
systems publish onto Kafka), in one of two places (DOCSUM_BLOB_STORE):

- PostgreSQL (the default): the bytes are the `blobs` row's own `data`;
- S3-compatible object storage (`s3://bucket/prefix`): the bytes are the object `prefix/<sha256>`, and the
  row keeps only its location. The client is botocore's (aiobotocore), so credentials, endpoint and region
  come from the standard AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL,
  AWS_REGION) and the rest of the SDK's chain.

An object is written before the row that names it, under its content hash: a process killed between the two
leaves an object no row names (an orphan, which `sweep_orphans` removes once it is older than a grace
period), never a row naming nothing. Rows are never deleted, so an object a row names is never removed.

Writers of the same hash serialize on a transaction-scoped advisory lock per hash, so that a concurrent
upload and publication of the same bytes wait for each other instead of colliding on the primary key; the
sweep takes the same lock before it removes an object, and a writer checks under it that its object is still
there before it inserts the row.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import struct
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, cast

import asyncpg

if TYPE_CHECKING:
    from aiobotocore.config import AioConfig
    from types_aiobotocore_s3.client import S3Client
    from types_aiobotocore_s3.type_defs import CompletedPartTypeDef

# The (class, hash) key space of advisory locks, apart from the single-key locks other services take.
BLOB_LOCK_CLASS = 0x626C6F62  # "blob"

# An object this large or smaller is written in one request; a larger one in parts of this size (S3's
# smallest part but the last is 5 MiB), so that a process holds one part of a file at a time.
PART_BYTES = 8 * 1024 * 1024
READ_BLOCK = 64 * 1024

_SHA256 = re.compile(r"[0-9a-f]{64}")

Blocks = Callable[[], AsyncIterator[bytes]]  # a file's bytes from the start, each time it is called


@dataclass(frozen=True)
class NewBlob:
    """Bytes to store: their hash and size, and how to read them (more than once: for the object, then
    again should the object have gone before its row was written)."""

    sha256: str
    size: int
    blocks: Blocks

    @staticmethod
    def of(data: bytes) -> NewBlob:
        async def blocks() -> AsyncIterator[bytes]:
            yield data

        return NewBlob(hashlib.sha256(data).hexdigest(), len(data), blocks)


@dataclass(frozen=True)
class S3Place:
    """A bucket and a key (or a key prefix) in it."""

    bucket: str
    key: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def parse_s3_uri(uri: str) -> S3Place:
    """`s3://bucket/key` as its bucket and key (the key may be empty); ValueError naming what is wrong."""
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri[:200]!r} is not an s3:// URI")
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    # S3's bucket names: 3-63 of a-z 0-9 . - (the strictest of the compatible servers' rules).
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
        raise ValueError(f"{uri[:200]!r}: {bucket[:80]!r} is not a bucket name (3-63 characters of a-z 0-9 . -)")
    return S3Place(bucket, key)


def parse_blob_store(value: str) -> S3Place | None:
    """DOCSUM_BLOB_STORE: None for PostgreSQL ("" or "postgresql"), else the bucket and key prefix of
    `s3://bucket/prefix` (trailing slashes dropped); ValueError for anything else."""
    if value in ("", "postgresql"):
        return None
    place = parse_s3_uri(value)
    return S3Place(place.bucket, place.key.strip("/"))


def s3_client_config() -> AioConfig:
    from aiobotocore.config import AioConfig

    # Checksums only where an operation requires them: the S3-compatible servers do not all take the
    # trailing checksums botocore would otherwise add to every upload.
    return AioConfig(
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        # The SDK's standard retries (AWS_RETRY_MODE and AWS_MAX_ATTEMPTS, as every AWS SDK reads them).
        retries={
            "mode": os.environ.get("AWS_RETRY_MODE") or "standard",  # type: ignore[typeddict-item]
            "max_attempts": int(os.environ.get("AWS_MAX_ATTEMPTS") or 5),
        },
    )


class S3Connection:
    """One S3 client, made at first use (so that a process builds its dependencies without waiting on it)
    and shared by whoever reads or writes through it."""

    def __init__(self) -> None:
        self._exit = AsyncExitStack()
        self._client: S3Client | None = None
        self._starting = asyncio.Lock()

    async def client(self) -> S3Client:
        async with self._starting:
            client = self._client
            if client is None:
                from aiobotocore.session import get_session  # here: only a process on an object store loads it

                # botocore reads AWS_DEFAULT_REGION; AWS_REGION is what the other SDKs and servers' docs set.
                region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
                made = get_session().create_client("s3", region_name=region, config=s3_client_config())
                client = cast("S3Client", await self._exit.enter_async_context(made))
                self._client = client
            return client

    async def close(self) -> None:
        self._client = None
        await self._exit.aclose()


class ObjectStore:
    """The blobs' objects: one bucket and key prefix, through one S3 client."""

    def __init__(self, place: S3Place, connection: S3Connection | None = None) -> None:
        self.place = place
        self.connection = connection or S3Connection()

    async def client(self) -> S3Client:
        return await self.connection.client()

    async def close(self) -> None:
        await self.connection.close()

    def key(self, sha256: str) -> str:
        return f"{self.place.key}/{sha256}" if self.place.key else sha256

    def location(self, sha256: str) -> str:
        return S3Place(self.place.bucket, self.key(sha256)).uri

    # Every call maps S3's passing failures to ObjectStoreUnavailable (passing_as_unavailable).

    async def put(self, blob: NewBlob) -> None:
        """Write the object of `blob` (again, if it is there: its time is then renewed, which keeps the
        sweep off it for another grace period)."""
        with passing_as_unavailable():
            await self._put(blob)

    async def _put(self, blob: NewBlob) -> None:
        bucket, key, client = self.place.bucket, self.key(blob.sha256), await self.client()
        if blob.size <= PART_BYTES:
            body = b"".join([block async for block in blob.blocks()])
            await client.put_object(Bucket=bucket, Key=key, Body=body)
            return
        upload_id = (await client.create_multipart_upload(Bucket=bucket, Key=key))["UploadId"]
        try:
            parts: list[CompletedPartTypeDef] = []
            async for number, body in _parts(blob.blocks(), PART_BYTES):
                part = await client.upload_part(
                    Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
                )
                parts.append({"PartNumber": number, "ETag": part["ETag"]})
            await client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except BaseException:
            await client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
            raise

    async def modified(self, sha256: str) -> datetime | None:
        """When the object of `sha256` was last written; None if there is none."""
        from botocore.exceptions import ClientError

        client = await self.client()
        with passing_as_unavailable():
            try:
                head = await client.head_object(Bucket=self.place.bucket, Key=self.key(sha256))
            except ClientError as exc:
                if missing(exc):
                    return None
                raise
        return head["LastModified"]

    async def get(self, location: str) -> bytes:
        """The bytes of the object at `location` (an s3:// URI, as a row keeps it)."""
        with passing_as_unavailable():
            return await read_object(await self.client(), parse_s3_uri(location))

    async def delete(self, sha256: str) -> None:
        with passing_as_unavailable():
            await (await self.client()).delete_object(Bucket=self.place.bucket, Key=self.key(sha256))

    async def pages(self) -> AsyncIterator[list[tuple[str, datetime]]]:
        """The blobs' objects under the prefix, a page at a time: (sha256, last written). Keys that are not
        a hash under the prefix are not the blobs' and never listed."""
        prefix = f"{self.place.key}/" if self.place.key else ""
        paginator = (await self.client()).get_paginator("list_objects_v2")
        with passing_as_unavailable():
            async for page in paginator.paginate(Bucket=self.place.bucket, Prefix=prefix):
                found = []
                for item in page.get("Contents", []):
                    name = item["Key"].removeprefix(prefix)
                    if _SHA256.fullmatch(name):
                        found.append((name, item["LastModified"]))
                yield found


async def read_object(client: S3Client, place: S3Place, max_bytes: int | None = None) -> bytes:
    """The object's bytes; ObjectTooLarge past `max_bytes` (read no further than one block beyond)."""
    response = await client.get_object(Bucket=place.bucket, Key=place.key)
    async with response["Body"] as body:
        if max_bytes is None:
            return await body.read()
        if response["ContentLength"] > max_bytes:
            raise ObjectTooLarge(response["ContentLength"])
        data = bytearray()
        while block := await body.read(READ_BLOCK):
            data += block
            if len(data) > max_bytes:
                raise ObjectTooLarge(len(data))
        return bytes(data)


class ObjectStoreUnavailable(ConnectionError):
    """The object store did not answer, or answered that it cannot now (5xx, throttling), after the SDK's
    own retries: it passes. An OSError, so docsum_shared.errors counts it as infrastructure and the work is
    retried (a consumer's message is never dead-lettered for it)."""


# S3's codes for "not now" that may come with a status below 500.
_PASSING_CODES = {
    "SlowDown",
    "ServiceUnavailable",
    "InternalError",
    "RequestTimeout",
    "Throttling",
    "ThrottlingException",
}


@contextmanager
def passing_as_unavailable() -> Iterator[None]:
    """S3's passing failures (no connection, a timeout, a 5xx, throttling) as ObjectStoreUnavailable."""
    from botocore.exceptions import ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as BotoConnectionError

    try:
        yield
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        code = exc.response.get("Error", {}).get("Code", "")
        if status >= 500 or code in _PASSING_CODES:
            raise ObjectStoreUnavailable(f"the object store answered {code or status}: try again") from exc
        raise
    except (BotoConnectionError, HTTPClientError) as exc:
        raise ObjectStoreUnavailable(f"the object store cannot be reached ({exc})") from exc


class ObjectTooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


def missing(exc: Exception) -> bool:
    """`exc` is S3's answer that the object or bucket is not there."""
    code = getattr(exc, "response", {}).get("Error", {}).get("Code")
    return code in ("404", "NoSuchKey", "NotFound", "NoSuchBucket")


async def _parts(blocks: AsyncIterator[bytes], size: int) -> AsyncIterator[tuple[int, bytes]]:
    """The bytes as numbered parts (from 1) of `size`, the last one shorter."""
    buffer = bytearray()
    number = 1
    async for block in blocks:
        buffer += block
        while len(buffer) >= size:
            yield number, bytes(buffer[:size])
            del buffer[:size]
            number += 1
    if buffer or number == 1:
        yield number, bytes(buffer)


class BlobStore:
    """Where this deployment keeps document bytes: PostgreSQL (`objects` None) or an object store."""

    def __init__(self, objects: ObjectStore | None = None) -> None:
        self.objects = objects

    @staticmethod
    def of(setting: str) -> BlobStore:
        """The store DOCSUM_BLOB_STORE names."""
        place = parse_blob_store(setting)
        return BlobStore(ObjectStore(place) if place is not None else None)

    async def close(self) -> None:
        if self.objects is not None:
            await self.objects.close()

    async def upload(self, pool: asyncpg.Pool, blobs: Iterable[NewBlob]) -> None:
        """Before the transaction that stores the rows: write the objects of the blobs no row names yet
        (PostgreSQL: nothing, its bytes go in with the row)."""
        if self.objects is None:
            return
        wanted = {b.sha256: b for b in blobs}
        stored = await stored_hashes(pool, list(wanted))
        for sha256, blob in sorted(wanted.items()):
            if sha256 not in stored:
                await self.objects.put(blob)

    async def store(self, conn: asyncpg.Connection, blobs: Iterable[NewBlob]) -> None:
        """In the caller's transaction, under the lock of each hash: a row for each blob not stored yet (its
        bytes copied in, or its object's location: the object, written by `upload`, is checked first, and
        written again if the sweep removed it meanwhile)."""
        wanted = {b.sha256: b for b in blobs}
        hashes = sorted(wanted)
        await lock_blobs(conn, hashes)
        stored = await stored_hashes(conn, hashes)
        missing = [wanted[h] for h in hashes if h not in stored]
        if not missing:
            return
        if self.objects is None:
            await conn.copy_to_table(
                "blobs", source=_copy_rows(missing), columns=["sha256", "data", "size_bytes"], format="binary"
            )
            return
        for blob in missing:
            if await self.objects.modified(blob.sha256) is None:
                await self.objects.put(blob)
        await conn.executemany(
            "INSERT INTO blobs (sha256, location, size_bytes) VALUES ($1, $2, $3)",
            [(b.sha256, self.objects.location(b.sha256), b.size) for b in missing],
        )

    async def read(self, pool: asyncpg.Pool, sha256: str) -> bytes | None:
        """The stored bytes of `sha256` (None: no such blob), wherever its row says they are: a row written
        before the deployment moved to objects keeps its bytes."""
        row = await pool.fetchrow("SELECT data, location FROM blobs WHERE sha256 = $1", sha256)
        if row is None:
            return None
        if row["data"] is not None:
            return bytes(row["data"])
        if self.objects is None:
            # Written by a deployment on an object store, read by one configured without: say which.
            raise RuntimeError(f"blob {sha256} is in {row['location']}, and DOCSUM_BLOB_STORE names no object store")
        return await self.objects.get(row["location"])


async def lock_blobs(conn: asyncpg.Connection, hashes: list[str]) -> None:
    """Take the lock of each hash (in order, so two writers never deadlock), in the caller's transaction;
    two hashes sharing a lock key only wait for each other."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock($2, hashtext(h)) FROM (SELECT unnest($1::text[]) AS h ORDER BY 1) s",
        sorted(set(hashes)),
        BLOB_LOCK_CLASS,
    )


async def stored_hashes(db: asyncpg.Pool | asyncpg.Connection, hashes: list[str]) -> set[str]:
    rows = await db.fetch("SELECT sha256 FROM blobs WHERE sha256 = ANY($1::text[])", hashes)
    return {r["sha256"] for r in rows}


_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
_COPY_TRAILER = struct.pack("!h", -1)


async def _copy_rows(blobs: list[NewBlob]) -> AsyncIterator[bytes]:
    """COPY ... (FORMAT binary) rows (sha256, data, size_bytes), each blob's data read block by block: the
    bytes go to PostgreSQL without ever being whole in memory."""
    yield _COPY_HEADER
    for blob in blobs:
        sha = blob.sha256.encode()
        yield struct.pack("!hi", 3, len(sha)) + sha + struct.pack("!i", blob.size)
        async for block in blob.blocks():
            yield block
        yield struct.pack("!iq", 8, blob.size)
    yield _COPY_TRAILER


def orphans(page: list[tuple[str, datetime]], referenced: set[str], cutoff: datetime) -> list[str]:
    """The objects of `page` that may go: written before `cutoff` and named by no row."""
    return [sha for sha, modified in page if modified < cutoff and sha not in referenced]


async def sweep_orphans(pool: asyncpg.Pool, objects: ObjectStore, grace_s: float) -> int:
    """Remove the objects no row names that were last written more than `grace_s` ago (a writer killed
    between its object and its row, or a row refused after its object was written); how many went. Each
    is removed under its hash's lock, after checking again that no row names it and that nobody wrote it
    meanwhile: a writer holds the same lock while it checks its object and inserts the row."""
    removed = 0
    async for page in objects.pages():
        cutoff = datetime.now(UTC) - timedelta(seconds=grace_s)
        for sha256 in orphans(page, await stored_hashes(pool, [sha for sha, _ in page]), cutoff):
            async with pool.acquire() as conn, conn.transaction():
                await lock_blobs(conn, [sha256])
                if await stored_hashes(conn, [sha256]):
                    continue
                modified = await objects.modified(sha256)
                if modified is None or modified >= cutoff:
                    continue
                await objects.delete(sha256)
                removed += 1
    return removed
