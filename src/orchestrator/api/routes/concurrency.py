"""``/workspaces/{id}/concurrency``: an operator's limit on the platform runs a workspace may
hold at once (capacity admission, docs/ARCHITECTURE.md). Set by admin keys only; a change
tells the admission workflow to read the limits again (best effort)."""

from __future__ import annotations

from fastapi import APIRouter

from orchestrator.api.auth import AdminCaller, Caller
from orchestrator.api.deps import State
from orchestrator.api.routes.admin import _check_workspace_id
from orchestrator.api.schemas import WorkspaceConcurrencyRequest, WorkspaceConcurrencyView
from orchestrator.domain.errors import NotFound
from orchestrator.service import admission

router = APIRouter(tags=["admin"])

_RULES = (
    "Waiting actor runs are admitted round-robin across workspaces; a workspace at its "
    "limit is passed over until one of its runs ends."
)


@router.get(
    "/workspaces/{workspace_id}/concurrency",
    response_model=WorkspaceConcurrencyView,
    summary="The workspace's limit on platform runs held at once.",
    description=_RULES + " A workspace key sees only its own workspace.",
)
def get_concurrency(
    workspace_id: str, caller: Caller, app_state: State
) -> WorkspaceConcurrencyView:
    _check_workspace_id(workspace_id)
    if not caller.may_see(workspace_id):
        raise NotFound(f"workspace {workspace_id} does not exist", field="workspaceId")
    with app_state.reader.connect() as conn:
        limit = admission.concurrency_limit(conn, workspace_id)
    return WorkspaceConcurrencyView(workspace_id=workspace_id, max_concurrent_runs=limit)


@router.put(
    "/workspaces/{workspace_id}/concurrency",
    response_model=WorkspaceConcurrencyView,
    summary="Set the workspace's limit on platform runs held at once (admin keys only).",
    description=_RULES + " It applies from the admission workflow's next refresh, which "
    "the change asks for at once.",
)
async def put_concurrency(
    workspace_id: str, body: WorkspaceConcurrencyRequest, _admin: AdminCaller, app_state: State
) -> WorkspaceConcurrencyView:
    _check_workspace_id(workspace_id)
    with app_state.engine.begin() as conn:
        admission.set_concurrency_limit(conn, workspace_id, body.max_concurrent_runs)
    await admission.refresh_admission(app_state.temporal, app_state.settings.task_queue)
    return WorkspaceConcurrencyView(
        workspace_id=workspace_id, max_concurrent_runs=body.max_concurrent_runs
    )


@router.delete(
    "/workspaces/{workspace_id}/concurrency",
    response_model=WorkspaceConcurrencyView,
    summary="Remove the workspace's concurrency limit (admin keys only). Idempotent.",
)
async def delete_concurrency(
    workspace_id: str, _admin: AdminCaller, app_state: State
) -> WorkspaceConcurrencyView:
    _check_workspace_id(workspace_id)
    with app_state.engine.begin() as conn:
        admission.set_concurrency_limit(conn, workspace_id, None)
    await admission.refresh_admission(app_state.temporal, app_state.settings.task_queue)
    return WorkspaceConcurrencyView(workspace_id=workspace_id, max_concurrent_runs=None)
