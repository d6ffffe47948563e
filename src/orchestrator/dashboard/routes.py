"""Serving the dashboard (``/dashboard``).

The page and its script are static files; every number on it comes from the JSON API with
the key the user pastes in (kept in the browser's localStorage), so the dashboard sees
exactly what that key may see and needs no session or server-side rendering of its own. A
strict Content-Security-Policy (no inline script, same-origin requests only) keeps scraped
data, which the script only ever writes as text, from running as code.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

router = APIRouter(include_in_schema=False)

_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _static(name: str) -> str:
    return resources.files("orchestrator.dashboard").joinpath("static", name).read_text("utf-8")


@router.get("/dashboard")
def dashboard() -> HTMLResponse:
    return HTMLResponse(_static("index.html"), headers=_HEADERS)


@router.get("/dashboard/app.js")
def dashboard_script() -> Response:
    return Response(_static("app.js"), media_type="text/javascript", headers=_HEADERS)


@router.get("/dashboard/style.css")
def dashboard_style() -> Response:
    return Response(_static("style.css"), media_type="text/css", headers=_HEADERS)
