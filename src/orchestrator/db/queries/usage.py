"""What a workspace's platform runs cost, per day (UTC) and actor.

A child counts on the day it finished (UTC), or the day it started while it still runs, so
a run's spend is booked once, on the day its bill became known. Children that never reached
the platform (no figure) do not appear. Sums are computed here from the children's own
figures (the one place spend is stored); nothing is summed twice.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import ColumnElement, Connection, func, select

from orchestrator.db.queries._common import as_utc
from orchestrator.db.schema import scrape_children, scrape_runs


@dataclass
class ActorUsage:
    actor: str
    usage_total_usd: float = 0.0
    runs: int = 0
    # Runs whose figure is not final yet (still running, or read too soon).
    unsettled: int = 0
    charged_event_counts: dict[str, int] = field(default_factory=dict)


@dataclass
class DayUsage:
    day: date
    usage_total_usd: float
    actors: list[ActorUsage]


@dataclass(frozen=True)
class WorkspaceUsage:
    workspace_id: str
    start: date
    end: date
    usage_total_usd: float
    days: list[DayUsage]


def _utc_midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


# When a child's spend is booked: the day it finished, or started while it still runs.
_booked_at = func.coalesce(scrape_children.c.finished_at, scrape_children.c.started_at)
_children_of_runs = scrape_children.join(scrape_runs, scrape_runs.c.id == scrape_children.c.run_id)


def _booked_between(workspace_id: str, start: datetime, end: datetime) -> list[ColumnElement[bool]]:
    """Children of the workspace with a figure, booked in [start, end)."""
    return [
        scrape_runs.c.workspace_id == workspace_id,
        scrape_children.c.usage_total_usd.is_not(None),
        _booked_at >= start,
        _booked_at < end,
    ]


def workspace_spend(conn: Connection, workspace_id: str, start: datetime, end: datetime) -> float:
    """What the workspace's children booked in [start, end) cost (a budget period)."""
    total = conn.execute(
        select(func.coalesce(func.sum(scrape_children.c.usage_total_usd), 0.0))
        .select_from(_children_of_runs)
        .where(*_booked_between(workspace_id, start, end))
    ).scalar_one()
    return float(total)


def workspace_usage(conn: Connection, workspace_id: str, start: date, end: date) -> WorkspaceUsage:
    """Spend of ``workspace_id`` from ``start`` to ``end`` (both inclusive, UTC days)."""
    rows = conn.execute(
        select(
            _booked_at.label("booked_at"),
            scrape_children.c.actor,
            scrape_children.c.usage_total_usd,
            scrape_children.c.charged_events_json,
            scrape_children.c.usage_settled_at,
        )
        .select_from(_children_of_runs)
        .where(
            *_booked_between(
                workspace_id, _utc_midnight(start), _utc_midnight(end + timedelta(days=1))
            )
        )
    ).mappings()
    groups: dict[date, dict[str, ActorUsage]] = defaultdict(dict)
    amounts: dict[tuple[date, str], list[float]] = defaultdict(list)
    for row in rows:
        booked_at = as_utc(row["booked_at"])
        if booked_at is None:
            continue
        day = booked_at.date()
        entry = groups[day].setdefault(row["actor"], ActorUsage(actor=row["actor"]))
        entry.runs += 1
        entry.unsettled += row["usage_settled_at"] is None
        amounts[(day, row["actor"])].append(float(row["usage_total_usd"]))
        for event, count in json.loads(row["charged_events_json"] or "{}").items():
            entry.charged_event_counts[event] = entry.charged_event_counts.get(event, 0) + count
    days: list[DayUsage] = []
    for day in sorted(groups):
        actors = sorted(groups[day].values(), key=lambda a: a.actor)
        for entry in actors:
            entry.usage_total_usd = math.fsum(amounts[(day, entry.actor)])
        days.append(DayUsage(day, math.fsum(a.usage_total_usd for a in actors), actors))
    return WorkspaceUsage(
        workspace_id=workspace_id,
        start=start,
        end=end,
        usage_total_usd=math.fsum(d.usage_total_usd for d in days),
        days=days,
    )
