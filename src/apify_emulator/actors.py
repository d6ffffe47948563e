"""Scripted actors: what each run does (its script) and the rows it produces.

A run's behaviour is fixed at start from its input (`plan_run`), and its dataset
is a pure function `row(kind, params, index)`. Nothing is stored per row, so a
dataset of millions of items costs no memory; the trade-off is that datasets are
read-only (no `POST .../items`) and rows can only depend on input and index.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from apify_emulator import leadgen
from apify_emulator.errors import ApiError
from apify_emulator.leadgen import COUNTRIES, pick
from apify_emulator.pricing import (
    FLAT_PRICE_PER_MONTH,
    FREE_PRICING,
    PAY_PER_EVENT,
    PRICE_PER_DATASET_ITEM,
    START_EVENT,
    ChargeEvent,
    Pricing,
)
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
    pricing: Pricing = FREE_PRICING

    def actor_id(self, username: str) -> str:
        return stable_id(f"actor:{username}/{self.name}")


# One actor per pricing model. Leadgen charges like a Store actor: the platform's synthetic
# start event at its default price, and one `lead` event per row it pushes. Its minimum
# maxTotalChargeUsd (two cents) pays the start and one lead at any memory, and is low enough
# for every test that caps a leadgen run.
LEADGEN_PRICING = Pricing(
    model=PAY_PER_EVENT,
    events=(
        ChargeEvent(START_EVENT, "Actor start", "Charged by the platform per GB of memory", 5e-05),
        ChargeEvent("lead", "Lead", "One lead pushed to the dataset", 0.01, primary=True),
    ),
    item_event="lead",
    minimal_max_total_charge_usd=0.02,
)
SIMILARWEB_PRICING = Pricing(model=PRICE_PER_DATASET_ITEM, price_per_unit_usd=0.002)
RENTAL_PRICING = Pricing(model=FLAT_PRICE_PER_MONTH, price_per_unit_usd=10.0, trial_minutes=10080)

ACTORS: tuple[ActorDef, ...] = (
    ActorDef(
        "leadgen",
        "leadgen",
        "Lead generator",
        "Deterministic leads from brief + ICP.",
        3.0,
        LEADGEN_PRICING,
    ),
    ActorDef(
        "similarweb-bulk",
        "similarweb",
        "SimilarWeb bulk",
        "One traffic row per input domain.",
        3.0,
        SIMILARWEB_PRICING,
    ),
    ActorDef("generator", "generator", "Generator", "Behaviour scripted by its input.", 3.0),
    # The generator again, rented: the monthly fee is not charged per run, compute is.
    ActorDef(
        "generator-rental",
        "generator",
        "Generator (rental)",
        "The generator, rented for a flat monthly price.",
        3.0,
        RENTAL_PRICING,
    ),
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


def _plan_leadgen(inp: Mapping[str, Any]) -> dict[str, Any]:
    params, count = leadgen.plan_params(inp)
    return {
        "params": params,
        "item_count": count,
        "running_message": f"Generating {count} leads",
        "final_message": f"Generated {count} leads",
    }


def _plan_similarweb(inp: Mapping[str, Any]) -> dict[str, Any]:
    domains = inp.get("domains", [])
    if not isinstance(domains, list):
        raise ApiError.invalid("Input 'domains' must be an array of strings")
    count = len(domains)
    return {
        "params": {"domains": [str(d).strip().lower() for d in domains]},
        "item_count": count,
        "running_message": f"Looking up {count} domains",
        "final_message": f"Looked up {count} domains",
    }


def _plan_generator(inp: Mapping[str, Any]) -> dict[str, Any]:
    final_status = str(inp.get("finalStatus", "SUCCEEDED")).upper().replace("_", "-")
    if final_status not in FINAL_STATUSES:
        raise ApiError.invalid(f"Input 'finalStatus' must be one of {', '.join(FINAL_STATUSES)}")
    message = inp.get("failureMessage") if final_status != "SUCCEEDED" else None
    stuck = inp.get("stuck") is True
    planned: dict[str, Any] = {
        "params": {
            "seed": str(inp.get("seed", "generator")),
            "itemBytes": int(_num(inp, "itemBytes", 500)),
            "emptyEvery": int(_num(inp, "emptyEvery", 0)),
            "hiddenFields": bool(inp.get("hiddenFields", False)),
        },
        "item_count": int(_num(inp, "items", 10)),
        "final_status": final_status,
        "running_message": str(inp.get("statusMessage") or "Generating items"),
        "final_message": str(message) if message else None,
        "exit_code": int(_num(inp, "exitCode", 0 if final_status == "SUCCEEDED" else 1)),
        "stuck": stuck,
    }
    if stuck:
        planned["duration_secs"] = None
    return planned


# Each kind's planner returns its own RunScript fields; plan_run fills in the shared ones.
_PLANNERS = {"leadgen": _plan_leadgen, "similarweb": _plan_similarweb, "generator": _plan_generator}


def plan_run(actor: ActorDef, inp: Mapping[str, Any], max_items: int | None) -> RunScript:
    """Fix the run's script from its input. Raises ApiError(400) on unusable input."""
    fields: dict[str, Any] = {
        "kind": actor.kind,
        "item_count_lag_secs": _num(inp, "itemCountLagSecs", 0),
        "page_delay_ms": _num(inp, "pageDelayMs", 0),
        "final_status": "SUCCEEDED",
        "exit_code": 0,
    }
    script = fields | _PLANNERS[actor.kind](inp)
    if "duration_secs" not in script:
        script["duration_secs"] = _duration(inp, actor.default_duration_secs)
    if max_items is not None and script["item_count"] > max_items:
        _stop_at_max_items(script, max_items)
    return RunScript(**script)


def _stop_at_max_items(script: dict[str, Any], max_items: int) -> None:
    """The run reads ACTOR_MAX_PAID_DATASET_ITEMS: it pushes rows at its usual pace, stops
    after `max_items` and then finishes on its own (so sooner), as actors are expected to."""
    if script["duration_secs"] is not None:
        script["duration_secs"] *= max_items / script["item_count"]
    script["item_count"] = max_items
    if script["final_status"] == "SUCCEEDED":
        script["final_message"] = f"Stopped after {max_items} results, the run's maxItems"


_CATEGORIES = ("News", "E-commerce", "Technology", "Finance", "Travel", "Education", "Games")


def row(kind: str, params: Mapping[str, Any], index: int) -> dict[str, Any]:
    """The dataset row at `index` (0-based, insertion order) for a run's script."""
    if kind == "leadgen":
        return leadgen.row(params, index)
    if kind == "similarweb":
        domain = params["domains"][index]
        h = stable_int("similarweb", domain)
        rank = 1 + h % 5_000_000
        return {
            "domain": domain,
            "globalRank": rank,
            "countryRank": 1 + (h >> 24) % 500_000,
            "topCountry": pick(COUNTRIES, h, 12),
            "category": pick(_CATEGORIES, h, 18),
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


def row_texts(kind: str, params: Mapping[str, Any], window: range) -> Iterator[str] | None:
    """``json.dumps(row(kind, params, i), ensure_ascii=False)`` for each index of ``window``,
    or None for a kind without this fast path (the caller then encodes ``row`` itself).

    The generator's rows (what the benchmark reads) are written as text straight from the
    same hash, about four times faster than building a dict and encoding it: serving
    dataset pages must not be what bounds an ingest measurement (issue 14). Its rows are
    ASCII with nothing to escape, so the text is exactly what ``json.dumps`` writes; a unit
    test holds the two equal.
    """
    if kind != "generator":
        return None
    return _generator_texts(params, window)


def _generator_texts(params: Mapping[str, Any], window: range) -> Iterator[str]:
    empty_every = int(params.get("emptyEvery", 0))
    hidden = bool(params.get("hiddenFields"))
    pad = max(0, int(params.get("itemBytes", 500)) - 60 - (24 if hidden else 0))
    reps = pad // 16 + 1
    # stable_int("generator", seed, index): the constant part hashed once, each index added
    # to a copy; the hex digest is the same number written as the payload writes it.
    seeded = hashlib.blake2b(f"generator\x1f{params['seed']}\x1f".encode(), digest_size=8)
    for index in window:
        if empty_every and (index + 1) % empty_every == 0:
            yield "{}"
            continue
        hashed = seeded.copy()
        hashed.update(b"%d" % index)
        digits = hashed.hexdigest()
        value = int(digits, 16) % 1_000_000
        debug = f'"#debug": "hidden-{index}", ' if hidden else ""
        yield (
            f'{{"index": {index}, "id": "item-{index:09d}", "value": {value}, '
            f'{debug}"payload": "{(digits * reps)[:pad]}"}}'
        )
