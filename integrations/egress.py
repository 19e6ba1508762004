"""Where an outbound request a user configured may go: the public internet,
and only the networks an operator lists besides (AGENTDESK_EGRESS_ALLOW).

A target is refused when any address its host resolves to is loopback,
private, link-local, unique-local, multicast, unspecified, reserved or
otherwise not global, in whatever notation the URL writes it: the
resolver reads `2130706433`, `0x7f.1`, `127.1` and `[::ffff:127.0.0.1]`
as the addresses they are, and addresses that carry an IPv4 address inside
(mapped, 6to4, Teredo) are judged by that address too. Credentials in a URL
are refused (they would be stored in clear and shown in the desk).

`resolve` is called at delivery time, and the request is sent to the
address it checked (`post`): the host is not resolved a second time, so a
name that answers a public address to the check and a private one to the
connection (DNS rebinding) reaches nothing. Redirects are not followed.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

import urllib3
from django.conf import settings

from agents.errors import Invalid

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(Invalid):
    """The target may not be reached (its message says why)."""


@dataclass(frozen=True)
class Target:
    url: SplitResult
    host: str  # as written in the URL (the Host header, the TLS name)
    port: int
    address: str  # the checked address the connection goes to


def parse(url: str) -> SplitResult:
    """The URL's parts, when it is an http(s) URL without credentials."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise Refused("the URL is not a valid address") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > 2000:
        raise Refused("the URL must be an http(s) address")
    if "@" in parts.netloc:
        raise Refused("the URL may not carry credentials (user:password@)")
    if port == 0:
        raise Refused("the URL's port must be 1 to 65535")
    return parts


def resolve(url: str) -> Target:
    """The target of `url`, with the one address to connect to, or Refused."""
    parts = parse(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise Refused(f"{parts.hostname} does not resolve") from None
    addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    for address in addresses:
        why = forbidden(address)
        if why:
            raise Refused(f"{parts.hostname} resolves to {address}, {why}")
    return Target(parts, parts.hostname, port, str(addresses[0]))


def forbidden(address: Address) -> str:
    """Why the address may not be reached, or "" when it may."""
    if any(address in network for network in allowed_networks()):
        return ""
    for inner in _embedded(address):
        if inner != address:
            why = forbidden(inner)
            if why:
                return why
    for flag, why in (
        ("is_unspecified", "an unspecified address"),
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address"),
        ("is_multicast", "a multicast address"),
        ("is_private", "a private address"),
        ("is_reserved", "a reserved address"),
        ("is_site_local", "a site-local address"),
    ):
        if getattr(address, flag, False):
            return f"{why} (not allowed by AGENTDESK_EGRESS_ALLOW)"
    if not address.is_global:
        return "not a public address (not allowed by AGENTDESK_EGRESS_ALLOW)"
    return ""


def _embedded(address: Address) -> list[Address]:
    if isinstance(address, ipaddress.IPv4Address):
        return []
    inner = [address.ipv4_mapped, address.sixtofour]
    if address.teredo:
        inner.extend(address.teredo)
    # IPv4-compatible (::a.b.c.d, deprecated) and NAT64 (64:ff9b::a.b.c.d).
    if int(address) >> 32 == 0 or address in ipaddress.ip_network("64:ff9b::/96"):
        inner.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [a for a in inner if a is not None]


def allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(n, strict=False) for n in settings.AGENTDESK_EGRESS_ALLOW]


def post(target: Target, body: bytes, headers: dict[str, str], timeout: float) -> int:
    """POST to the checked address (no second resolution), with the URL's
    host as Host and TLS name; no redirects, no retries. The status code:
    the reply's body is not read (nothing of it is kept)."""
    kwargs = {"timeout": urllib3.Timeout(total=timeout), "retries": False, "maxsize": 1}
    if target.url.scheme == "https":
        pool: urllib3.HTTPConnectionPool = urllib3.HTTPSConnectionPool(
            target.address,
            target.port,
            server_hostname=target.host,
            assert_hostname=target.host,
            **kwargs,
        )
    else:
        pool = urllib3.HTTPConnectionPool(target.address, target.port, **kwargs)
    path = target.url.path or "/"
    if target.url.query:
        path += "?" + target.url.query
    default = target.port == (443 if target.url.scheme == "https" else 80)
    host = f"[{target.host}]" if ":" in target.host else target.host
    try:
        response = pool.urlopen(
            "POST",
            path,
            body=body,
            headers={**headers, "Host": host if default else f"{host}:{target.port}"},
            redirect=False,
            preload_content=False,
            assert_same_host=False,
        )
        response.close()
        return response.status
    finally:
        pool.close()
