"""Connection to the Temporal service."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.client import Client, Interceptor
from temporalio.runtime import Runtime

from orchestrator.config.settings import Settings


async def connect_temporal(
    settings: Settings,
    *,
    runtime: Runtime | None = None,
    interceptors: Sequence[Interceptor] = (),
) -> Client:
    """``runtime``: the process's Temporal runtime (``observability.exposition
    .temporal_runtime``, the SDK's metrics); ``interceptors``: tracing
    (``observability.tracing``). Both built once per process by its composition root."""
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        runtime=runtime,
        interceptors=interceptors,
    )
