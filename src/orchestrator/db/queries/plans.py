"""Stored plans (``plans``): what a caller asked for and what the planner answered, with
the catalog version it was planned against."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select

from orchestrator.db.queries._common import as_utc, utcnow
from orchestrator.db.schema import plans


@dataclass(frozen=True)
class PlanRecord:
    id: str
    workspace_id: str
    catalog_version: int
    strategy: str
    brief: dict[str, Any]
    plan: dict[str, Any]
    created_at: datetime


def insert_plan(
    conn: Connection,
    plan_id: str,
    workspace_id: str,
    catalog_version: int,
    strategy: str,
    brief: dict[str, Any],
    plan: dict[str, Any],
) -> PlanRecord:
    now = utcnow()
    conn.execute(
        insert(plans).values(
            id=plan_id,
            workspace_id=workspace_id,
            catalog_version=catalog_version,
            strategy=strategy,
            brief_json=json.dumps(brief, separators=(",", ":")),
            plan_json=json.dumps(plan, separators=(",", ":")),
            created_at=now,
        )
    )
    return PlanRecord(plan_id, workspace_id, catalog_version, strategy, brief, plan, now)


def get_plan(conn: Connection, plan_id: str) -> PlanRecord | None:
    row = conn.execute(select(plans).where(plans.c.id == plan_id)).first()
    if row is None:
        return None
    m = row._mapping
    return PlanRecord(
        id=m["id"],
        workspace_id=m["workspace_id"],
        catalog_version=m["catalog_version"],
        strategy=m["strategy"],
        brief=json.loads(m["brief_json"]),
        plan=json.loads(m["plan_json"]),
        created_at=as_utc(m["created_at"]) or utcnow(),
    )
