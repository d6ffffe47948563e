"""Typed FastAPI dependencies. Everything they hand out is built once, in ``create_app``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine
from temporalio.client import Client

from orchestrator.config.settings import Settings
from orchestrator.db.engine import read_only


@dataclass
class AppState:
    settings: Settings
    engine: Engine
    temporal: Client | None = None

    @property
    def reader(self) -> Engine:
        """The engine for read-only requests (they never queue behind ingestion on SQLite)."""
        return read_only(self.engine)


def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.orchestrator
    return state


State = Annotated[AppState, Depends(get_state)]
