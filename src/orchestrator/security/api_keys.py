"""API keys: format, generation, hashing and constant-time verification (pure).

Format: ``ork_<key id>_<secret><checksum>``.

* ``ork_`` is a recognisable prefix, so secret scanners and humans spot a leaked key;
  ``_`` separates the parts because it is not a base62 character and a double-click selects
  the whole key (GitHub's token format).
* the key id (12 base62 characters, ~71 random bits) is stored in clear: it is how a key is
  looked up, shown in listings and logs, and revoked. It is not secret.
* the secret is 32 random bytes in base62 (43 characters); only its SHA-256 is stored.
* the checksum (CRC32 of everything before it, 6 base62 characters) lets a scanner or the
  API reject a mistyped or truncated key without a database lookup.

Trade-off: the hash is a plain SHA-256, not a slow password hash or a peppered HMAC. The
secret is 256 random bits, so a fast hash cannot be brute-forced, and a pepper would tie
every process that creates keys (API, CLI) to one more shared setting. Verification looks
the row up by key id, then compares fixed-length digests with ``hmac.compare_digest``, so
timing reveals neither the secret nor its length.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import zlib
from dataclasses import dataclass
from typing import Final

KEY_PREFIX: Final = "ork"
_BASE62: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
KEY_ID_LENGTH: Final = 12
SECRET_BYTES: Final = 32
SECRET_LENGTH: Final = 43  # ceil(256 / log2(62))
CHECKSUM_LENGTH: Final = 6

_KEY_RE: Final = re.compile(
    rf"^{KEY_PREFIX}_([0-9A-Za-z]{{{KEY_ID_LENGTH}}})_"
    rf"([0-9A-Za-z]{{{SECRET_LENGTH}}})([0-9A-Za-z]{{{CHECKSUM_LENGTH}}})$"
)
#: A digest that matches no key, compared when the key id is unknown so that both paths
#: do the same work.
_DUMMY_DIGEST: Final = "0" * 64


@dataclass(frozen=True)
class NewApiKey:
    """A freshly generated key: ``plaintext`` is shown once and never stored."""

    key_id: str
    plaintext: str
    key_hash: str


def _base62(number: int, length: int) -> str:
    chars = []
    for _ in range(length):
        number, rem = divmod(number, 62)
        chars.append(_BASE62[rem])
    return "".join(reversed(chars))


def _checksum(body: str) -> str:
    return _base62(zlib.crc32(body.encode("ascii")), CHECKSUM_LENGTH)


def generate_api_key() -> NewApiKey:
    """A new random key with its id and hash."""
    key_id = "".join(secrets.choice(_BASE62) for _ in range(KEY_ID_LENGTH))
    secret = _base62(int.from_bytes(secrets.token_bytes(SECRET_BYTES), "big"), SECRET_LENGTH)
    body = f"{KEY_PREFIX}_{key_id}_{secret}"
    plaintext = body + _checksum(body)
    return NewApiKey(key_id=key_id, plaintext=plaintext, key_hash=hash_api_key(plaintext))


def parse_key_id(presented: str) -> str | None:
    """The key id of a well-formed key with a valid checksum, else None (no I/O needed)."""
    match = _KEY_RE.match(presented)
    if match is None:
        return None
    body = presented[:-CHECKSUM_LENGTH]
    if not hmac.compare_digest(_checksum(body), match.group(3)):
        return None
    return match.group(1)


def hash_api_key(plaintext: str) -> str:
    """The stored form of a key: hex SHA-256 of the whole key."""
    return hashlib.sha256(plaintext.encode("utf-8")).hexdigest()


def key_matches(stored_hash: str | None, presented: str) -> bool:
    """Constant-time check of a presented key against a stored hash (None: unknown key)."""
    expected = stored_hash if stored_hash is not None else _DUMMY_DIGEST
    ok = hmac.compare_digest(expected.encode("ascii"), hash_api_key(presented).encode("ascii"))
    return ok and stored_hash is not None


def display_key(key_id: str) -> str:
    """How a key is shown once its secret is gone: ``ork_<id>_…``."""
    return f"{KEY_PREFIX}_{key_id}_…"
