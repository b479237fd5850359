"""/v1/keys: the operator creates, lists and revokes stored API keys (only with DOCSUM_ADMIN_KEY set).

A key is shown once, in the answer that creates it; afterwards only its id, owner and name are. A
revoked key is refused from the next request on: every request looks its key up (no cache).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, status
from pydantic import BaseModel, ConfigDict, Field

from .. import keystore
from ..deps import PoolDep, require_admin
from ..inputs import StoredText, check_text
from ..responses import ErrorBody, errors
from ..security import is_key_id

router = APIRouter(prefix="/v1/keys", tags=["keys"], dependencies=[Depends(require_admin)])

OWNER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$"


class KeyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    owner: Annotated[str, Field(pattern=OWNER_PATTERN, description="who the key calls as; their tasks are theirs")]
    name: Annotated[StoredText, Field(max_length=100, description='what the key is for ("ci", "laptop")')] | None = None


class KeyInfo(BaseModel):
    key_id: str
    owner: str
    name: str | None
    created_at: datetime
    last_used_at: datetime | None  # to the minute
    revoked_at: datetime | None


class KeyCreated(KeyInfo):
    key: str  # `Authorization: Bearer <key>`; shown this once, never again


def _info(record: keystore.KeyRecord) -> KeyInfo:
    return KeyInfo(**record.__dict__)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=KeyCreated,
    responses={**errors(401, 422), 400: {"model": ErrorBody, "description": "The body cannot be parsed as JSON."}},
)
async def create_key(body: KeyRequest, pool: PoolDep) -> KeyCreated:
    record, key = await keystore.create_key(pool, body.owner, body.name)
    return KeyCreated(**record.__dict__, key=key)


@router.get("", response_model=list[KeyInfo], responses=errors(401, 422))
async def list_keys(
    pool: PoolDep,
    owner: Annotated[str | None, Query(pattern=OWNER_PATTERN, description="only this owner's keys")] = None,
    include_revoked: Annotated[bool, Query(description="revoked keys too")] = False,
) -> list[KeyInfo]:
    return [_info(r) for r in await keystore.list_keys(pool, owner, include_revoked)]


@router.delete(
    "/{key_id}",
    response_model=KeyInfo,
    responses={**errors(401, 422), 404: {"model": ErrorBody, "description": "No such key."}},
)
async def revoke_key(
    pool: PoolDep, key_id: Annotated[str, Path(description="the id `list` shows (the part after `dsk_`)")]
) -> KeyInfo:
    """Revoke a key: refused from the next request on. Revoking it again changes nothing."""
    check_text(("path", "key_id"), key_id)
    record = await keystore.revoke_key(pool, key_id) if is_key_id(key_id) else None
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no key {key_id}")
    return _info(record)
