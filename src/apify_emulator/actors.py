"""Scripted actors: what each run does (its script) and the rows it produces.

A run's behaviour is fixed at start from its input (`plan_run`), and its dataset
is a pure function `row(kind, params, index)`. Nothing is stored per row, so a
dataset of millions of items costs no memory; the trade-off is that datasets are
read-only (no `POST .../items`) and rows can only depend on input and index.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from apify_emulator.errors import ApiError
from apify_emulator.util import stable_id, stable_int

TERMINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "TIMED-OUT", "ABORTED"})
FINAL_STATUSES = ("SUCCEEDED", "FAILED", "TIMED-OUT", "ABORTED")
# Durations at or above this are treated as "never finishes".
HANG_SECS = 1e9


@dataclass(frozen=True)
class ActorDef:
    name: str
    kind: str
    title: str
    description: str
    default_duration_secs: float

    def actor_id(self, username: str) -> str:
        return stable_id(f"actor:{username}/{self.name}")


ACTORS: tuple[ActorDef, ...] = (
    ActorDef("leadgen", "leadgen", "Lead generator", "Deterministic leads from brief + ICP.", 3.0),
    ActorDef(
        "similarweb-bulk",
        "similarweb",
        "SimilarWeb bulk",
        "One traffic row per input domain.",
        3.0,
    ),
    ActorDef("generator", "generator", "Generator", "Behaviour scripted by its input.", 3.0),
)


def find_actor(ref: str, username: str) -> ActorDef | None:
    """Resolve an actor by 17-char ID, `username~name`, `~name` or `username/name`."""
    ref = ref.replace("/", "~", 1)
    for actor in ACTORS:
        if ref in (actor.actor_id(username), f"{username}~{actor.name}", f"~{actor.name}"):
            return actor
    return None


@dataclass(frozen=True)
class RunScript:
    """Everything that decides a run's timeline and dataset; JSON-serialisable via `to_dict`."""

    kind: str
    duration_secs: float | None  # None = never finishes on its own
    final_status: str
    running_message: str
    final_message: str | None
    exit_code: int
    item_count: int
    params: Mapping[str, Any]
    item_count_lag_secs: float = 0.0
    page_delay_ms: float = 0.0
    # Ignores its timeout and never ends: a run the platform lost track of (backstop tests).
    stuck: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "duration_secs": self.duration_secs,
            "final_status": self.final_status,
            "running_message": self.running_message,
            "final_message": self.final_message,
            "exit_code": self.exit_code,
            "item_count": self.item_count,
            "params": dict(self.params),
            "item_count_lag_secs": self.item_count_lag_secs,
            "page_delay_ms": self.page_delay_ms,
            "stuck": self.stuck,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunScript:
        return cls(**dict(data))


def _num(inp: Mapping[str, Any], key: str, default: float, minimum: float = 0) -> float:
    value = inp.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise ApiError.invalid(f"Input field '{key}' must be a number >= {minimum:g}")
    return float(value)


def _duration(inp: Mapping[str, Any], default: float) -> float | None:
    if inp.get("hang") is True:
        return None
    secs = _num(inp, "durationSecs", default)
    return None if secs >= HANG_SECS else secs


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def plan_run(actor: ActorDef, inp: Mapping[str, Any], max_items: int | None) -> RunScript:
    """Fix the run's script from its input. Raises ApiError(400) on unusable input."""
    common: dict[str, Any] = {
        "item_count_lag_secs": _num(inp, "itemCountLagSecs", 0),
        "page_delay_ms": _num(inp, "pageDelayMs", 0),
    }
    if actor.kind == "leadgen":
        brief = inp.get("brief", "")
        icp = inp.get("icp", "")
        if not isinstance(brief, str) or not isinstance(icp, str | dict):
            raise ApiError.invalid("Input 'brief' must be a string and 'icp' a string or object")
        count = int(_num(inp, "maxLeads", 25))
        params: dict[str, Any] = {"brief": brief, "icp": icp, "key": _canonical([brief, icp])}
        running = f"Generating {count} leads"
        final = f"Generated {count} leads"
    elif actor.kind == "similarweb":
        domains = inp.get("domains", [])
        if not isinstance(domains, list):
            raise ApiError.invalid("Input 'domains' must be an array of strings")
        params = {"domains": [str(d).strip().lower() for d in domains]}
        count = len(domains)
        running = f"Looking up {count} domains"
        final = f"Looked up {count} domains"
    else:
        count = int(_num(inp, "items", 10))
        final_status = str(inp.get("finalStatus", "SUCCEEDED")).upper().replace("_", "-")
        if final_status not in FINAL_STATUSES:
            raise ApiError.invalid(
                f"Input 'finalStatus' must be one of {', '.join(FINAL_STATUSES)}"
            )
        params = {
            "seed": str(inp.get("seed", "generator")),
            "itemBytes": int(_num(inp, "itemBytes", 500)),
            "emptyEvery": int(_num(inp, "emptyEvery", 0)),
            "hiddenFields": bool(inp.get("hiddenFields", False)),
        }
        message = inp.get("failureMessage") if final_status != "SUCCEEDED" else None
        if max_items is not None:
            count = min(count, max_items)
        stuck = inp.get("stuck") is True
        return RunScript(
            kind="generator",
            duration_secs=None if stuck else _duration(inp, actor.default_duration_secs),
            stuck=stuck,
            final_status=final_status,
            running_message=str(inp.get("statusMessage") or "Generating items"),
            final_message=str(message) if message else None,
            exit_code=int(_num(inp, "exitCode", 0 if final_status == "SUCCEEDED" else 1)),
            item_count=count,
            params=params,
            **common,
        )
    if max_items is not None:
        count = min(count, max_items)
    return RunScript(
        kind=actor.kind,
        duration_secs=_duration(inp, actor.default_duration_secs),
        final_status="SUCCEEDED",
        running_message=running,
        final_message=final,
        exit_code=0,
        item_count=count,
        params=params,
        **common,
    )


_FIRST = ("Ada", "Alan", "Grace", "Linus", "Margaret", "Ken", "Barbara", "Dennis", "Radia", "Tim")
_LAST = ("Lovelace", "Turing", "Hopper", "Torvalds", "Hamilton", "Thompson", "Liskov", "Ritchie")
_CO_A = ("Acme", "Globex", "Initech", "Umbrella", "Stark", "Wayne", "Hooli", "Vandelay", "Soylent")
_CO_B = ("Labs", "Systems", "Analytics", "Robotics", "Cloud", "Foods", "Logistics", "Health")
_TITLES = ("CEO", "CTO", "VP Sales", "Head of Growth", "Data Lead", "COO", "Marketing Director")
_INDUSTRIES = ("SaaS", "Retail", "Fintech", "Healthcare", "Manufacturing", "Media", "Logistics")
_COUNTRIES = ("US", "GB", "DE", "FR", "CZ", "NL", "CA", "AU", "JP", "BR")
_CATEGORIES = ("News", "E-commerce", "Technology", "Finance", "Travel", "Education", "Games")


def _pick(options: tuple[str, ...], h: int, shift: int) -> str:
    return options[(h >> shift) % len(options)]


def row(kind: str, params: Mapping[str, Any], index: int) -> dict[str, Any]:
    """The dataset row at `index` (0-based, insertion order) for a run's script."""
    if kind == "leadgen":
        h = stable_int("leadgen", params["key"], index)
        first, last = _pick(_FIRST, h, 0), _pick(_LAST, h, 8)
        company = f"{_pick(_CO_A, h, 16)} {_pick(_CO_B, h, 24)}"
        domain = company.lower().replace(" ", "") + ".example"
        return {
            "rank": index + 1,
            "name": f"{first} {last}",
            "firstName": first,
            "lastName": last,
            "title": _pick(_TITLES, h, 32),
            "company": company,
            "domain": domain,
            "email": f"{first.lower()}.{last.lower()}@{domain}",
            "industry": _pick(_INDUSTRIES, h, 40),
            "country": _pick(_COUNTRIES, h, 48),
            "score": (h >> 52) % 101,
            "brief": params["brief"],
            "icp": params["icp"],
        }
    if kind == "similarweb":
        domain = params["domains"][index]
        h = stable_int("similarweb", domain)
        rank = 1 + h % 5_000_000
        return {
            "domain": domain,
            "globalRank": rank,
            "countryRank": 1 + (h >> 24) % 500_000,
            "topCountry": _pick(_COUNTRIES, h, 12),
            "category": _pick(_CATEGORIES, h, 18),
            # Visits fall with rank so the numbers look plausible.
            "monthlyVisits": int(2_000_000_000 / math.sqrt(rank)),
            "bounceRate": round(0.25 + ((h >> 32) % 5000) / 10000, 4),
            "pagesPerVisit": round(1 + ((h >> 40) % 900) / 100, 2),
            "avgVisitDurationSecs": (h >> 48) % 900,
        }
    empty_every = int(params.get("emptyEvery", 0))
    if empty_every and (index + 1) % empty_every == 0:
        return {}
    h = stable_int("generator", params["seed"], index)
    item: dict[str, Any] = {"index": index, "id": f"item-{index:09d}", "value": h % 1_000_000}
    if params.get("hiddenFields"):
        item["#debug"] = f"hidden-{index}"
    # Pad to roughly itemBytes of JSON; the fixed part above is ~60 bytes.
    pad = max(0, int(params.get("itemBytes", 500)) - 60 - (24 if params.get("hiddenFields") else 0))
    item["payload"] = (f"{h:016x}" * (pad // 16 + 1))[:pad]
    return item
