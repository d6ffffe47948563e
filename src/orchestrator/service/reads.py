"""Reading a request for a caller: the run (if the key may see it), its children, its spend.

Another workspace's run is reported exactly like a run that does not exist, so nothing
hints at other tenants. The MCP tools read through here; the HTTP routes keep their own
reads (``api.routes.runs``), which do the same through the same queries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, Engine

from orchestrator.db.engine import read_only
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import plans as plan_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.errors import NotFound
from orchestrator.service.auth import Principal


@dataclass(frozen=True)
class RunDetails:
    run: run_queries.RunRecord
    children: list[run_queries.ChildRecord]
    platform_calls: Mapping[str, Mapping[str, int]]
    usage_total_usd: float
    #: The plan the request was made from, if any.
    plan: plan_queries.PlanRecord | None = None


def visible_run(
    conn: Connection, run_id: str, caller: Principal, *, field: str = "runId"
) -> run_queries.RunRecord:
    """The run if the caller may see it; otherwise the same :class:`NotFound` as a missing one."""
    run = run_queries.get_run(conn, run_id)
    if run is None or not caller.may_see(run.workspace_id):
        raise NotFound(f"run {run_id} does not exist", field=field)
    return run


def read_run(engine: Engine, run_id: str, *, caller: Principal) -> RunDetails:
    """The request with its children, platform call counts, spend and plan, read together."""
    with read_only(engine).connect() as conn:
        run = visible_run(conn, run_id, caller)
        return RunDetails(
            run=run,
            children=run_queries.get_children(conn, run_id),
            platform_calls=event_queries.platform_calls(conn, run_id),
            usage_total_usd=run_queries.run_usage_total(conn, run_id),
            plan=plan_queries.get_plan(conn, run.plan_id) if run.plan_id else None,
        )
