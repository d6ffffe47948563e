"""Small shared helpers: Apify-style IDs, ISO timestamps, query-param parsing, stable hashes.

Kept dependency-free so every other module can import it; the trade-off is
that query parsing is hand-rolled rather than delegated to FastAPI, which lets
us accept Apify's loose spellings (`1`/`0`/`true`/`false`) and return Apify
error envelopes instead of FastAPI's 422s.
"""

from __future__ import annotations

import hashlib
import secrets
import string
from datetime import UTC, datetime

from apify_emulator.errors import ApiError

_ALPHABET = string.ascii_letters + string.digits


def new_id() -> str:
    """17-char alphanumeric ID, like `cryptoRandomObjectId(17)` on the platform."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(17))


def stable_id(seed: str) -> str:
    """Deterministic 17-char ID (for scripted actors, so their IDs never change)."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:17])


def stable_int(*parts: object) -> int:
    """Deterministic 64-bit integer from arbitrary parts (hash-based, no RNG state)."""
    raw = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big")


def iso(ts: float | None) -> str | None:
    """Unix seconds -> `2019-11-30T07:34:24.202Z` (millisecond precision, UTC)."""
    if ts is None:
        return None
    dt = datetime.fromtimestamp(ts, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def parse_iso(value: str, name: str) -> float:
    try:
        text = value.strip().replace("Z", "+00:00")
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ApiError.invalid(f"Parameter '{name}' must be an ISO 8601 date") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def parse_bool(value: str | None, name: str, default: bool = False) -> bool:
    if value is None or value == "":
        return default
    low = value.strip().lower()
    if low in {"1", "true"}:
        return True
    if low in {"0", "false"}:
        return False
    raise ApiError.invalid(f"Parameter '{name}' must be a boolean (1, 0, true or false)")


def parse_number(value: str | None, name: str, *, minimum: float | None = None) -> float | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        raise ApiError.invalid(f"Parameter '{name}' must be a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ApiError.invalid(f"Parameter '{name}' must be a finite number")
    if minimum is not None and number < minimum:
        raise ApiError.invalid(f"Parameter '{name}' must be at least {minimum:g}")
    return number


def parse_int(value: str | None, name: str, *, minimum: int | None = None) -> int | None:
    number = parse_number(value, name, minimum=minimum)
    if number is None:
        return None
    if number != int(number):
        raise ApiError.invalid(f"Parameter '{name}' must be an integer")
    return int(number)


def parse_list(value: str | None) -> list[str]:
    if not value:
        return []
    return [part.strip() for part in value.split(",") if part.strip()]
