"""The gateway's log: one line per record, credentials never in it.

A WebSocket client that cannot send headers may put its key in the URL (`?token=`), and uvicorn logs
every request's path with its query string (the access log, and "WebSocket ..." lines). `Redact`
rewrites every record before it is written: the values of query parameters that carry credentials,
`Bearer` credentials, and the configured API keys wherever they appear — in text and in JSON lines alike
(DOCSUM_LOG_FORMAT, docsum_shared.logs). A line naming a task's URL (uvicorn's access log, say) carries
that task's id (`TaskInPath`).
"""

from __future__ import annotations

import logging
import re
from urllib.parse import quote, quote_plus

from docsum_shared import logs
from docsum_shared.logs import LogFormat

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


class TaskInPath(logging.Filter):
    """Gives a record that names a task's URL (/v1/tasks/<id>...) that task's id, if it has none."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "task_id", None) is None and (found := _TASK_PATH.search(record.getMessage())):
            record.task_id = found.group(1)
        return True


_TASK_PATH = re.compile(r"/v1/tasks/([0-9a-fA-F-]{36})\b")


def configure(secrets: list[str] | None = None, level: int = logging.INFO, log_format: LogFormat = "text") -> Redact:
    """Root logging to stderr through `Redact`, also set on uvicorn's own loggers."""
    redact = Redact(secrets)
    logs.configure("gateway", log_format, filters=[redact, TaskInPath()], level=level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).addFilter(redact)
    return redact
