"""The gateway's log: one line per record, credentials never in it.

A WebSocket client that cannot send headers may put its key in the URL (`?token=`), and uvicorn logs
every request's path with its query string (the access log, and "WebSocket ..." lines). `Redact`
rewrites every record before it is written: the values of query parameters that carry credentials,
`Bearer` credentials, and the configured API keys wherever they appear.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import quote, quote_plus

REDACTED = "[redacted]"
CREDENTIAL_PARAMS = (
    "token", "access_token", "id_token", "refresh_token", "ticket", "key", "api_key", "apikey", "api-key",
    "auth", "authorization", "password", "passwd", "pwd", "secret", "client_secret", "signature", "sig",
    "session", "sessionid", "jwt", "code",
)  # fmt: skip
_QUERY = re.compile(
    r"(?P<name>(?:^|[?&;])(?:" + "|".join(re.escape(p) for p in CREDENTIAL_PARAMS) + r")=)[^&;#\s\"']*",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<name>\bbearer[ .]+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


class Redact(logging.Filter):
    """Removes credentials from a record's message (formatted once, then kept without its args)."""

    def __init__(self, secrets: list[str] | None = None) -> None:
        super().__init__()
        forms = {form for s in secrets or [] for form in (s, quote(s, safe=""), quote_plus(s))}
        self.secrets = sorted(forms, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        text = _QUERY.sub(lambda m: m.group("name") + REDACTED, text)
        return _BEARER.sub(lambda m: m.group("name") + REDACTED, text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, ()
        return True


def configure(secrets: list[str] | None = None, level: int = logging.INFO) -> Redact:
    """Root logging to stderr through `Redact`, also set on uvicorn's own loggers."""
    redact = Redact(secrets)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(redact)
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).addFilter(redact)
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    return redact
