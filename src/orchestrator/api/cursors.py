"""Opaque cursors of the list endpoints: URL-safe base64 of a small JSON document.

Opaque so their contents can change without breaking callers; a cursor that does not
decode is a 422 naming the ``cursor`` parameter. They carry positions only, never
anything that grants access: every page is still checked against the caller's workspace.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import datetime
from typing import Any

from orchestrator.db.queries._common import as_utc
from orchestrator.domain.errors import ValidationFailed

MAX_CURSOR = 8192
#: What every cursor looks like (unpadded URL-safe base64); the OpenAPI document declares it.
CURSOR_PATTERN = r"^[A-Za-z0-9_-]*$"


def _encode(document: dict[str, Any]) -> str:
    raw = json.dumps(document, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _decode(cursor: str) -> Any:
    if len(cursor) > MAX_CURSOR or not re.fullmatch(CURSOR_PATTERN, cursor):
        raise ValidationFailed("cursor is not one this API returned", field="cursor")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return json.loads(raw)
    except (ValueError, binascii.Error):
        raise ValidationFailed("cursor is not one this API returned", field="cursor") from None


def encode_item_cursor(offsets: dict[int, int]) -> str:
    return _encode({"o": {str(k): v for k, v in sorted(offsets.items())}})


def decode_item_cursor(cursor: str | None) -> dict[int, int]:
    """Per-child offsets (child index → next item index); empty for the first page."""
    if not cursor:
        return {}
    document = _decode(cursor)
    offsets = document.get("o") if isinstance(document, dict) else None
    if not isinstance(offsets, dict):
        raise ValidationFailed("cursor is not one this API returned", field="cursor")
    try:
        parsed = {int(k): int(v) for k, v in offsets.items()}
    except (TypeError, ValueError):
        raise ValidationFailed("cursor is not one this API returned", field="cursor") from None
    if any(k < 0 or v < 0 for k, v in parsed.items()):
        raise ValidationFailed("cursor is not one this API returned", field="cursor")
    return parsed


def encode_run_cursor(key: tuple[datetime, str]) -> str:
    created, run_id = key
    return _encode({"t": created.isoformat(), "i": run_id})


def decode_run_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    if not cursor:
        return None
    document = _decode(cursor)
    try:
        created = as_utc(datetime.fromisoformat(document["t"]))
        run_id = str(document["i"])
    except (KeyError, TypeError, ValueError):
        raise ValidationFailed("cursor is not one this API returned", field="cursor") from None
    assert created is not None
    return created, run_id
