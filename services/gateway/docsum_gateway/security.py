"""Who is calling: API keys map to owners; every task belongs to the owner that created it."""

from __future__ import annotations

import hmac


def parse_api_keys(spec: str) -> dict[str, str]:
    """'owner=key,owner2=key2' → {key: owner}. Keys shorter than 16 characters are refused."""
    keys: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        owner, sep, key = item.partition("=")
        if not sep or not owner.strip() or len(key.strip()) < 16:
            raise ValueError("DOCSUM_API_KEYS must look like 'owner=key,...' with keys of 16+ characters")
        keys[key.strip()] = owner.strip()
    return keys


def owner_for(keys: dict[str, str], presented: str) -> str | None:
    """The owner of `presented`, compared in constant time against every configured key."""
    found = None
    for key, owner in keys.items():
        if hmac.compare_digest(key.encode(), presented.encode()):
            found = owner
    return found
