"""SSRF guard: address classification, URL checks in many notations, DNS-rebinding defence."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

import pytest

from orchestrator.delivery.url_guard import (
    MAX_URL_LENGTH,
    UnsafeCallbackUrl,
    check_callback_url,
    is_public_address,
    parse_loose_ipv4,
    resolve_and_check,
    url_for_log,
)

# --- is_public_address -------------------------------------------------------------------

NON_PUBLIC = [
    # IPv4
    "0.0.0.0",
    "0.1.2.3",
    "10.0.0.1",
    "10.255.255.255",
    "100.64.0.1",  # shared / CGNAT
    "100.100.100.200",  # Alibaba metadata
    "100.127.255.255",
    "127.0.0.1",
    "127.255.255.254",
    "169.254.0.1",
    "169.254.169.254",  # AWS/GCP/Azure metadata
    "169.254.170.2",  # ECS task metadata
    "172.16.0.1",
    "172.31.255.255",
    "192.0.0.9",  # stdlib calls it global; the IETF block is still not a callback target
    "192.0.0.192",  # Oracle metadata
    "192.0.2.10",
    "192.88.99.1",
    "192.168.1.1",
    "198.18.0.1",
    "198.19.255.255",
    "198.51.100.7",
    "203.0.113.9",
    "224.0.0.1",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "168.63.129.16",  # Azure WireServer
    # IPv6
    "::",
    "::1",
    "::ffff:127.0.0.1",  # IPv4-mapped loopback
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.1",
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b:1::1",  # local-use NAT64
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "::127.0.0.1",  # deprecated IPv4-compatible
    "::8.8.8.8",
    "fc00::1",
    "fd00::1",
    "fd00:ec2::254",  # AWS IMDS IPv6
    "fe80::1",
    "fe80::1%eth0",
    "fec0::1",  # site-local
    "ff02::1",
    "ff0e::1",
    "100::1",  # discard
    "2001:db8::1",  # documentation
    "3fff::1",  # documentation (RFC 9637)
    "2001::1",  # Teredo
    "2001:10::1",  # ORCHID
    "4000::1",  # outside global unicast
]

PUBLIC = [
    "1.1.1.1",
    "8.8.8.8",
    "93.184.215.14",
    "100.63.255.255",  # just below the CGNAT block
    "100.128.0.0",  # just above it
    "172.15.255.255",
    "172.32.0.0",
    "192.0.3.1",
    "198.17.255.255",
    "198.20.0.0",
    "223.255.255.254",
    "2606:4700:4700::1111",
    "2a00:1450:4001:81c::200e",
    "::ffff:8.8.8.8",  # mapped public: connects to a public IPv4 address
    "64:ff9b::808:808",  # NAT64 of 8.8.8.8
    "2002:808:808::1",  # 6to4 of 8.8.8.8
]


@pytest.mark.parametrize("address", NON_PUBLIC)
def test_non_public_addresses(address: str) -> None:
    assert is_public_address(ipaddress.ip_address(address)) is False


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses(address: str) -> None:
    assert is_public_address(ipaddress.ip_address(address)) is True


@pytest.mark.parametrize(
    ("notation", "expected"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0X7F000001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("169.254.43518", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),
        ("0127.0.0.1", "87.0.0.1"),  # inet_aton reads a leading zero as octal
        ("1.2.3.4", "1.2.3.4"),
    ],
)
def test_parse_loose_ipv4_matches_inet_aton(notation: str, expected: str) -> None:
    assert parse_loose_ipv4(notation) == ipaddress.IPv4Address(expected)
    assert socket.inet_aton(notation) == ipaddress.IPv4Address(expected).packed


@pytest.mark.parametrize("text", ["example.com", "1.2.3.4.5", "256.0.0.1", "1.2.3.09", "", "1..2"])
def test_parse_loose_ipv4_rejects_non_numbers(text: str) -> None:
    assert parse_loose_ipv4(text) is None


# --- check_callback_url --------------------------------------------------------------------

REJECTED = [
    # scheme
    "http://example.com/hook",
    "ftp://example.com/hook",
    "file:///etc/passwd",
    "gopher://example.com/",
    "javascript:alert(1)",
    "example.com/hook",
    "//example.com/hook",
    # host missing / malformed
    "https:///hook",
    "https://:443/hook",
    "https://example.com:0/",
    "https://example.com:65536/",
    "https://example.com:+443/",
    "https://example.com:44a/",
    "https://example..com/",
    "https://-example.com/",
    "https://exa mple.com/",
    "https://example.com\\@127.0.0.1/",
    "https://example.com\t/",
    "https://exam\nple.com/",
    "https://[::1/",
    "https://[v1.x]/",
    "https://[127.0.0.1]/",
    "https://a:b:c/",
    # credentials
    "https://user:pass@example.com/",
    "https://user@example.com/",
    "https://example.com@127.0.0.1/",
    # loopback / private literals in many notations
    "https://127.0.0.1/",
    "https://127.0.0.1./",
    "https://127.1/",
    "https://127.0.1/",
    "https://2130706433/",
    "https://0x7f000001/",
    "https://0X7F000001/",
    "https://0177.0.0.1/",
    "https://0177.0000.0000.0001/",
    "https://0x7f.0.0.1/",
    "https://0/",
    "https://0.0.0.0/",
    "https://10.0.0.1/",
    "https://192.168.0.1:8443/",
    "https://172.16.5.4/",
    "https://100.64.0.1/",
    "https://198.18.0.1/",
    "https://203.0.113.1/",
    "https://224.0.0.1/",
    "https://255.255.255.255/",
    "https://169.254.169.254/latest/meta-data/",
    "https://169.254.43518/",
    "https://2852039166/",
    "https://0xa9fea9fe/",
    "https://[::1]/",
    "https://[0:0:0:0:0:0:0:1]/",
    "https://[::]/",
    "https://[::ffff:127.0.0.1]/",
    "https://[::ffff:7f00:1]/",
    "https://[::FFFF:A9FE:A9FE]/",
    "https://[64:ff9b::a9fe:a9fe]/",
    "https://[2002:a9fe:a9fe::]/",
    "https://[fd00:ec2::254]/",
    "https://[fe80::1%25eth0]/",
    "https://[fe80::1]/",
    "https://[fc00::1]:8443/",
    "https://[fec0::1]/",
    "https://[ff02::1]/",
    "https://[2001:db8::1]/",
    # public-looking but non-canonical notation, and numeric last labels
    "https://134744072/",  # 8.8.8.8 as an integer
    "https://0x08080808/",
    "https://8.8.2056/",
    "https://010.8.8.8/",
    "https://example.123/",
    "https://example.0x1f/",
    "https://1.2.3.4.5/",
    # percent-encoding and IDNA tricks
    "https://%31%32%37.0.0.1/",
    "https://127.0.0.%31/",
    "https://exa%6Dple.com/",
    "https://\uff11\uff12\uff17.\uff10.\uff10.\uff11/",  # full-width 127.0.0.1
    "https://127\u30020\u30020\u30021/",  # ideographic full stops
    "https://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/",  # full-width localhost
    "https://xn--/",
    # local / internal names
    "https://localhost/",
    "https://LOCALHOST/",
    "https://localhost./",
    "https://api.localhost/",
    "https://printer.local/",
    "https://db.internal/",
    "https://metadata.google.internal/computeMetadata/v1/",
    "https://METADATA.GOOGLE.INTERNAL./",
    "https://instance-data.ec2.internal/",
    "https://metadata.goog/",
    "https://router.home.arpa/",
    "https://1.0.0.127.in-addr.arpa/",
    "https://host.localdomain/",
    "https://foo.test/",
    "https://x.onion/",
    "https://metadata/",
    "https://intranet/",
    # length
    "https://example.com/" + "a" * MAX_URL_LENGTH,
]


@pytest.mark.parametrize("url", REJECTED)
def test_rejected_urls(url: str) -> None:
    with pytest.raises(UnsafeCallbackUrl) as info:
        check_callback_url(url)
    assert info.value.reason
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("url", "normalised"),
    [
        ("https://example.com/hook", "https://example.com/hook"),
        ("https://example.com", "https://example.com/"),
        ("HTTPS://Example.COM/Hook?A=1", "https://example.com/Hook?A=1"),
        ("https://example.com./hook", "https://example.com/hook"),
        ("https://example.com:443/hook", "https://example.com/hook"),
        ("https://example.com:8443/hook", "https://example.com:8443/hook"),
        ("https://example.com/hook#frag", "https://example.com/hook"),
        (
            "https://hooks.example.co.uk/a/b?token=x&y=1",
            "https://hooks.example.co.uk/a/b?token=x&y=1",
        ),
        ("https://b\u00fccher.example/", "https://xn--bcher-kva.example/"),
        ("https://\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com/", "https://example.com/"),
        ("https://_svc.example.com/", "https://_svc.example.com/"),
        ("https://8.8.8.8/", "https://8.8.8.8/"),
        ("https://8.8.8.8:8443/x", "https://8.8.8.8:8443/x"),
        ("https://[2606:4700:4700::1111]/", "https://[2606:4700:4700::1111]/"),
        ("https://[2606:4700:4700:0:0:0:0:1111]:8443/", "https://[2606:4700:4700::1111]:8443/"),
    ],
)
def test_accepted_urls_are_normalised(url: str, normalised: str) -> None:
    assert check_callback_url(url) == normalised
    assert check_callback_url(normalised) == normalised  # idempotent


@pytest.mark.parametrize(
    ("url", "normalised"),
    [
        ("http://localhost:8000/cb", "http://localhost:8000/cb"),
        ("http://LOCALHOST./cb", "http://localhost/cb"),
        ("http://127.0.0.1:9/cb", "http://127.0.0.1:9/cb"),
        ("http://[::1]:9/cb", "http://[::1]:9/cb"),
        ("https://localhost/cb", "https://localhost/cb"),
        ("http://example.com:80/cb", None),  # http stays localhost-only
        ("http://127.0.0.2/cb", None),
        ("http://127.1/cb", None),
        ("http://api.localhost/cb", None),
        ("http://10.0.0.1/cb", None),
        ("http://user:pw@localhost/cb", None),
    ],
)
def test_insecure_localhost_exception(url: str, normalised: str | None) -> None:
    if normalised is None:
        with pytest.raises(UnsafeCallbackUrl):
            check_callback_url(url, allow_insecure_localhost=True)
    else:
        assert check_callback_url(url, allow_insecure_localhost=True) == normalised
        with pytest.raises(UnsafeCallbackUrl):
            check_callback_url(url)


def test_reason_never_echoes_credentials_or_query() -> None:
    for url in ("https://alice:s3cret@example.com/", "https://10.0.0.1/?token=s3cret"):
        with pytest.raises(UnsafeCallbackUrl) as info:
            check_callback_url(url)
        assert "s3cret" not in info.value.reason and "s3cret" not in str(info.value)


def test_url_for_log_drops_path_and_query() -> None:
    assert url_for_log("https://example.com:8443/p/secret?token=x") == "https://example.com:8443"
    assert url_for_log("https://[::1]/x") == "https://[::1]"


# --- resolve_and_check ---------------------------------------------------------------------


async def _resolve(
    answers: Sequence[str], host: str = "hooks.example.com", **kw: bool
) -> list[str]:
    async def resolver(h: str, port: int) -> Sequence[str]:
        assert (h, port) == (host, 443)
        return answers

    return await resolve_and_check(host, 443, resolver=resolver, **kw)


async def test_public_answers_are_returned() -> None:
    assert await _resolve(["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]) == [
        "93.184.215.14",
        "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
    ]


async def test_duplicates_collapse() -> None:
    assert await _resolve(["8.8.8.8", "8.8.8.8"]) == ["8.8.8.8"]


@pytest.mark.parametrize(
    "answers",
    [
        ["127.0.0.1"],
        ["93.184.215.14", "10.0.0.5"],  # one bad record rejects the name (rebinding)
        ["169.254.169.254"],
        ["::ffff:127.0.0.1"],
        ["8.8.8.8", "fd00:ec2::254"],
        ["not-an-ip"],
    ],
)
async def test_rebinding_to_private_address_rejected(answers: list[str]) -> None:
    with pytest.raises(UnsafeCallbackUrl):
        await _resolve(answers)


async def test_empty_answer_is_an_os_error() -> None:
    with pytest.raises(OSError, match="no addresses"):
        await _resolve([])


async def test_ip_literal_is_checked_without_lookup() -> None:
    async def must_not_resolve(host: str, port: int) -> Sequence[str]:
        raise AssertionError("literal hosts are not resolved")

    assert await resolve_and_check("8.8.8.8", 443, resolver=must_not_resolve) == ["8.8.8.8"]
    with pytest.raises(UnsafeCallbackUrl):
        await resolve_and_check("10.0.0.1", 443, resolver=must_not_resolve)
    with pytest.raises(UnsafeCallbackUrl):
        await resolve_and_check("::1", 443, resolver=must_not_resolve)
    assert await resolve_and_check(
        "::1", 443, resolver=must_not_resolve, allow_insecure_localhost=True
    ) == ["::1"]


async def test_dev_localhost_must_resolve_to_loopback_only() -> None:
    assert await _resolve(
        ["127.0.0.1", "::1"], host="localhost", allow_insecure_localhost=True
    ) == [
        "127.0.0.1",
        "::1",
    ]
    with pytest.raises(UnsafeCallbackUrl):
        await _resolve(["10.1.2.3"], host="localhost", allow_insecure_localhost=True)
    with pytest.raises(UnsafeCallbackUrl):
        await _resolve(["127.0.0.1"], host="localhost")


async def test_default_resolver_uses_getaddrinfo() -> None:
    # "localhost" resolves from /etc/hosts, so this needs no network.
    addresses = await resolve_and_check("localhost", 80, allow_insecure_localhost=True)
    assert addresses and all(ipaddress.ip_address(a).is_loopback for a in addresses)
