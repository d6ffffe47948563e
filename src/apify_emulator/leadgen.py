"""The scripted lead generator: its input (a brief and an ideal customer profile) and its rows.

The specification sends `brief` and `icp` as objects, so both are read as structured
targeting: the ICP's industries, titles, regions and company size decide which values a
lead can take, and the brief's `targetCount` how many leads there are. A string brief or ICP
(the emulator's first input shape) is still accepted and only copied into the rows.
Unknown keys are kept and ignored, like a real actor that reads only what it knows; a known
key of the wrong type is `invalid-input`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from apify_emulator.errors import ApiError
from apify_emulator.util import stable_int

DEFAULT_LEADS = 25
DEFAULT_SIZE = (10, 5000)

FIRST = ("Ada", "Alan", "Grace", "Linus", "Margaret", "Ken", "Barbara", "Dennis", "Radia", "Tim")
LAST = ("Lovelace", "Turing", "Hopper", "Torvalds", "Hamilton", "Thompson", "Liskov", "Ritchie")
CO_A = ("Acme", "Globex", "Initech", "Umbrella", "Stark", "Wayne", "Hooli", "Vandelay", "Soylent")
CO_B = ("Labs", "Systems", "Analytics", "Robotics", "Cloud", "Foods", "Logistics", "Health")
TITLES = ("CEO", "CTO", "VP Sales", "Head of Growth", "Data Lead", "COO", "Marketing Director")
INDUSTRIES = ("SaaS", "Retail", "Fintech", "Healthcare", "Manufacturing", "Media", "Logistics")
COUNTRIES = ("US", "GB", "DE", "FR", "CZ", "NL", "CA", "AU", "JP", "BR")
# An ICP region names a market; leads get one of its countries. Anything else is taken as
# a country (or region) label as written.
REGIONS: Mapping[str, tuple[str, ...]] = {
    "europe": ("GB", "DE", "FR", "CZ", "NL"),
    "eu": ("DE", "FR", "CZ", "NL"),
    "dach": ("DE",),
    "north america": ("US", "CA"),
    "na": ("US", "CA"),
    "apac": ("JP", "AU"),
    "latam": ("BR",),
    "global": COUNTRIES,
}

# (accepted spellings, key in params): the plural first, the singular as a convenience.
_ICP_LISTS = (
    (("industries", "industry"), "industries"),
    (("titles", "title", "jobTitles", "roles"), "titles"),
    (("regions", "region", "countries", "country"), "regions"),
)
_SIZE = re.compile(r"(?P<low>\d+)(?:-(?P<high>\d+)|(?P<plus>\+))?")


def pick(options: tuple[str, ...], h: int, shift: int) -> str:
    return options[(h >> shift) % len(options)]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ApiError.invalid(f"Input field '{name}' must be a number >= 0")
    return int(value)


def _strings(value: Any, name: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) and v.strip() for v in items):
        raise ApiError.invalid(f"Input field '{name}' must be a string or an array of strings")
    return tuple(v.strip() for v in items)


def _size_range(value: Any, name: str) -> tuple[int, int]:
    """`"51-200"`, `"1000+"`, `"500"` or `{"min": 51, "max": 200}` → an inclusive range."""
    if isinstance(value, Mapping):
        low = _count(value.get("min", 1), f"{name}.min")
        high = _count(value.get("max", max(low, DEFAULT_SIZE[1])), f"{name}.max")
    elif isinstance(value, str) and (m := _SIZE.fullmatch(value.replace(" ", ""))):
        low = int(m["low"])
        # "1000+" has no upper bound; an order of magnitude keeps the numbers plausible.
        high = int(m["high"]) if m["high"] else low * 10 if m["plus"] else low
    else:
        raise ApiError.invalid(
            f"Input field '{name}' must be like '51-200', '1000+' or {{min, max}}"
        )
    if not 1 <= low <= high:
        raise ApiError.invalid(f"Input field '{name}' must have 1 <= min <= max")
    return low, high


def _icp_targets(icp: Mapping[str, Any]) -> dict[str, Any]:
    targets: dict[str, Any] = {}
    for spellings, key in _ICP_LISTS:
        for spelling in spellings:
            if spelling in icp:
                targets[key] = list(_strings(icp[spelling], f"icp.{spelling}"))
                break
    for spelling in ("companySize", "size", "employees"):
        if spelling in icp:
            targets["size"] = list(_size_range(icp[spelling], f"icp.{spelling}"))
            break
    return targets


def plan_params(inp: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """The leadgen run's row parameters and lead count. Raises ApiError(400) on bad input.

    The count is the input's `maxLeads`, else the brief's `targetCount` (or `maxLeads`),
    else 25.
    """
    brief, icp = inp.get("brief", ""), inp.get("icp", "")
    if not isinstance(brief, str | dict) or not isinstance(icp, str | dict):
        raise ApiError.invalid("Input 'brief' and 'icp' must each be an object or a string")
    count = DEFAULT_LEADS
    if isinstance(brief, dict):
        for key in ("targetCount", "maxLeads"):
            if key in brief:
                count = _count(brief[key], f"brief.{key}")
                break
        if "product" in brief and not isinstance(brief["product"], str):
            raise ApiError.invalid("Input field 'brief.product' must be a string")
    if "maxLeads" in inp:
        count = _count(inp["maxLeads"], "maxLeads")
    params: dict[str, Any] = {"brief": brief, "icp": icp, "key": _canonical([brief, icp])}
    if isinstance(icp, dict):
        params.update(_icp_targets(icp))
    return params, count


def _country(regions: list[str] | None, h: int, h2: int) -> str:
    if not regions:
        return pick(COUNTRIES, h, 48)
    region = pick(tuple(regions), h2, 0)
    countries = REGIONS.get(region.lower())
    return pick(countries, h2, 16) if countries else region


def row(params: Mapping[str, Any], index: int) -> dict[str, Any]:
    """The lead at `index`: the same input and index always give the same lead."""
    h = stable_int("leadgen", params["key"], index)
    h2 = stable_int("leadgen-targets", params["key"], index)  # independent of h's bits
    first, last = pick(FIRST, h, 0), pick(LAST, h, 8)
    company = f"{pick(CO_A, h, 16)} {pick(CO_B, h, 24)}"
    domain = company.lower().replace(" ", "") + ".example"
    # Targets absent (a string ICP, or a state file from before they existed): any value.
    low, high = params.get("size") or DEFAULT_SIZE
    return {
        "rank": index + 1,
        "name": f"{first} {last}",
        "firstName": first,
        "lastName": last,
        "title": pick(tuple(params.get("titles") or TITLES), h, 32),
        "company": company,
        "domain": domain,
        "email": f"{first.lower()}.{last.lower()}@{domain}",
        "industry": pick(tuple(params.get("industries") or INDUSTRIES), h, 40),
        "country": _country(params.get("regions"), h, h2),
        "employees": low + (h2 >> 32) % (high - low + 1),
        "score": (h >> 52) % 101,
        "brief": params["brief"],
        "icp": params["icp"],
    }
