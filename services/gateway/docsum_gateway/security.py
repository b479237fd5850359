"""Who is calling: API keys map to owners; every task belongs to the owner that created it.

Keys come from two places: DOCSUM_API_KEYS (`owner=key,...`, fixed at start-up) and the `api_keys`
table, where an operator creates and revokes them (`docsum keys`, or /v1/keys with DOCSUM_ADMIN_KEY).
A stored key reads `dsk_<key id>_<secret>`: the id is public (it names the key in `list` and
`revoke`), the secret is 256 random bits and only its HMAC-SHA256 is stored (`key_hash`).

A WebSocket cannot always carry an `Authorization` header (browsers), so it may also authenticate
with a ticket: a short-lived token for one task, signed by the gateway (`issue_ticket`), good for one
connection. Tickets are signed, so every replica that shares the signing secret accepts them; the
nonce of each redeemed one is stored in PostgreSQL until the ticket expires (keystore.use_ticket), so
it opens one connection across every replica and restart. A ticket names the stored key it was issued
with (if any): revoking that key ends the streams the ticket opened.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass, field

MIN_KEY_CHARS = 16
TICKET_PREFIX = "wst1"
KEY_PREFIX = "dsk"
KEY_ID_HEX = 12  # 48 bits: unique enough for ids, which are not secret
_KEY_FORMAT = re.compile(rf"{KEY_PREFIX}_(?P<id>[0-9a-f]{{{KEY_ID_HEX}}})_(?P<secret>[A-Za-z0-9_-]{{43}})")
# Domain separation for the stored hashes: an HMAC under this key is no other hash of the same secret.
_HASH_KEY = b"docsum-api-key-v1"


def parse_api_keys(spec: str) -> dict[str, str]:
    """'owner=key,owner2=key2' → {key: owner}. Keys shorter than 16 characters are refused."""
    keys: dict[str, str] = {}
    for n, item in enumerate(filter(None, (part.strip() for part in spec.split(","))), start=1):
        owner, sep, key = item.partition("=")
        if not sep or not owner.strip():
            raise ValueError(f"entry {n} is not 'owner=key' (the list looks like 'owner=key,owner2=key2')")
        if len(key.strip()) < MIN_KEY_CHARS:
            raise ValueError(
                f"the key of owner '{owner.strip()}' has {len(key.strip())} characters;"
                f" keys need {MIN_KEY_CHARS} or more"
            )
        keys[key.strip()] = owner.strip()
    return keys


def owner_for(keys: dict[str, str], presented: str) -> str | None:
    """The owner of `presented`, compared in constant time against every configured key."""
    found = None
    for key, owner in keys.items():
        if hmac.compare_digest(key.encode(), presented.encode(errors="surrogateescape")):
            found = owner
    return found


@dataclass(frozen=True)
class NewKey:
    key_id: str
    key: str  # the whole key: shown once to whoever created it, never stored
    key_hash: str


def new_key() -> NewKey:
    key_id = secrets.token_hex(KEY_ID_HEX // 2)
    secret = secrets.token_urlsafe(32)  # 32 bytes: 43 URL-safe characters
    return NewKey(key_id, f"{KEY_PREFIX}_{key_id}_{secret}", key_hash(secret))


def split_key(presented: str) -> tuple[str, str] | None:
    """(key id, secret) of a key in the stored keys' format, or None."""
    match = _KEY_FORMAT.fullmatch(presented)
    return (match["id"], match["secret"]) if match else None


def is_key_id(text: str) -> bool:
    return re.fullmatch(rf"[0-9a-f]{{{KEY_ID_HEX}}}", text) is not None


def key_hash(secret: str) -> str:
    """What the table keeps of a key's secret.

    HMAC-SHA256, not a password hash (argon2, scrypt): those are slow on purpose, to make guessing a
    low-entropy password from a stolen hash expensive. A key's secret is 256 random bits — no guess
    ever lands, slow or fast — so a slow hash would only cost every request its CPU time. This is how
    high-entropy tokens are commonly stored; the id in the key finds the row without scanning.
    """
    return hmac.new(_HASH_KEY, secret.encode(), hashlib.sha256).hexdigest()


def hash_matches(stored_hash: str | None, secret: str) -> bool:
    """Whether `secret` is the one stored, in constant time; a missing row costs the same work."""
    computed = key_hash(secret)
    return hmac.compare_digest(stored_hash or "0" * len(computed), computed) and stored_hash is not None


def revocable_key_id(env_keys: dict[str, str], presented: str) -> str | None:
    """The id of the stored key `presented` is (what revoking ends); None for a key of
    DOCSUM_API_KEYS, which holds while the gateway runs."""
    if owner_for(env_keys, presented) is not None:
        return None
    parts = split_key(presented)
    return parts[0] if parts else None


def bearer_token(authorization: str | None) -> str | None:
    """The credentials of an `Authorization: Bearer <token>` header; the scheme in any case (RFC 9110)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


# --------------------------------------------------------------------------------------------------
# WebSocket tickets


def ticket_secret(configured: str | None, keys: dict[str, str], admin_key: str | None = None) -> bytes:
    """The configured secret, or one derived from all the API keys and the admin key (the same on
    every replica; `settings.check` makes sure there is something secret to derive it from)."""
    if configured:
        return hashlib.sha256(b"docsum-ws-ticket\0" + configured.encode()).digest()
    material = "\0".join(f"{owner}={key}" for key, owner in sorted(keys.items()))
    if admin_key:
        material += "\0admin=" + admin_key
    return hmac.new(material.encode(), b"docsum-ws-ticket", hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class TicketClaim:
    """What a genuine ticket says: whose it is, the stored key it was issued with, its nonce and expiry."""

    owner: str
    key_id: str | None
    nonce: str
    expires: int  # seconds since the epoch


@dataclass
class Tickets:
    """Issues and checks WebSocket tickets: `wst1.<payload>.<signature>`, URL- and subprotocol-safe."""

    secret: bytes
    ttl_s: float
    # nonce -> expiry: what this replica has seen, refused without asking the database (which decides
    # for every replica: keystore.use_ticket).
    _used: dict[str, float] = field(default_factory=dict)

    def issue(self, owner: str, task_id: str, now: float | None = None, key_id: str | None = None) -> str:
        expires = int((now if now is not None else time.time()) + self.ttl_s)
        payload = "\n".join((task_id, owner, str(expires), secrets.token_urlsafe(12), key_id or "")).encode()
        body = f"{TICKET_PREFIX}.{_b64(payload)}"
        return f"{body}.{_b64(self._sign(body))}"

    def redeem(self, ticket: str, task_id: str, now: float | None = None) -> str | None:
        """The owner the ticket was issued to, if it is genuine, for `task_id`, unexpired and unused here."""
        claim = self.claim(ticket, task_id, now)
        return claim.owner if claim is not None else None

    def claim(self, ticket: str, task_id: str, now: float | None = None) -> TicketClaim | None:
        """What the ticket says, if it is genuine, for `task_id`, unexpired and not seen by this replica."""
        now = now if now is not None else time.time()
        prefix, _, rest = ticket.partition(".")
        encoded, _, signature = rest.partition(".")
        if prefix != TICKET_PREFIX or not encoded or not signature:
            return None
        try:
            genuine = hmac.compare_digest(_unb64(signature), self._sign(f"{prefix}.{encoded}"))
            fields = _unb64(encoded).decode().split("\n") if genuine else []
        except (ValueError, UnicodeDecodeError):
            return None
        if len(fields) != 5 or not (fields[2].isascii() and fields[2].isdigit()):
            return None
        ticket_task, owner, expires, nonce, key_id = fields[0], fields[1], int(fields[2]), fields[3], fields[4]
        if ticket_task != task_id or expires < now or nonce in self._used:
            return None
        self._forget_expired(now)
        self._used[nonce] = expires
        return TicketClaim(owner, key_id or None, nonce, expires)

    def _sign(self, body: str) -> bytes:
        return hmac.new(self.secret, body.encode(), hashlib.sha256).digest()

    def _forget_expired(self, now: float) -> None:
        if len(self._used) > 1000:
            self._used = {n: e for n, e in self._used.items() if e >= now}
