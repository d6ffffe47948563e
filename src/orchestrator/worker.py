"""Composition root of the Temporal worker: builds clients, activities and the worker.

Activities are async and run on the worker's event loop; their blocking database calls run
on threads (``ActivityDeps.tx``), so a slow insert never stalls polling.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from temporalio.client import Client
from temporalio.worker import Worker

from orchestrator.activities.deps import ActivityConfig, ActivityDeps
from orchestrator.activities.ingest import IngestActivities
from orchestrator.activities.platform import PlatformActivities
from orchestrator.activities.records import RecordActivities
from orchestrator.config.bootstrap import prepare_database
from orchestrator.config.settings import Settings
from orchestrator.config.temporal import connect_temporal
from orchestrator.platform.apify import ApifyPlatform
from orchestrator.platform.port import Platform
from orchestrator.workflows.poller import PollerWorkflow
from orchestrator.workflows.scraper import ScraperOrchestrator

log = logging.getLogger(__name__)

WORKFLOWS = [ScraperOrchestrator, PollerWorkflow]


def activity_config(settings: Settings) -> ActivityConfig:
    return ActivityConfig(
        public_url=settings.public_url,
        webhook_secret=settings.webhook_secret.get_secret_value(),
        poll_interval_seconds=settings.poll_interval_seconds,
        default_timeout_grace_seconds=settings.default_timeout_grace_seconds,
        default_cap_seconds=settings.default_cap_seconds,
        dataset_page_size=settings.dataset_page_size,
    )


def build_platform(settings: Settings) -> Platform:
    return ApifyPlatform(settings.apify_api_url, settings.apify_token.get_secret_value())


def build_worker(client: Client, task_queue: str, deps: ActivityDeps) -> Worker:
    """A worker for every workflow and activity of the orchestrator."""
    platform = PlatformActivities(deps)
    ingest = IngestActivities(deps)
    records = RecordActivities(deps)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=[
            platform.start_actor_run,
            platform.poll_platform_run,
            platform.abort_platform_run,
            ingest.ingest_dataset,
            records.record_child_outcome,
            records.finalize_run,
        ],
    )


async def run_worker(settings: Settings) -> None:
    """Run the worker until SIGINT/SIGTERM."""
    engine = prepare_database(settings)
    client = await connect_temporal(settings)
    deps = ActivityDeps(
        engine=engine, platform=build_platform(settings), config=activity_config(settings)
    )
    worker = build_worker(client, settings.task_queue, deps)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info("worker polling task queue %r at %s", settings.task_queue, settings.temporal_address)
    async with worker:
        await stop.wait()
        log.info("worker shutting down")
    engine.dispose()
