"""Composition root of the Temporal worker: builds clients, activities and the worker.

Activities are async and run on the worker's event loop; their blocking database calls run
on threads (``ActivityDeps.tx``), so a slow insert never stalls polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from datetime import timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)
from temporalio.worker import Worker

from orchestrator.activities.admission import AdmissionActivities
from orchestrator.activities.delivery import DeliveryActivities
from orchestrator.activities.deps import ActivityConfig, ActivityDeps
from orchestrator.activities.finish import FinishActivities
from orchestrator.activities.ingest import IngestActivities
from orchestrator.activities.platform import PlatformActivities
from orchestrator.activities.reconcile import ReconcileActivities
from orchestrator.activities.records import RecordActivities
from orchestrator.activities.row_delivery import RowDeliveryActivities
from orchestrator.activities.steps import StepActivities
from orchestrator.config.bootstrap import prepare_database
from orchestrator.config.settings import Settings
from orchestrator.config.temporal import connect_temporal
from orchestrator.observability import metrics
from orchestrator.observability.exposition import (
    serve_worker_metrics,
    temporal_runtime,
    worker_registry,
)
from orchestrator.observability.tracing import tracing_interceptors
from orchestrator.platform.apify import ApifyPlatform
from orchestrator.platform.port import Platform
from orchestrator.platform.rate_limits import RateLimits, RetryRules
from orchestrator.service.reconcile import Reconciler
from orchestrator.workflows.admission import AdmissionWorkflow
from orchestrator.workflows.poller import PollerWorkflow, PollerWorkflowV2
from orchestrator.workflows.reconciler import (
    RECONCILE_SCHEDULE_ID,
    RECONCILER_WORKFLOW,
    ReconcilerWorkflow,
)
from orchestrator.workflows.row_delivery import RowDeliveryWorkflow
from orchestrator.workflows.scraper import ScraperOrchestrator

log = logging.getLogger(__name__)

#: How long a thread may hold the GIL while another waits for it (Python's default: 5 ms).
#: The ingest's database thread waits on PostgreSQL with the GIL released and needs it back
#: after every 128 KiB of a COPY stream and every reply, while the event loop downloads the
#: next pages; at 5 ms each return could leave PostgreSQL idle for want of input. Measured in
#: the stack, interleaved passes (docs/BENCHMARKS.md): 1M rows 99-113k -> 104-115k rows/s.
GIL_SWITCH_INTERVAL_SECONDS = 0.0005

WORKFLOWS = [
    ScraperOrchestrator,
    PollerWorkflow,
    PollerWorkflowV2,
    ReconcilerWorkflow,
    RowDeliveryWorkflow,
    AdmissionWorkflow,
]


def activity_config(settings: Settings) -> ActivityConfig:
    return ActivityConfig(
        public_url=settings.public_url,
        webhook_secret=settings.secret("webhook_secret"),
        follow=settings.follow_settings(),
        dataset_page_size=settings.dataset_page_size,
        max_input_bytes=settings.max_input_bytes,
        capacity_retry_seconds=settings.capacity_retry_seconds,
        usage_settle_seconds=settings.usage_settle_seconds,
        usage_settle_interval_seconds=settings.usage_settle_interval_seconds,
        usage_settle_max_reads=settings.usage_settle_max_reads,
        callback_secret_key=settings.secret("callback_secret_key"),
        allow_insecure_callback_localhost=settings.allow_insecure_callback_localhost,
        callback_retry_initial_seconds=settings.callback_retry_initial_seconds,
        row_batch_max_rows=settings.row_batch_max_rows,
        row_batch_max_bytes=settings.row_batch_max_bytes,
        account_limits_refresh_seconds=settings.account_limits_refresh_seconds,
        account_max_concurrent_runs=settings.account_max_concurrent_runs,
        account_max_memory_mbytes=settings.account_max_memory_mbytes,
        admission_default_memory_mb=settings.admission_default_memory_mb,
    )


def build_platform(settings: Settings) -> Platform:
    return ApifyPlatform(
        settings.apify_api_url,
        settings.secret("apify_token"),
        start_timeout=timedelta(seconds=settings.platform_start_timeout_seconds),
        rate_limits=RateLimits(
            per_resource=settings.platform_rate_limit_per_resource,
            run_starts=settings.platform_rate_limit_run_starts,
            overall=settings.platform_rate_limit_overall,
        ),
        retry=RetryRules(
            max_attempts=settings.platform_max_attempts,
            backoff_initial_seconds=settings.platform_backoff_initial_seconds,
            retry_after_max_seconds=settings.platform_retry_after_max_seconds,
        ),
        observe=metrics.observe_platform_call,
    )


def build_worker(client: Client, task_queue: str, deps: ActivityDeps) -> Worker:
    """A worker for every workflow and activity of the orchestrator."""
    platform = PlatformActivities(deps, client)
    ingest = IngestActivities(deps)
    finish = FinishActivities(deps, ingest, platform, client)
    records = RecordActivities(deps)
    delivery = DeliveryActivities(deps)
    steps = StepActivities(deps)
    rows = RowDeliveryActivities(deps)
    # Admission asks for slots by signal-with-start: it needs the client, as the reconciler.
    admission = AdmissionActivities(deps, client)
    reconciler = ReconcileActivities(
        Reconciler(deps.engine, client, task_queue, deps.config.follow)
    )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        # Activities are async and mostly wait on I/O (long polls, pages): many can share a
        # worker.
        max_concurrent_activities=500,
        activities=[
            platform.start_actor_run,
            platform.poll_platform_run,
            platform.abort_child,
            platform.time_out_child,
            platform.stop_child,
            platform.settle_usage,
            ingest.ingest_dataset,
            finish.finish_child,
            finish.look_and_finish,
            records.record_child_outcome,
            records.finalize_run,
            steps.build_step_input,
            delivery.deliver_callback,
            rows.push_row_batch,
            reconciler.reconcile_drift,
            admission.request_slots,
            admission.mark_queued,
            admission.refresh_admission,
        ],
    )


async def ensure_reconcile_schedule(client: Client, task_queue: str, every: timedelta) -> None:
    """Create the reconciler's schedule unless it exists (every worker calls this)."""
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            RECONCILER_WORKFLOW, id="orchestrator-reconcile", task_queue=task_queue
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )
    with contextlib.suppress(ScheduleAlreadyRunningError):
        await client.create_schedule(RECONCILE_SCHEDULE_ID, schedule)


async def run_worker(settings: Settings) -> None:
    """Run the worker until SIGINT/SIGTERM."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_SECONDS)
    # First: wrong settings fail before migrating.
    client = await connect_temporal(
        settings,
        runtime=temporal_runtime(settings),
        interceptors=tracing_interceptors(settings, "orchestrator-worker"),
    )
    engine = prepare_database(settings)
    stop_metrics = serve_worker_metrics(settings, worker_registry())
    deps = ActivityDeps(
        engine=engine, platform=build_platform(settings), config=activity_config(settings)
    )
    worker = build_worker(client, settings.task_queue, deps)
    await ensure_reconcile_schedule(
        client, settings.task_queue, timedelta(seconds=settings.reconcile_interval_seconds)
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info("worker polling task queue %r at %s", settings.task_queue, settings.temporal_address)
    async with worker:
        await stop.wait()
        log.info("worker shutting down")
    if stop_metrics is not None:
        stop_metrics()
    engine.dispose()
