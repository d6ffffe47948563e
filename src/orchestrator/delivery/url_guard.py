"""SSRF guard for caller-supplied callback URLs.

Owns the decision "may the orchestrator POST to this URL?" in two stages:

* ``check_callback_url`` - a purely syntactic check run when a request is accepted (so a bad
  URL is a 400, not a failed delivery a day later) and again before every send. It returns
  one canonical spelling of the URL, so what was checked is exactly what is sent.
* ``resolve_and_check`` - resolves the host at send time and refuses if *any* resolved
  address is not public, which defeats a name that was public when submitted and later
  re-pointed at an internal address (DNS rebinding).

Trade-off: everything except the resolver call is pure, table-driven and free of I/O, so the
security-critical part can be audited and tested on its own. The price is a residual
time-of-check/time-of-use gap: the HTTP client resolves the name again when it connects, and
a hostile DNS server with a zero TTL can answer differently the second time. Closing that
gap needs the connection pinned to the checked address (or an egress proxy such as
smokescreen); see ``sender.py``.

The guard is deliberately strict: it rejects non-canonical IP notations outright (decimal,
hex, octal, short forms) instead of trying to agree with every parser on what they mean, and
it rejects single-label hosts, which a resolver would expand with its search domains.
Rejection reasons are fixed strings and never contain the URL, so they can be shown in a 400
response and logged without leaking credentials or tokens in query strings.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Final
from urllib.parse import urlsplit

import idna

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Resolver signature: ``(host, port) -> IP address strings``. Tests inject a fake one.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

MAX_URL_LENGTH: Final = 2048

#: Hosts allowed (over http too) only when local development is explicitly enabled.
LOCALHOST_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})

_DEFAULT_PORTS: Final = {"https": 443, "http": 80}


class UnsafeCallbackUrl(ValueError):
    """A callback URL the orchestrator refuses to call.

    ``reason`` is a fixed, human-readable phrase that never contains the URL itself, so it
    is safe to return in a 400 response and to log.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _nets(*cidrs: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# Our own list rather than only ``ipaddress.is_global``: the stdlib's tables change between
# patch releases (and call multicast "global"), and an auditor should see the ranges here.
# Sources: IANA IPv4/IPv6 Special-Purpose Address Registries, RFC 6598, RFC 9637.
_BLOCKED_V4: Final = _nets(
    "0.0.0.0/8",  # "this network"; 0.0.0.0 reaches the local host on Linux
    "10.0.0.0/8",  # private
    "100.64.0.0/10",  # shared address space (CGNAT); includes Alibaba's metadata address
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local; AWS/GCP/Azure/OpenStack metadata at 169.254.169.254
    "172.16.0.0/12",  # private
    "192.0.0.0/24",  # IETF protocol assignments; Oracle metadata at 192.0.0.192
    "192.0.2.0/24",  # documentation (TEST-NET-1)
    "192.88.99.0/24",  # deprecated 6to4 relay anycast
    "192.168.0.0/16",  # private
    "198.18.0.0/15",  # benchmarking
    "198.51.100.0/24",  # documentation (TEST-NET-2)
    "203.0.113.0/24",  # documentation (TEST-NET-3)
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, including broadcast 255.255.255.255
)

# Public-looking addresses that are nevertheless cloud platform endpoints.
_BLOCKED_V4_HOSTS: Final = frozenset({ipaddress.IPv4Address("168.63.129.16")})  # Azure WireServer

# Only global unicast (2000::/3) is ever allowed; these are carved out of it.
_V6_GLOBAL_UNICAST: Final = ipaddress.IPv6Network("2000::/3")
_BLOCKED_V6: Final = _nets(
    "2001::/23",  # IETF protocol assignments, including Teredo (2001::/32)
    "2001:db8::/32",  # documentation
    "3fff::/20",  # documentation (RFC 9637)
)
# Ranges that embed an IPv4 address: judged by the embedded address.
_V6_MAPPED: Final = ipaddress.IPv6Network("::ffff:0:0/96")
_V6_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
_V6_6TO4: Final = ipaddress.IPv6Network("2002::/16")

#: Names that are never public: RFC 6761/6762/8375 special-use names, ICANN's ``.internal``,
#: and cloud metadata names that are not already under one of these.
_BLOCKED_SUFFIXES: Final = (
    "localhost",
    "local",
    "internal",
    "localdomain",
    "arpa",
    "onion",
    "test",
    "invalid",
    "alt",
)
_BLOCKED_NAMES: Final = frozenset({"metadata.goog", "metadata.google.internal"})

_LABEL_RE: Final = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
# A last label that is all digits or hex-ish is read as a number by WHATWG URL parsers and
# can never be a real TLD, so such hosts are IP-address games, not names.
_NUMERIC_LABEL_RE: Final = re.compile(r"^(?:\d+|0x[0-9a-f]*)$")
_PORT_RE: Final = re.compile(r"^[0-9]{1,5}$")
# Whitespace, C0 controls, DEL and backslash: parsers disagree about them (WHATWG strips
# tabs/newlines and reads "\" as "/"), so a URL containing them is refused, not repaired.
_FORBIDDEN_CHARS_RE: Final = re.compile(r"[\x00-\x20\x7f\\]")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip in _V6_MAPPED or ip in _V6_NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _V6_6TO4:
        return ip.sixtofour
    return None


def is_public_address(ip: IPAddress) -> bool:
    """Whether ``ip`` is a globally routable unicast address we may send callbacks to.

    Denies private, loopback, link-local, unspecified, multicast, reserved, shared (CGNAT),
    benchmarking and documentation ranges, unique-local and site-local IPv6, scoped IPv6,
    cloud metadata addresses, and IPv6 forms (IPv4-mapped, NAT64, 6to4) that embed any of
    the IPv4 ones. Both our explicit tables and the stdlib's view must agree it is public.
    """
    if isinstance(ip, ipaddress.IPv4Address):
        if ip in _BLOCKED_V4_HOSTS or any(ip in net for net in _BLOCKED_V4):
            return False
        return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_link_local)
    if ip.scope_id is not None:  # a zone id only makes sense for on-link addresses
        return False
    embedded = _embedded_ipv4(ip)
    if embedded is not None:
        return is_public_address(embedded)
    if ip not in _V6_GLOBAL_UNICAST or any(ip in net for net in _BLOCKED_V6):
        return False
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_site_local)


def parse_loose_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """Read ``host`` the way ``inet_aton`` (and so ``getaddrinfo``) would, or return None.

    Accepts 1-4 dot-separated parts in decimal, octal (leading 0) or hex (0x), where the last
    part fills the remaining bytes: "2130706433", "0x7f000001", "0177.0.0.1", "127.1".
    Used only to recognise (and refuse) such spellings; we never connect to them.
    """
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values: list[int] = []
    for part in parts:
        if re.fullmatch(r"0[xX][0-9a-fA-F]*", part):
            values.append(int(part[2:] or "0", 16))
        elif re.fullmatch(r"0[0-7]*", part):
            values.append(int(part, 8))
        elif re.fullmatch(r"[1-9][0-9]*", part):
            values.append(int(part))
        else:
            return None
    *head, last = values
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    number = last
    for i, v in enumerate(head):
        number |= v << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def _normalise_host(raw: str) -> str:
    """Lower-case, IDNA-encode and strip one trailing dot; reject percent-encoding."""
    if "%" in raw:
        # Percent-encoded hosts and IPv6 zone ids ("fe80::1%25eth0"): no legitimate
        # callback needs either, and decoders disagree about them.
        raise UnsafeCallbackUrl("host must not contain percent-encoding or a zone id")
    if not raw.isascii():
        try:
            # UTS #46 mapping folds full-width letters and digits and the ideographic full
            # stop (U+3002) to ASCII, so a full-width "127.0.0.1" becomes the ASCII
            # address and is refused below like any other spelling of it.
            raw = idna.encode(raw, uts46=True).decode("ascii")
        except idna.IDNAError as exc:
            raise UnsafeCallbackUrl("host is not a valid internationalised domain name") from exc
    host = raw.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise UnsafeCallbackUrl("URL has no host")
    return host


def _check_ip_host(ip: IPAddress, *, allow_localhost: bool) -> None:
    if allow_localhost and str(ip) in LOCALHOST_HOSTS:
        return
    if not is_public_address(ip):
        raise UnsafeCallbackUrl("host is a private, reserved or otherwise non-public address")


def _check_name_host(host: str, *, allow_localhost: bool) -> IPAddress | None:
    """Check a host that is not bracketed; return its address if it is an IPv4 literal."""
    try:
        # Strict parse: canonical dotted-decimal only (no leading zeros since Python 3.9.5).
        v4 = ipaddress.IPv4Address(host)
    except ValueError:
        v4 = None
    if v4 is not None:
        _check_ip_host(v4, allow_localhost=allow_localhost)
        return v4
    loose = parse_loose_ipv4(host)
    if loose is not None:
        if not is_public_address(loose):
            raise UnsafeCallbackUrl("host is a private, reserved or otherwise non-public address")
        raise UnsafeCallbackUrl("IP address hosts must be written in dotted-decimal form")
    if allow_localhost and host in LOCALHOST_HOSTS:
        return None
    if len(host) > 253:
        raise UnsafeCallbackUrl("host name is too long")
    labels = host.split(".")
    if not all(_LABEL_RE.match(label) for label in labels):
        raise UnsafeCallbackUrl("host is not a valid domain name")
    if _NUMERIC_LABEL_RE.match(labels[-1]):
        raise UnsafeCallbackUrl("host looks like a malformed IP address")
    if host in _BLOCKED_NAMES or any(
        host == s or host.endswith("." + s) for s in _BLOCKED_SUFFIXES
    ):
        raise UnsafeCallbackUrl("host is a local or internal name")
    if len(labels) < 2:
        # A single label ("metadata", "intranet") is expanded with the resolver's search
        # domains and so names something on our own network.
        raise UnsafeCallbackUrl("host must be a fully qualified domain name")
    return None


def _split_netloc(netloc: str) -> tuple[str, bool, int | None]:
    """Split ``host[:port]`` / ``[v6][:port]`` by hand: urlsplit is lax about ports."""
    if "@" in netloc:
        raise UnsafeCallbackUrl("URL must not contain credentials (user:password@)")
    if netloc.startswith("["):
        end = netloc.find("]")
        if end == -1:
            raise UnsafeCallbackUrl("URL host is malformed")
        host, rest, bracketed = netloc[1:end], netloc[end + 1 :], True
        if rest and not rest.startswith(":"):
            raise UnsafeCallbackUrl("URL host is malformed")
        port_text = rest[1:] if rest else None
    else:
        if netloc.count(":") > 1 or "[" in netloc or "]" in netloc:
            raise UnsafeCallbackUrl("URL host is malformed")
        host, sep, port_text_raw = netloc.partition(":")
        port_text, bracketed = (port_text_raw if sep else None), False
    port: int | None = None
    if port_text is not None:
        if not _PORT_RE.match(port_text) or not 1 <= int(port_text) <= 65535:
            raise UnsafeCallbackUrl("URL port is invalid")
        port = int(port_text)
    return host, bracketed, port


def check_callback_url(url: str, *, allow_insecure_localhost: bool = False) -> str:
    """Validate a caller-supplied callback URL and return its canonical form.

    Only ``https`` is accepted; ``http`` (and the hosts localhost, 127.0.0.1 and ::1) only
    when ``allow_insecure_localhost`` is set for local development. Credentials, IP
    literals outside public unicast space in any notation, non-canonical IP notations and
    local or internal names are refused. The returned URL has a lower-case ASCII host
    without a trailing dot, no default port, at least "/" as path and no fragment.

    Raises:
        UnsafeCallbackUrl: with a ``reason`` safe to show to the caller.
    """
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeCallbackUrl(f"URL is longer than {MAX_URL_LENGTH} characters")
    if _FORBIDDEN_CHARS_RE.search(url):
        raise UnsafeCallbackUrl("URL contains whitespace, control characters or backslashes")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise UnsafeCallbackUrl("URL is malformed") from exc
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise UnsafeCallbackUrl("URL scheme must be https")
    if not parts.netloc:
        raise UnsafeCallbackUrl("URL has no host")

    raw_host, bracketed, port = _split_netloc(parts.netloc)
    host = _normalise_host(raw_host)
    address: IPAddress | None
    if bracketed:
        try:
            v6 = ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise UnsafeCallbackUrl("bracketed host is not an IPv6 address") from exc
        _check_ip_host(v6, allow_localhost=allow_insecure_localhost)
        address = v6
    else:
        address = _check_name_host(host, allow_localhost=allow_insecure_localhost)

    canonical_host = str(address) if address is not None else host
    if scheme == "http" and not (allow_insecure_localhost and canonical_host in LOCALHOST_HOSTS):
        raise UnsafeCallbackUrl("URL scheme must be https")

    netloc = f"[{canonical_host}]" if bracketed else canonical_host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    path = parts.path or "/"
    query = f"?{parts.query}" if parts.query else ""
    # The fragment is dropped: HTTP clients never send it.
    return f"{scheme}://{netloc}{path}{query}"


def url_for_log(url: str) -> str:
    """``scheme://host[:port]`` only: paths and query strings may carry tokens."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        host = f"[{host}]" if ":" in host else host
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<malformed url>"
    return f"{parts.scheme}://{host}{port}"


async def _getaddrinfo(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def resolve_and_check(
    host: str,
    port: int,
    *,
    resolver: Resolver | None = None,
    allow_insecure_localhost: bool = False,
) -> list[str]:
    """Resolve ``host`` and return its addresses if every one of them is public.

    ``host`` is the host of a URL already passed through ``check_callback_url`` (an IPv6
    literal without brackets is fine). One disallowed address rejects the whole name: an
    attacker controls which record a client picks. With ``allow_insecure_localhost`` the
    localhost hosts may resolve to loopback addresses, and only to those.

    Raises:
        UnsafeCallbackUrl: some resolved address is not allowed.
        OSError: resolution failed or returned nothing (usually transient, so retryable).
    """
    dev_local = allow_insecure_localhost and host in LOCALHOST_HOSTS
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        # No lookup for literals, but check again: callers may skip check_callback_url.
        if not (dev_local or is_public_address(literal)):
            raise UnsafeCallbackUrl("host is a private, reserved or otherwise non-public address")
        return [str(literal)]

    answers = await (resolver or _getaddrinfo)(host, port)
    if not answers:
        raise OSError("host name resolved to no addresses")
    allowed: list[str] = []
    for answer in answers:
        try:
            ip = ipaddress.ip_address(answer)
        except ValueError as exc:  # fail closed on anything we cannot classify
            raise UnsafeCallbackUrl("host resolved to an unrecognised address") from exc
        ok = ip.is_loopback if dev_local else is_public_address(ip)
        if not ok:
            raise UnsafeCallbackUrl("host resolves to a private, reserved or non-public address")
        if str(ip) not in allowed:
            allowed.append(str(ip))
    return allowed
