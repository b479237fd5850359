"""Where an owner's documents may come from when another system publishes them (file roots, web hosts and
ports, buckets and key prefixes), and which names a producer may have. IntakeSettings reads these; the
parser's intake decides with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from .settings import IntakeSettings

# A producer's name is part of its topic (intake.<producer>): Kafka's topic characters, without the '.'
# that would let one producer's name reach into another's (intake.crm.eu under intake.crm).
PRODUCER_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,100}")


class IntakeAccess(BaseModel):
    """One owner's entry of DOCSUM_INTAKE_OWNERS: exactly these places, instead of the global lists."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    file_roots: list[str] = Field(default_factory=list)
    http_hosts: list[str] = Field(default_factory=list)
    http_ports: list[int] | None = None  # None: DOCSUM_INTAKE_HTTP_PORTS
    s3_places: list[str] = Field(default_factory=list)  # s3://bucket/prefix an s3:// URI may be under


@dataclass(frozen=True)
class OwnerAccess:
    """What one owner's URIs may lead to, and the setting a refusal names (so the owner knows what to ask
    the operator for)."""

    file_roots: list[str]
    http_hosts: list[str]
    http_ports: list[int]
    owner: str | None = None  # set: from the owner's own entry of DOCSUM_INTAKE_OWNERS
    own_ports: bool = False  # the entry lists its own ports (else the global DOCSUM_INTAKE_HTTP_PORTS)
    # The file roots DOCSUM_INTAKE_OWNERS gives to other owners: a file is read only when none of them holds
    # it more closely than one of file_roots (a global /srv does not open alice's /srv/alice to bob).
    other_roots: list[str] = field(default_factory=list)
    s3_places: list[str] = field(default_factory=list)  # s3://bucket or s3://bucket/prefix

    @classmethod
    def of(cls, owner: str | None, entry: IntakeAccess | None, settings: IntakeSettings) -> OwnerAccess:
        """`owner`'s access (None: an owner without an entry, with the global lists)."""
        others = [root for name, e in settings.intake_owners.items() if name != owner for root in e.file_roots]
        if entry is None:
            return cls(settings.intake_file_roots, settings.intake_http_hosts, settings.intake_http_ports, None,
                       other_roots=others, s3_places=settings.intake_s3_places)  # fmt: skip
        own_ports = entry.http_ports is not None
        ports = entry.http_ports if entry.http_ports is not None else settings.intake_http_ports
        return cls(entry.file_roots, entry.http_hosts, ports, owner, own_ports, others, entry.s3_places)

    def setting(self, field: str) -> str:
        """The setting that lists `field` ("file_roots", "http_hosts", "http_ports", "s3_places") for this
        owner."""
        if self.owner is None or (field == "http_ports" and not self.own_ports):
            return f"DOCSUM_INTAKE_{field.upper()}"
        return f"DOCSUM_INTAKE_OWNERS ({self.owner}: {field})"
