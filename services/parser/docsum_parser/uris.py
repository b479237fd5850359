"""URIs as messages and logs show them (docsum_shared.uris: the gateway's webhooks show them alike)."""

from __future__ import annotations

from docsum_shared.uris import CONTROL, URI_IN_TEXT, shown

__all__ = ["CONTROL", "URI_IN_TEXT", "shown"]
