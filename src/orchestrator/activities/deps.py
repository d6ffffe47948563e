"""What activities are built from: the database engine, the platform and a few settings."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine

from orchestrator.db.engine import read_only
from orchestrator.domain.follow import FollowSettings
from orchestrator.platform.port import Platform

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class ActivityConfig:
    """What activities read from the settings; built by ``worker.activity_config`` only, so
    no default is declared here (``config.settings.Settings`` holds them)."""

    public_url: str
    webhook_secret: str
    follow: FollowSettings
    dataset_page_size: int
    # Largest actor input (compact JSON): a chained run's completed input is held to it too.
    max_input_bytes: int
    capacity_retry_seconds: float
    # Settling a run's usage after it ended (activities/platform.py settle_usage).
    usage_settle_seconds: float
    usage_settle_interval_seconds: float
    usage_settle_max_reads: int
    # Outbound callbacks (activities/delivery.py).
    callback_secret_key: str
    allow_insecure_callback_localhost: bool
    callback_retry_initial_seconds: float
    # Rows pushed to the callback (activities/row_delivery.py).
    row_batch_max_rows: int
    row_batch_max_bytes: int
    # Admission (activities/admission.py).
    account_limits_refresh_seconds: float
    account_max_concurrent_runs: int | None
    account_max_memory_mbytes: int | None
    admission_default_memory_mb: int


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
