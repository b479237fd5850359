"""URIs as messages and logs show them: without userinfo, query or fragment.

Kept apart from intake.py (and free of its imports) for the log filter, which the parse worker loads too.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

__all__ = ["CONTROL", "URI_IN_TEXT", "shown"]

# What no URI may hold unencoded: the C0 controls, space and DEL.
CONTROL = re.compile(r"[\x00-\x20\x7f]")
# A URI inside a line of text (a log record, an exception's message).
URI_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")


def shown(uri: str) -> str:
    """The URI as messages and logs show it: without userinfo, query or fragment (a presigned URL's
    signature, a password), and cut to 200 characters."""
    try:
        parts = urlsplit(uri)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "(an invalid URI)"
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    text = f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else parts.path
    text = CONTROL.sub(lambda m: f"%{ord(m.group()):02X}", text)
    return text if len(text) <= 200 else text[:197] + "..."
