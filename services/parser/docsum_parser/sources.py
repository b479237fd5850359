"""The bytes of a document another system published: decoded from the message, read from a file under
the configured roots, downloaded from a configured host, or read from a configured bucket. Each way either
returns the bytes or raises `ItemFailed` with what to do; what may be reached is decided in intake.py.
"""

from __future__ import annotations

import asyncio
import os
import stat

import httpx2

from docsum_shared import outbound
from docsum_shared.blobs import ObjectTooLarge, S3Connection, S3Place, missing, passing_as_unavailable, read_object
from docsum_shared.errors import ItemFailed
from docsum_shared.events import DocumentSubmitted
from docsum_shared.intake_access import OwnerAccess

from . import intake, uris
from .settings import ParserSettings

MAX_REDIRECTS = 5
READ_BLOCK = 64 * 1024


async def content(event: DocumentSubmitted, settings: ParserSettings, s3: S3Connection | None = None) -> bytes:
    """The document's bytes, whichever way the message gives them; a URI only to where its owner's
    access allows (DOCSUM_INTAKE_OWNERS, else the global lists). An s3:// object is read through `s3`."""
    problem = intake.form_error(event)
    if problem is not None:
        raise ItemFailed(problem)
    if event.content_base64 is not None:
        return intake.decode_inline(event.content_base64, settings)
    assert event.source_uri is not None
    access = settings.intake_access(event.owner)
    source = intake.parse_uri(event.source_uri, settings, access)
    if isinstance(source, intake.FileSource):
        return await asyncio.to_thread(read_file, source.path, settings, access)
    if isinstance(source, S3Place):
        return await read_s3(source, settings, s3 or S3Connection())
    return await download(source, settings, access)


# --- s3:// --------------------------------------------------------------------------------------------


async def read_s3(place: S3Place, settings: ParserSettings, s3: S3Connection) -> bytes:
    """The object, at most DOCSUM_MAX_FILE_BYTES, with the AWS_* variables' credentials; a missing object
    or bucket or a refusal is the document's failure, said so; a server away or overloaded
    (ObjectStoreUnavailable) passes, and the message is handled again."""
    from botocore.exceptions import BotoCoreError, ClientError

    cap = settings.max_file_bytes
    try:
        with passing_as_unavailable():  # a server away or overloaded: the message is retried, not failed
            return await read_object(await s3.client(), place, max_bytes=cap)
    except ObjectTooLarge:
        raise ItemFailed(f"{place.uri} has over {cap:,} bytes, the limit (DOCSUM_MAX_FILE_BYTES)") from None
    except ClientError as exc:
        if missing(exc):
            raise ItemFailed(f"{place.uri} does not exist") from None
        error = exc.response.get("Error", {})
        raise ItemFailed(
            f"{place.uri} could not be read: {error.get('Code')} {error.get('Message', '')}".rstrip()
        ) from None
    except BotoCoreError as exc:
        raise ItemFailed(f"{place.uri} could not be read: {exc}") from None


# --- file:// ------------------------------------------------------------------------------------------


def read_file(path: str, settings: ParserSettings, access: OwnerAccess | None = None) -> bytes:
    """The file at `path`, if it is a regular file under one of the roots, and not in another owner's,
    once every symlink and .. is resolved (checked again on the opened file, so a link swapped in
    meanwhile leads nowhere)."""
    access = access or intake.global_access(settings)
    roots = [os.path.realpath(root) for root in access.file_roots]
    others = [os.path.realpath(root) for root in access.other_roots]

    def check(resolved: str) -> None:
        if (problem := intake.place_error(path, resolved, roots, others, access.setting("file_roots"))) is not None:
            raise ItemFailed(problem)

    resolved = os.path.realpath(path)
    check(resolved)
    try:
        fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ItemFailed(f"no file at {path}") from None
    except PermissionError:
        raise ItemFailed(f"{path} cannot be read by the parser: permission denied") from None
    except OSError as exc:
        raise ItemFailed(f"{path} cannot be opened: {exc.strerror or exc}") from None
    try:
        proc_link = f"/proc/self/fd/{fd}"
        if os.path.exists(proc_link):
            check(os.readlink(proc_link))
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ItemFailed(f"{path} is not a regular file")
        cap = settings.max_file_bytes
        if info.st_size > cap:
            raise ItemFailed(f"{path} has {info.st_size:,} bytes, over the limit of {cap:,} (DOCSUM_MAX_FILE_BYTES)")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(cap + 1)
    except OSError as exc:
        raise ItemFailed(f"{path} cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > cap:  # it grew while being read
        raise ItemFailed(f"{path} has more than {cap:,} bytes, the limit (DOCSUM_MAX_FILE_BYTES)")
    return data


# --- http(s):// ---------------------------------------------------------------------------------------


async def resolve(
    source: intake.HttpSource, settings: ParserSettings, access: OwnerAccess | None = None
) -> intake.Address:
    """The address to connect to (outbound.resolve), by the owner's access or else the global lists."""
    return await outbound.resolve(source, access or intake.global_access(settings))


async def download(source: intake.HttpSource, settings: ParserSettings, access: OwnerAccess | None = None) -> bytes:
    """GET the URI: to the checked address only, with connect and read timeouts and a deadline for the
    whole download, at most DOCSUM_MAX_FILE_BYTES; redirects only within the same origin."""
    timeout = httpx2.Timeout(settings.intake_http_timeout_s)
    shown = uris.shown(source.url)
    try:
        async with (
            asyncio.timeout(settings.intake_http_total_s),
            httpx2.AsyncClient(timeout=timeout, follow_redirects=False, trust_env=False) as client,
        ):
            url = source.url
            for _ in range(MAX_REDIRECTS + 1):
                body, location = await _get(client, source, url, settings, access)
                if body is not None:
                    return body
                problem = intake.redirect_error(source, location)
                if problem is not None:
                    raise ItemFailed(problem)
                url = str(httpx2.URL(url).join(location))
            raise ItemFailed(f"{shown} redirected more than {MAX_REDIRECTS} times")
    except TimeoutError:
        raise ItemFailed(
            f"{shown} took longer than {settings.intake_http_total_s:g} s to download (DOCSUM_INTAKE_HTTP_TOTAL_S)"
        ) from None
    except httpx2.TimeoutException as exc:
        raise ItemFailed(
            f"{shown} did not answer within {settings.intake_http_timeout_s:g} s"
            f" (DOCSUM_INTAKE_HTTP_TIMEOUT_S): {type(exc).__name__}"
        ) from None
    except httpx2.HTTPError as exc:  # the exception's text may hold the URL: only its kind is told
        raise ItemFailed(f"{shown} cannot be fetched: {type(exc).__name__}") from None
    except (httpx2.InvalidURL, UnicodeError) as exc:  # neither is an HTTPError: a URI no request can be made for
        raise ItemFailed(f"{shown} cannot be requested: {type(exc).__name__}: {_first_line(exc)}") from None


async def _get(
    client: httpx2.AsyncClient,
    source: intake.HttpSource,
    url: str,
    settings: ParserSettings,
    access: OwnerAccess | None,
) -> tuple[bytes | None, str]:
    """One request, to the address checked just before: (the body, "") or (None, the redirect's Location)."""
    request = await outbound.pinned_request(client, "GET", source, url, access or intake.global_access(settings))
    response = await client.send(request, stream=True)
    try:
        if response.is_redirect:
            return None, response.headers.get("location", "")
        if response.status_code != 200:
            raise ItemFailed(
                f"{uris.shown(url)} answered {response.status_code} {response.reason_phrase[:100]}: it cannot be"
                " fetched"
            )
        cap = settings.max_file_bytes
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise ItemFailed(
                f"{uris.shown(url)} has {int(declared):,} bytes, over the limit of {cap:,} (DOCSUM_MAX_FILE_BYTES)"
            )
        body = bytearray()
        async for block in response.aiter_bytes(READ_BLOCK):
            body += block
            if len(body) > cap:
                raise ItemFailed(f"{uris.shown(url)} has more than {cap:,} bytes, the limit (DOCSUM_MAX_FILE_BYTES)")
        return bytes(body), ""
    finally:
        await response.aclose()


def _first_line(exc: BaseException) -> str:
    """The exception's first line, cut short, with any URL in it shown without userinfo or query."""
    line = (str(exc).splitlines() or [""])[0]
    return uris.URI_IN_TEXT.sub(lambda m: uris.shown(m.group()), line)[:200]
