"""What activities are built from: the database engine, the platform and a few settings."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine

from orchestrator.db.engine import read_only
from orchestrator.platform.port import Platform

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class ActivityConfig:
    public_url: str
    webhook_secret: str
    poll_interval_seconds: float = 60.0
    default_timeout_grace_seconds: float = 600.0
    default_cap_seconds: float = 4 * 3600.0
    dataset_page_size: int = 1000
    poll_long_wait_seconds: int = 10
    polls_per_workflow_run: int = 500
    capacity_retry_seconds: float = 30.0
    # Outbound callbacks (activities/delivery.py).
    callback_secret_key: str = "local-development-callback-secret-key"  # noqa: S105
    allow_insecure_callback_localhost: bool = False
    #: First retry delay of a callback; the schedule doubles from it (tests shrink it).
    callback_retry_initial_seconds: float = 5.0
    ingest_heartbeat_seconds: float = 30.0


@dataclass(frozen=True)
class ActivityDeps:
    engine: Engine
    platform: Platform
    config: ActivityConfig

    async def tx(
        self,
        fn: Callable[Concatenate[Connection, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run ``fn(conn, …)`` in one transaction on a worker thread (DB calls are blocking)."""

        def run() -> T:
            with self.engine.begin() as conn:
                return fn(conn, *args, **kwargs)

        return await asyncio.to_thread(run)

    async def read(
        self,
        fn: Callable[Concatenate[Connection, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Like :meth:`tx` for ``fn`` that only reads: on SQLite it never waits for a writer."""

        def run() -> T:
            with read_only(self.engine).connect() as conn:
                return fn(conn, *args, **kwargs)

        return await asyncio.to_thread(run)
