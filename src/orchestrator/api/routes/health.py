"""``/healthz``: liveness and readiness (the database answers; Temporal is connected)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from orchestrator.api.deps import State

router = APIRouter(tags=["health"])


_HEALTH = {
    "application/json": {
        "schema": {
            "type": "object",
            "properties": {
                "status": {"enum": ["ok", "degraded"]},
                "checks": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "required": ["status", "checks"],
        }
    }
}


@router.get(
    "/healthz",
    summary="Health of the API process and its dependencies.",
    responses={
        200: {"description": "Every dependency answers.", "content": _HEALTH},
        503: {
            "description": "A dependency does not answer; `checks` says which.",
            "content": _HEALTH,
        },
    },
)
def healthz(state: State) -> JSONResponse:
    checks: dict[str, str] = {}
    try:
        with state.reader.connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:  # report, never raise: this is the health endpoint
        checks["database"] = f"error: {type(exc).__name__}"
    checks["temporal"] = "ok" if state.temporal is not None else "not connected"
    ok = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ok" if ok else "degraded", "checks": checks}, status_code=200 if ok else 503
    )
