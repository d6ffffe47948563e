"""Planning use cases: a brief and needs become a stored plan (``POST /plans``), and a plan
becomes a request (``POST /runs`` with ``planId``, or with the brief itself).

The planner is a strategy (``domain.planning.Planner``); this module gives it the catalog
as the planner sees it (each entry's ``planning`` section, pricing and default memory),
stores what it answered with the catalog version it used, and turns a plan into the
service's own ``SubmitRequest``: one run per step, a chained step's input ``inputFrom`` the
step it takes rows from. A plan is refused for running once the catalog has changed since
it was made (409 ``plan-outdated``): the caller plans again and reviews the new plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Connection, Engine

from orchestrator.db.queries import catalog as catalog_queries
from orchestrator.db.queries import plans as plan_queries
from orchestrator.domain.chaining import StepSource
from orchestrator.domain.errors import NotFound
from orchestrator.domain.ids import new_plan_id
from orchestrator.domain.planning import (
    BriefRequest,
    CatalogPlanner,
    Plan,
    PlannableActor,
    Planner,
)
from orchestrator.domain.run_options import RunOptions
from orchestrator.service.auth import Principal
from orchestrator.service.catalog import Catalog, read_catalog
from orchestrator.service.commands import ActorRun, PlanToStore, SubmitRequest
from orchestrator.service.errors import PlanOutdated
from orchestrator.service.submission import workspace_named

#: The strategy used unless another is given (one that asks a model could be added).
DEFAULT_PLANNER: Planner = CatalogPlanner()


@dataclass(frozen=True)
class PlanCommand:
    """Plan a brief: which capabilities are needed, the brief and ICP, optional limits."""

    needs: tuple[str, ...]
    brief: dict[str, Any]
    icp: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    budget_usd: float | None = None
    workspace_id: str | None = None

    def stored(self) -> dict[str, Any]:
        return {
            "needs": list(self.needs),
            "brief": self.brief,
            "icp": self.icp,
            "limits": self.limits,
            "budgetUsd": self.budget_usd,
        }


def plannable(catalog: Catalog) -> list[PlannableActor]:
    """The catalog as the planner sees it: actors with capabilities, their declared
    mappings, pricing and default memory."""
    actors = []
    for item in catalog.entries:
        entry, info = item.entry, item.entry.planning
        if not entry.capabilities:
            continue
        actors.append(
            PlannableActor(
                name=item.name,
                capabilities=tuple(entry.capabilities),
                inputs={
                    name: tuple(s.as_source() for s in sources)
                    for name, sources in (info.inputs.items() if info else ())
                },
                required=frozenset(info.required if info else ()),
                rows=info.rows.as_rule() if info else PlannableActor.rows,
                row_event=info.row_event if info else None,
                priority=info.priority if info else 0,
                pricing=entry.actor_pricing(),
                memory_mb=entry.defaults.memory_mb,
                description=entry.description,
            )
        )
    return actors


def plan_in(
    conn: Connection, command: PlanCommand, planner: Planner = DEFAULT_PLANNER
) -> tuple[Plan, int]:
    """The plan of a brief against the catalog as it is now, and the catalog's version."""
    catalog = read_catalog(conn)
    request = BriefRequest(
        needs=command.needs,
        brief=command.brief,
        icp=command.icp,
        limits=command.limits,
        budget_usd=command.budget_usd,
    )
    return planner.plan(request, plannable(catalog)), catalog.version


def plan_brief(
    engine: Engine,
    command: PlanCommand,
    *,
    caller: Principal | None,
    planner: Planner = DEFAULT_PLANNER,
) -> plan_queries.PlanRecord:
    """Plan a brief and store the plan (nothing is spent); NeedCannotBeMet names the need."""
    workspace = workspace_named(command.workspace_id, caller)
    with engine.begin() as conn:
        plan, version = plan_in(conn, command, planner)
        return plan_queries.insert_plan(
            conn,
            new_plan_id(),
            workspace,
            version,
            plan.strategy,
            command.stored(),
            plan_document(plan),
        )


def get_plan(engine: Engine, plan_id: str, *, caller: Principal | None) -> plan_queries.PlanRecord:
    """A stored plan of the caller's workspace (another workspace's is not found)."""
    with engine.connect() as conn:
        record = plan_queries.get_plan(conn, plan_id)
    if record is None or (caller is not None and not caller.may_see(record.workspace_id)):
        raise NotFound(f"plan {plan_id} does not exist", field="/planId")
    return record


def plan_document(plan: Plan) -> dict[str, Any]:
    """The plan as stored and shown (camelCase, JSON only)."""
    return {
        "strategy": plan.strategy,
        "expectedRows": plan.expected_rows,
        "estimatedCostUsd": plan.estimated_cost_usd,
        "minimumChargeUsd": plan.minimum_charge_usd,
        "budgetUsd": plan.budget_usd,
        "notes": list(plan.notes),
        "steps": [
            {
                "index": step.index,
                "need": step.need,
                "actor": step.actor,
                "input": step.input,
                "inputFrom": {
                    name: {"run": c.step, "field": c.field, "distinct": True, "max": c.max}
                    for name, c in step.input_from.items()
                },
                "dependsOn": list(step.depends_on),
                "expectedRows": step.expected_rows,
                "estimatedCostUsd": step.estimated_cost_usd,
                "minimumChargeUsd": step.minimum_charge_usd,
                "why": step.why,
                "rejected": list(step.rejected),
            }
            for step in plan.steps
        ],
    }


def plan_view(record: plan_queries.PlanRecord) -> dict[str, Any]:
    """What ``POST /plans`` and ``GET /plans/{id}`` answer."""
    return {
        "planId": record.id,
        "workspaceId": record.workspace_id,
        "catalogVersion": record.catalog_version,
        "createdAt": record.created_at.isoformat().replace("+00:00", "Z"),
        "needs": record.brief.get("needs", []),
        **record.plan,
    }


def runs_of(document: dict[str, Any], limits: dict[str, Any]) -> tuple[ActorRun, ...]:
    """The request's runs for a stored plan: one per step, in the plan's order."""
    max_items = limits.get("maxItemsPerStep")
    return tuple(
        ActorRun(
            actor=step["actor"],
            input=dict(step["input"]),
            options=RunOptions(max_items=max_items),
            input_from={
                name: StepSource.from_stored(source) for name, source in step["inputFrom"].items()
            }
            or None,
        )
        for step in document["steps"]
    )


def brief_request(
    engine: Engine,
    command: PlanCommand,
    *,
    caller: Principal | None,
    base: SubmitRequest,
    planner: Planner = DEFAULT_PLANNER,
) -> SubmitRequest:
    """A brief in ``POST /runs``: planned now, and the plan stored with the request (in the
    submission's transaction, so a refused request leaves no plan behind)."""
    workspace = workspace_named(command.workspace_id or base.workspace_id, caller)
    with engine.connect() as conn:
        plan, version = plan_in(conn, command, planner)
    document = plan_document(plan)
    stored = PlanToStore(
        id=new_plan_id(),
        workspace_id=workspace,
        catalog_version=version,
        strategy=plan.strategy,
        brief=command.stored(),
        document=document,
    )
    budget = base.budget_usd if base.budget_usd is not None else command.budget_usd
    return replace(
        base,
        runs=runs_of(document, command.limits),
        workspace_id=workspace,
        budget_usd=budget,
        plan_id=stored.id,
        new_plan=stored,
    )


def request_for_plan(
    engine: Engine, plan_id: str, *, caller: Principal | None, base: SubmitRequest
) -> SubmitRequest:
    """The request a stored plan becomes (``base`` brings the callback, ids, flags);
    PlanOutdated when the catalog has changed since it was made."""
    record = get_plan(engine, plan_id, caller=caller)
    with engine.connect() as conn:
        current = catalog_queries.current_version(conn)
    if current != record.catalog_version:
        raise PlanOutdated(
            f"plan {plan_id} was made with catalog version {record.catalog_version}; the "
            f"catalog is at version {current} now: plan again (POST /plans) and review it",
            field="/planId",
        )
    budget = base.budget_usd if base.budget_usd is not None else record.brief.get("budgetUsd")
    return replace(
        base,
        runs=runs_of(record.plan, record.brief.get("limits") or {}),
        workspace_id=record.workspace_id,
        budget_usd=budget,
        plan_id=record.id,
    )
