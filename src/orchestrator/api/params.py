"""Query and header formats the OpenAPI document declares, enforced exactly as declared.

Pydantic's lax ``datetime`` would take ``0.5`` as a Unix timestamp and ``2020-01-01`` as a
date, neither of which is the ``date-time`` the document promises; these parse RFC 3339
strictly, so a client that follows the document and the app agree on what is valid.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated

from pydantic import BeforeValidator

# RFC 3339 §5.6 date-time: full date, "T", full time, fraction optional, offset required.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)


def parse_rfc3339(value: object) -> datetime:
    """An aware datetime in UTC; ``ValueError`` (a 422 naming the parameter) otherwise."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError("must be an RFC 3339 date-time with an offset, e.g. 2026-01-31T09:30:00Z")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zulu, sign, off_h, off_m = match.groups()[6:]
    if int(off_h or 0) > 23 or int(off_m or 0) > 59:
        raise ValueError("the UTC offset is out of range")
    offset = timedelta(hours=int(off_h or 0), minutes=int(off_m or 0))
    tz = UTC if zulu or not offset else timezone(offset if sign == "+" else -offset)
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    # A leap second (:60) is valid RFC 3339; Python has no such second, so take the last one.
    try:
        parsed = datetime(year, month, day, hour, minute, min(second, 59), micros, tzinfo=tz)
        return parsed.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before datetime.min in UTC
        raise ValueError("the date-time is out of range") from None


#: A ``date-time`` parameter: still ``datetime`` to FastAPI, so the document says
#: ``format: date-time``; the validator makes the app accept exactly that.
DateTimeParam = Annotated[datetime, BeforeValidator(parse_rfc3339)]
