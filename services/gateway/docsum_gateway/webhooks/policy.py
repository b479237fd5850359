"""The webhooks' decisions, no IO: secrets, when a failed delivery is tried again, and what an attempt's
answer means."""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

# 24 random bytes: Standard Webhooks asks for between 24 and 64.
SECRET_BYTES = 24
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """An endpoint's signing secret in the Standard Webhooks form: "whsec_" and the key in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


@dataclass(frozen=True)
class Backoff:
    """A failed delivery waits `first_s`, then twice as long each time up to `max_s`; none is tried again
    `retry_for_s` after its event."""

    first_s: float
    max_s: float
    retry_for_s: float

    def delay_s(self, attempts: int) -> float:
        """The wait after the `attempts`-th failed attempt (1 is the first)."""
        return min(self.first_s * 2 ** min(attempts - 1, 62), self.max_s)

    def next_attempt(self, created_at: datetime, now: datetime, attempts: int) -> datetime | None:
        """When to try again after `attempts` failed ones (None: given up, past `retry_for_s`)."""
        due = now + timedelta(seconds=self.delay_s(attempts))
        return due if due <= created_at + timedelta(seconds=self.retry_for_s) else None


@dataclass(frozen=True)
class Outcome:
    """One attempt: the endpoint's HTTP status (None: no answer) and why it failed (None: delivered)."""

    status: int | None
    error: str | None

    @property
    def delivered(self) -> bool:
        return self.error is None


def answered(status: int, location: str | None) -> Outcome:
    """What the endpoint's answer means: any 2xx is delivered; a redirect is not followed (the request
    would go to a place nobody checked); anything else is tried again."""
    if 200 <= status < 300:
        return Outcome(status, None)
    if 300 <= status < 400:
        return Outcome(status, f"answered {status}, a redirect ({location or 'no Location'}): redirects are not"
                               " followed, register the final URL")  # fmt: skip
    return Outcome(status, f"answered {status}")
