"""``/plans``: a brief planned into actor runs (nothing is spent), and a stored plan read
back. ``POST /runs`` with ``planId`` runs one (``routes/runs.py``)."""

from __future__ import annotations

import asyncio
import re

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from orchestrator.api.auth import Caller
from orchestrator.api.deps import State
from orchestrator.api.schemas import PLAN_ID_PATTERN, PlanRequest, PlanView
from orchestrator.domain.errors import NotFound
from orchestrator.service import planning

router = APIRouter(tags=["plans"])


@router.post(
    "/plans",
    status_code=201,
    response_model=PlanView,
    summary="Plan a brief: the actors for each need, their inputs, order, rows and cost.",
    description="Deterministic and explainable: each step says why its actor was chosen "
    "(and why not the others). Nothing is started or charged; run it with `POST /runs "
    '{"planId": ...}` while the catalog is unchanged. A need no actor can meet is a 422 '
    "naming `/needs/N` and why.",
    responses={201: {"description": "The plan, stored."}},
)
async def create_plan(body: PlanRequest, caller: Caller, app_state: State) -> JSONResponse:
    record = await asyncio.to_thread(
        planning.plan_brief, app_state.engine, body.to_command(), caller=caller
    )
    view = PlanView.model_validate(planning.plan_view(record))
    return JSONResponse(
        view.model_dump(mode="json", by_alias=True),
        status_code=201,
        headers={"Location": f"/plans/{record.id}"},
    )


@router.get("/plans/{plan_id}", response_model=PlanView, summary="A stored plan.")
def get_plan(plan_id: str, caller: Caller, app_state: State) -> PlanView:
    if not re.match(PLAN_ID_PATTERN, plan_id):  # never a plan: as for a missing one
        raise NotFound(f"plan {plan_id} does not exist", field="planId")
    record = planning.get_plan(app_state.engine, plan_id, caller=caller)
    return PlanView.model_validate(planning.plan_view(record))
