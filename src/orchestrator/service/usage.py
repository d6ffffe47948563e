"""What was spent: a workspace's platform costs per day and actor (``GET
/workspaces/{id}/usage``). A workspace key sees only its own workspace; another one is
reported as missing, exactly like the other workspace routes."""

from __future__ import annotations

from datetime import date

from sqlalchemy import Connection

from orchestrator.db.queries import usage as usage_queries
from orchestrator.domain.errors import NotFound, ValidationFailed
from orchestrator.service.auth import Principal

# The longest period one usage report covers (days, both ends included).
MAX_USAGE_DAYS = 366


def workspace_usage(
    conn: Connection, workspace_id: str, start: date, end: date, *, caller: Principal
) -> usage_queries.WorkspaceUsage:
    if not caller.may_see(workspace_id):
        raise NotFound(f"workspace {workspace_id} does not exist", field="workspaceId")
    if end < start:
        raise ValidationFailed("`to` is before `from`", field="to")
    if (end - start).days + 1 > MAX_USAGE_DAYS:
        raise ValidationFailed(f"a usage report covers at most {MAX_USAGE_DAYS} days", field="from")
    return usage_queries.workspace_usage(conn, workspace_id, start, end)
