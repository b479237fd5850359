"""Where a URL another system or an owner names may lead, and one request to it: the rules every outbound
HTTP request of docsum obeys, the parser's downloads (an intake's source_uri) and the gateway's webhook
deliveries alike. Only the owner's allowed hosts and ports (OwnerAccess: DOCSUM_INTAKE_OWNERS, else the
global lists), only public addresses unless one is listed, the connection pinned to the address checked.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import Literal
from urllib.parse import SplitResult, urlsplit

import httpx2

from .errors import ItemFailed
from .intake_access import OwnerAccess
from .uris import CONTROL

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class HttpSource:
    url: str
    scheme: Literal["http", "https"]
    host: str  # lowercased; an IPv6 address without brackets
    port: int


# Longer than any URL a client takes (httpx's own limit), in a source_uri or a redirect's Location.
MAX_URI = 65_536


def uri_error(uri: str, what: str = "source_uri") -> str | None:
    """Why `uri` cannot even be requested (None: it can): a control character or space, or a length no
    client takes."""
    if len(uri) > MAX_URI:
        return f"{what} is longer than {MAX_URI:,} characters"
    if (bad := CONTROL.search(uri)) is not None:
        return f"{what} contains the control character or space {bad.group()!r}: percent-encode it"
    return None


def split_uri(uri: str, what: str = "source_uri") -> tuple[SplitResult, int | None]:
    """`uri`'s parts and port (None: the scheme's), once it can be requested at all (uri_error) and its
    port is a number; ItemFailed naming `what` otherwise."""
    if (problem := uri_error(uri, what)) is not None:
        raise ItemFailed(problem)
    try:
        parts = urlsplit(uri)
        return parts, parts.port
    except ValueError as exc:
        raise ItemFailed(f"{what} is not a valid URI ({exc})") from None


def host_error(host: str) -> str | None:
    """Why `host` is no name DNS can be asked for (None: it is): e.g. an empty label ("a..example.com")."""
    if _address(host) is not None:
        return None
    try:
        host.encode("idna")
    except UnicodeError as exc:
        return f"host {host[:100]} is not a valid host name ({exc})"
    return None


def _listed_address(entry: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(entry.strip("[]"), strict=False)
    except ValueError:
        return None


def host_allowed(host: str, listed: list[str]) -> bool:
    """The host is listed: by name or address, by a network (10.0.0.0/8) for an address, by "*.domain"
    for the domain's subdomains, or by "*" for any host."""
    for entry in (e.strip().lower() for e in listed):
        if entry in (host, "*") or (entry.startswith("*.") and host.endswith(entry[1:])):
            return True
        network = _listed_address(entry)
        if network is not None and (address := _address(host)) is not None and address in network:
            return True
    return False


def _address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: the IPv4 address in the last 32 bits
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215: a site's own translator, never public
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # ::a.b.c.d (deprecated, still routed by some stacks)

# Ranges Python's is_global calls global (3.11 to 3.13) that no public server is reached at: each is
# refused like a private address, with its reason.
NOT_PUBLIC: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (ipaddress.IPv6Network("fec0::/10"), "site-local (fec0::/10, deprecated by RFC 3879, still routed in some sites)"),
    (ipaddress.IPv6Network("5f00::/16"), "segment-routing (SRv6 SID, 5f00::/16, RFC 9602: one operator's network)"),
    (ipaddress.IPv6Network("3fff::/20"), "documentation (3fff::/20, RFC 9637)"),
)


def not_public(address: Address) -> str | None:
    """What `address` is when it is in a range of NOT_PUBLIC (None: in none of them)."""
    if isinstance(address, ipaddress.IPv6Address):
        for network, kind in NOT_PUBLIC:
            if address in network:
                return kind
    return None


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address leads to, when it carries one: IPv4-mapped (::ffff:a.b.c.d),
    6to4 (2002::/16), NAT64 (64:ff9b::/96) or IPv4-compatible (::a.b.c.d). Python calls most of these
    global whatever they carry: a translator or tunnel would take 64:ff9b::7f00:1 to 127.0.0.1."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):  # not :: nor ::1
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_error(
    host: str, address: Address, listed: list[str], setting: str = "DOCSUM_INTAKE_HTTP_HOSTS"
) -> str | None:
    """Why `host` may not be reached at `address` (None: it may). Only a public address is reached
    unless this very address (or a network holding it), or the host by its exact name, is listed: a
    name allowed by a wildcard never leads to a loopback, link-local, private or NOT_PUBLIC address. An IPv6
    address that carries an IPv4 one is judged by the IPv4 address."""
    given = address
    if isinstance(address, ipaddress.IPv6Address) and (inner := embedded_ipv4(address)) is not None:
        address = inner  # ::ffff:127.0.0.1, 64:ff9b::7f00:1, 2002:7f00:1:: are 127.0.0.1
    public = not (isinstance(address, ipaddress.IPv6Address) and address in _NAT64_LOCAL)
    listed_kind = not_public(address)
    if public and listed_kind is None and address.is_global and not address.is_multicast:
        return None
    for entry in (e.strip().lower() for e in listed):
        network = _listed_address(entry)
        if entry == host and network is None:
            return None  # the host itself, by name
        if network is not None and (address in network or given in network):
            return None
    kind = listed_kind or (
        "loopback"
        if address.is_loopback
        else "link-local"
        if address.is_link_local
        else "private"
        if address.is_private
        else "non-public"
    )
    via = f" (by {given})" if given != address else ""
    return (
        f"host {host} resolves to {address}{via}, a {kind} address: list that address (or the host by its"
        f" exact name) in {setting} to allow it"
    )


def http_source(uri: str, host: str, scheme: str, port: int | None, access: OwnerAccess) -> HttpSource:
    """The http(s):// `uri` (split into `host`, `scheme` and `port`: None for the scheme's), if the owner's
    access allows its host and port; ItemFailed with the setting to change otherwise."""
    host = host.lower()
    if not host:
        raise ItemFailed("an http(s):// URI needs a host")
    if (problem := host_error(host)) is not None:
        raise ItemFailed(problem)
    if not host_allowed(host, access.http_hosts):
        raise ItemFailed(f"host {host} is not allowed: list it in {access.setting('http_hosts')}")
    secure = scheme == "https"
    port = port or (443 if secure else 80)
    if port not in access.http_ports:
        raise ItemFailed(f"port {port} is not allowed: list it in {access.setting('http_ports')}")
    return HttpSource(uri, "https" if secure else "http", host, port)


def parse_http(uri: str, access: OwnerAccess, what: str = "url") -> HttpSource:
    """`uri` as an http(s):// place the owner's access allows; ItemFailed naming `what` otherwise."""
    parts, port = split_uri(uri, what)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ItemFailed(f"{what} must be an http:// or https:// URL, not {scheme or '(no scheme)'!r}")
    return http_source(uri, parts.hostname or "", scheme, port, access)


async def resolve(source: HttpSource, access: OwnerAccess) -> Address:
    """The address to connect to: every address the host resolves to must be allowed (a name with one
    private address among public ones is refused), and the connection goes to the one checked."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(source.host, source.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:  # UnicodeError: a name IDNA cannot encode
        raise ItemFailed(f"host {source.host} cannot be resolved ({exc})") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    if not addresses:
        raise ItemFailed(f"host {source.host} has no address")
    for address in addresses:
        problem = address_error(source.host, address, access.http_hosts, access.setting("http_hosts"))
        if problem is not None:
            raise ItemFailed(problem)
    return addresses[0]


async def pinned_request(
    client: httpx2.AsyncClient,
    method: str,
    source: HttpSource,
    url: str,
    access: OwnerAccess,
    *,
    headers: dict[str, str] | None = None,
    content: bytes | None = None,
) -> httpx2.Request:
    """A request for `url` (on `source`'s origin) to the address just checked, with the host's name in the
    Host header and TLS's SNI: a name that resolves elsewhere by the time of the connection changes nothing."""
    address = await resolve(source, access)
    pinned = httpx2.URL(url).copy_with(host=str(address))
    host = f"[{source.host}]" if ":" in source.host else source.host
    default_port = 443 if source.scheme == "https" else 80
    sent = {"Host": host if source.port == default_port else f"{host}:{source.port}", **(headers or {})}
    return client.build_request(method, pinned, headers=sent, content=content, extensions={"sni_hostname": source.host})
