"""Connection to the Temporal service."""

from __future__ import annotations

from temporalio.client import Client

from orchestrator.config.settings import Settings


async def connect_temporal(settings: Settings) -> Client:
    return await Client.connect(settings.temporal_address, namespace=settings.temporal_namespace)
