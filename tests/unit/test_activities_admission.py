"""The admission activities and the admitted start, without a Temporal server:
``ActivityEnvironment``, a fake platform and a real database (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

from sqlalchemy import Engine
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.testing import ActivityEnvironment

from orchestrator.activities.admission import AdmissionActivities
from orchestrator.activities.deps import ActivityDeps
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries.workspaces import set_concurrency_limit
from orchestrator.domain.admission import Capacity, Slot
from orchestrator.domain.ids import admission_workflow_id
from orchestrator.domain.lifecycle import ChildState
from orchestrator.platform.port import StartOptions
from orchestrator.security.callback_secrets import new_nonce
from orchestrator.workflows.admission_types import (
    REQUEST_SLOTS_SIGNAL,
    MarkQueuedInput,
    RefreshInput,
    RequestSlotsInput,
    SlotRequest,
)
from orchestrator.workflows.types import StartChildInput

# db_url replaces tests/conftest.py's: PostgreSQL is this module's own database.
from tests.workflows.activity_support import (  # noqa: F401
    activities,
    child,
    db_url,
    store_request,
    worker_config,
)
from tests.workflows.fakes import FakePlatform, Script


class RecordingClient:
    """Stands in for the Temporal client: records the signal-with-start."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    async def start_workflow(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))


def admission(
    engine: Engine, platform: FakePlatform, client: RecordingClient | None = None, **cfg: Any
) -> AdmissionActivities:
    deps = ActivityDeps(engine=engine, platform=platform, config=worker_config(**cfg))
    return AdmissionActivities(deps, cast(Client, client or RecordingClient()))


def set_state(engine: Engine, cid: str, state: ChildState, **values: Any) -> None:
    with engine.begin() as conn:
        assert run_queries.transition_child(conn, cid, state, **values)


def kinds(engine: Engine, run_id: str) -> Counter[str]:
    with engine.connect() as conn:
        return Counter(e.kind for e in event_queries.list_events(conn, run_id, limit=1000))


async def test_request_slots_signal_with_starts_one_batch_of_tickets(engine: Engine) -> None:
    _, (big, plain, done, started) = store_request(engine, {"memoryMb": 4096}, {}, {}, {})
    set_state(engine, done, ChildState.FAILED)
    set_state(engine, started, ChildState.RUNNING, platform_run_id="r1", dataset_id="d1")
    client = RecordingClient()
    env = ActivityEnvironment()
    result = await env.run(
        admission(engine, FakePlatform(), client, admission_default_memory_mb=512).request_slots,
        RequestSlotsInput("run", [big, plain, done, started, "nobody"], "scrape/run"),
    )
    assert result.requested == 2 and sorted(result.ready) == sorted([done, started, "nobody"])
    ((args, kwargs),) = client.calls
    queue = env.info.task_queue
    assert kwargs["id"] == admission_workflow_id(queue) and kwargs["task_queue"] == queue
    assert kwargs["id_conflict_policy"] is WorkflowIDConflictPolicy.USE_EXISTING
    assert kwargs["start_signal"] == REQUEST_SLOTS_SIGNAL
    (request,) = kwargs["start_signal_args"]
    assert isinstance(request, SlotRequest)
    assert [(t.child_id, t.memory_mb, t.workspace_id) for t in request.tickets] == [
        (big, 4096, "ws_activities"),
        (plain, 512, "ws_activities"),
    ]
    assert args[1].refresh_seconds == worker_config().account_limits_refresh_seconds


async def test_mark_queued_moves_only_pending_children_once(engine: Engine) -> None:
    run_id, (waiting, spawning) = store_request(engine, {}, {})
    set_state(engine, spawning, ChildState.SPAWNING)
    act = admission(engine, FakePlatform()).mark_queued
    assert (await ActivityEnvironment().run(act, MarkQueuedInput([waiting, spawning]))).marked == 1
    assert (await ActivityEnvironment().run(act, MarkQueuedInput([waiting]))).marked == 0
    assert child(engine, waiting).state is ChildState.QUEUED
    assert child(engine, spawning).state is ChildState.SPAWNING
    with engine.connect() as conn:
        messages = [e.message for e in event_queries.list_events(conn, run_id, limit=100)]
    assert sum("waiting for a platform slot" in m for m in messages) == 1


async def test_an_admitted_start_refused_for_capacity_is_requeued_not_retried(
    engine: Engine,
) -> None:
    platform = FakePlatform()
    platform.max_runs = 0
    run_id, (cid,) = store_request(engine, {})
    start = activities(engine, platform).start_actor_run
    result = await ActivityEnvironment().run(start, StartChildInput(cid, admitted=True))
    assert result.refused == "concurrent-runs-limit-exceeded" and not result.started
    assert child(engine, cid).state is ChildState.QUEUED
    assert kinds(engine, run_id)["child.requeued"] == 1
    # Granted again, with room now: started once.
    platform.max_runs = 1
    again = await ActivityEnvironment().run(start, StartChildInput(cid, admitted=True))
    assert again.started and again.refused is None
    assert child(engine, cid).state is ChildState.RUNNING and len(platform.starts) == 1


async def test_a_refresh_reads_limits_overrides_and_runs_the_leak_guard(
    sqlite_engine: Engine,
) -> None:
    """On a database of its own: the leak guard reads every live child of the database."""
    engine = sqlite_engine
    platform = FakePlatform()
    platform.scripts["ultron~leadgen"] = Script(polls_to_finish=10**9)
    platform.max_runs, platform.max_memory_mb = 10, 20 * 1024
    platform.others_active = 3  # another user's runs (1 GB each in the fake)
    _, (ours, orphan, ended, queued) = store_request(engine, {"memoryMb": 2048}, {}, {}, {})
    for cid in (ours, orphan):
        run = await platform.start_run("ultron~leadgen", {}, StartOptions())
        set_state(engine, cid, ChildState.RUNNING, platform_run_id=run.id, dataset_id="d")
    set_state(engine, ended, ChildState.SUCCEEDED)
    with engine.begin() as conn:
        set_concurrency_limit(conn, "ws_activities", 2, new_nonce)
    refresh = admission(engine, platform).refresh_admission
    fresh = await ActivityEnvironment().run(
        refresh, RefreshInput(held=[ours, ended, queued, "gone"])
    )
    assert sorted(fresh.stale) == sorted([ended, "gone"])  # a queued child keeps its slot
    assert fresh.adopted == {orphan: Slot("ws_activities", 1024)}
    # Others: 5 runs active on the platform (1 GB each in the fake) minus our 2 (2 GB + the
    # 1 GB default) = 3 runs and 2 GB.
    assert fresh.capacity == Capacity(7, 18 * 1024)
    assert fresh.workspace_limits["ws_activities"] == 2
    overridden = admission(engine, platform, account_max_concurrent_runs=4).refresh_admission
    assert (await ActivityEnvironment().run(overridden, RefreshInput([]))).capacity.runs == 1
