"""Whose tasks and endpoints a gateway's caller reaches: an owner's, in the gateway's deployment.

Several deployments (each its own DOCSUM_TOPIC_PREFIX) may share one database, and the same owner name
may have keys in more than one: a task or webhook endpoint of another deployment is none at all for
this one, exactly as another owner's is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scope:
    """Whose rows: an owner's, in this gateway's deployment (its topic prefix)."""

    deployment: str
    owner: str
