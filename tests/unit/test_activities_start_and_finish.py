"""Ending a child in one activity, and starting its poller from the start activity:
``finish_child``, ``look_and_finish`` and ``start_actor_run(poller_for=…)`` under
``ActivityEnvironment``, a fake platform, a fake Temporal client, SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from sqlalchemy import Engine, func, select, update
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from orchestrator.activities.deps import ActivityDeps
from orchestrator.activities.finish import FinishActivities
from orchestrator.activities.ingest import IngestActivities
from orchestrator.activities.platform import PlatformActivities
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.schema import scrape_items, scrape_runs
from orchestrator.domain.ids import admission_workflow_id, poller_workflow_id
from orchestrator.domain.lifecycle import ChildState
from orchestrator.platform.port import StartOptions
from orchestrator.workflows.admission_types import RELEASE_SLOTS_SIGNAL
from orchestrator.workflows.poller_start import POLLER_WORKFLOW_V2
from orchestrator.workflows.types import (
    CHILD_FINISHED_SIGNAL,
    FinishChildInput,
    LookInput,
    PollerInput,
    PollInput,
    StartChildInput,
)

# db_url replaces tests/conftest.py's: PostgreSQL is this module's own database.
from tests.workflows.activity_support import (  # noqa: F401
    child,
    db_url,
    store_request,
    worker_config,
)
from tests.workflows.fakes import FakePlatform, Script

MASTER = "scrape/master-of-test"


class NotFound(Exception):
    pass


@dataclass
class FakeHandle:
    client: FakeClient
    workflow_id: str

    async def signal(self, signal: str, arg: Any) -> None:
        if self.workflow_id in self.client.missing:
            raise NotFound(self.workflow_id)
        self.client.signals.append((self.workflow_id, signal, arg))


@dataclass
class FakeClient:
    """What the activities use of ``temporalio.client.Client``: signals and starts."""

    missing: set[str] = field(default_factory=set)
    signals: list[tuple[str, str, Any]] = field(default_factory=list)
    starts: list[tuple[str, Any, dict[str, Any]]] = field(default_factory=list)

    def get_workflow_handle(self, workflow_id: str) -> FakeHandle:
        return FakeHandle(self, workflow_id)

    async def start_workflow(self, workflow: str, arg: Any, **kwargs: Any) -> None:
        self.starts.append((workflow, arg, kwargs))

    def signalled(self, signal: str) -> list[str]:
        return [wid for wid, name, _ in self.signals if name == signal]


def build(
    engine: Engine, platform: FakePlatform, client: FakeClient
) -> tuple[FinishActivities, PlatformActivities]:
    deps = ActivityDeps(engine=engine, platform=platform, config=worker_config())
    temporal = cast(Client, client)
    acts = PlatformActivities(deps, temporal)
    return FinishActivities(deps, IngestActivities(deps), acts, temporal), acts


async def ended_child(engine: Engine, platform: FakePlatform, script: Script) -> tuple[str, str]:
    """A child whose platform run has ended (as the poll saw it): run id and child id."""
    platform.scripts["ultron~leadgen"] = script
    run_id, (cid,) = store_request(engine, {})
    run = await platform.start_run("ultron~leadgen", {}, StartOptions())
    platform.runs[run.id].reads = script.polls_to_finish  # the platform says it ended
    with engine.begin() as conn:
        run_queries.transition_child(
            conn, cid, ChildState.RUNNING, platform_run_id=run.id, dataset_id=run.dataset_id
        )
        run_queries.transition_child(conn, cid, ChildState.INGESTING)
    return run_id, cid


def stored_rows(engine: Engine, cid: str) -> int:
    with engine.connect() as conn:
        found = conn.execute(
            select(func.count()).select_from(scrape_items).where(scrape_items.c.child_id == cid)
        ).scalar_one()
    return int(found)


def finish_input(engine: Engine, cid: str, **overrides: Any) -> FinishChildInput:
    dataset = child(engine, cid).dataset_id
    assert dataset is not None
    return FinishChildInput(
        **({"child_id": cid, "dataset_id": dataset, "parent_workflow_id": MASTER} | overrides)
    )


async def test_finishing_releases_ingests_settles_and_tells_the_master(engine: Engine) -> None:
    platform, client = FakePlatform(), FakeClient()
    finish, _ = build(engine, platform, client)
    _, cid = await ended_child(engine, platform, Script(items=12))
    result = await ActivityEnvironment().run(finish.finish_child, finish_input(engine, cid))
    assert (result.state, result.items) == ("succeeded", 12)
    assert result.usage_settled and result.told_master and not result.push_rows
    recorded = child(engine, cid)
    assert recorded.state is ChildState.SUCCEEDED
    assert recorded.usage_settled_at is not None
    assert stored_rows(engine, cid) == 12
    assert client.signalled(RELEASE_SLOTS_SIGNAL) == [admission_workflow_id("test")]
    (told,) = [arg for wid, name, arg in client.signals if name == CHILD_FINISHED_SIGNAL]
    assert (told.child_id, told.state) == (cid, "succeeded")
    # A retry (the answer was lost): no row twice, the same answer, the master told again
    # (its ``child_finished`` is idempotent).
    again = await ActivityEnvironment().run(finish.finish_child, finish_input(engine, cid))
    assert (again.state, again.items, again.told_master) == ("succeeded", 12, True)
    assert stored_rows(engine, cid) == 12


async def test_the_slot_goes_back_even_when_the_ingest_fails(engine: Engine) -> None:
    # The release is sent beside the ingest, not before it: a failing page must not lose it.
    platform, client = FakePlatform(), FakeClient()
    finish, _ = build(engine, platform, client)
    _, cid = await ended_child(engine, platform, Script(items=12, failing_page_offsets={0}))
    with pytest.raises(ApplicationError, match="dataset page at 0 failed"):
        await ActivityEnvironment().run(finish.finish_child, finish_input(engine, cid))
    assert client.signalled(RELEASE_SLOTS_SIGNAL) == [admission_workflow_id("test")]
    assert stored_rows(engine, cid) == 0
    result = await ActivityEnvironment().run(finish.finish_child, finish_input(engine, cid))
    assert (result.state, result.items) == ("succeeded", 12)
    assert stored_rows(engine, cid) == 12


async def test_a_request_that_pushes_rows_leaves_telling_the_master_to_the_poller(
    engine: Engine,
) -> None:
    platform, client = FakePlatform(), FakeClient()
    finish, _ = build(engine, platform, client)
    run_id, cid = await ended_child(engine, platform, Script(items=3))
    with engine.begin() as conn:
        conn.execute(
            update(scrape_runs).where(scrape_runs.c.id == run_id).values(deliver_rows="callback")
        )
    result = await ActivityEnvironment().run(finish.finish_child, finish_input(engine, cid))
    assert result.push_rows and not result.told_master
    assert client.signalled(CHILD_FINISHED_SIGNAL) == []


async def test_partial_rows_end_the_child_in_its_final_state(engine: Engine) -> None:
    platform, client = FakePlatform(), FakeClient()
    finish, _ = build(engine, platform, client)
    _, cid = await ended_child(engine, platform, Script(items=4, final_status="FAILED"))
    params = finish_input(engine, cid, final_state="failed", final_message="actor crashed")
    result = await ActivityEnvironment().run(finish.finish_child, params)
    assert (result.state, result.items) == ("failed", 4)
    recorded = child(engine, cid)
    assert recorded.state is ChildState.FAILED
    assert recorded.status_message == "actor crashed"


async def test_no_admission_workflow_and_no_master_change_nothing(engine: Engine) -> None:
    """Nothing held (no admission workflow), or the master gone: the child still ends, and
    the poller is told the master was not, so it says it itself (and the reconciler covers
    a master that is really gone)."""
    platform = FakePlatform()
    client = FakeClient(missing={admission_workflow_id("test"), MASTER})
    finish, _ = build(engine, platform, client)
    _, cid = await ended_child(engine, platform, Script(items=1))
    result = await ActivityEnvironment().run(finish.finish_child, finish_input(engine, cid))
    assert result.state == "succeeded" and not result.told_master
    assert client.signals == []


async def test_the_start_starts_the_poller_once_the_run_is_known(engine: Engine) -> None:
    platform, client = FakePlatform(), FakeClient()
    platform.scripts["ultron~leadgen"] = Script(items=2)
    _, acts = build(engine, platform, client)
    run_id, (cid,) = store_request(engine, {})
    params = StartChildInput(child_id=cid, admitted=True, poller_for=MASTER)
    started = await ActivityEnvironment().run(acts.start_actor_run, params)
    assert started.started and started.platform_run_id is not None
    ((workflow, poller, options),) = client.starts
    assert workflow == POLLER_WORKFLOW_V2
    assert options["id"] == poller_workflow_id(cid) and options["task_queue"] == "test"
    assert isinstance(poller, PollerInput)
    assert (poller.run_id, poller.child_id, poller.parent_workflow_id) == (run_id, cid, MASTER)
    assert poller.platform_run_id == started.platform_run_id
    # A retry after the start (the answer was lost): no second platform run, and the poller
    # asked for again, which the conflict policy answers with the running one.
    again = await ActivityEnvironment().run(acts.start_actor_run, params)
    assert again.platform_run_id == started.platform_run_id
    assert len(platform.starts) == 1 and len(client.starts) == 2
    assert client.starts[1][2]["id_conflict_policy"] == client.starts[0][2]["id_conflict_policy"]


@pytest.mark.parametrize("state", [ChildState.FAILED, ChildState.ABORTED])
async def test_no_poller_for_a_child_that_did_not_start(engine: Engine, state: ChildState) -> None:
    platform, client = FakePlatform(), FakeClient()
    _, acts = build(engine, platform, client)
    _, (cid,) = store_request(engine, {})
    with engine.begin() as conn:
        run_queries.transition_child(conn, cid, state, status_message="ended before its start")
    params = StartChildInput(child_id=cid, admitted=True, poller_for=MASTER)
    started = await ActivityEnvironment().run(acts.start_actor_run, params)
    assert not started.started and client.starts == [] and platform.starts == []


class RacedPlatform(FakePlatform):
    """A platform on which another attempt of the same start (given up on by Temporal but
    still running) recorded its run while this one's start was in flight."""

    def __init__(self, engine: Engine, cid: str) -> None:
        super().__init__()
        self.engine, self.cid = engine, cid
        self.first: str | None = None

    async def start_run(self, *args: Any, **kwargs: Any) -> Any:
        if self.first is None:
            first = await super().start_run(*args, **kwargs)
            self.first = first.id
            with self.engine.begin() as conn:
                run_queries.transition_child(
                    conn,
                    self.cid,
                    ChildState.RUNNING,
                    platform_run_id=first.id,
                    dataset_id=first.dataset_id,
                )
        return await super().start_run(*args, **kwargs)


async def test_a_second_run_of_a_raced_start_is_aborted(engine: Engine) -> None:
    _, (cid,) = store_request(engine, {})
    platform, client = RacedPlatform(engine, cid), FakeClient()
    platform.scripts["ultron~leadgen"] = Script(items=2)
    _, acts = build(engine, platform, client)
    params = StartChildInput(child_id=cid, admitted=True, poller_for=MASTER)
    started = await ActivityEnvironment().run(acts.start_actor_run, params)
    assert platform.first is not None and started.platform_run_id == platform.first
    (second,) = [rid for rid in platform.runs if rid != platform.first]
    assert platform.runs[second].aborted and not platform.runs[platform.first].aborted
    assert child(engine, cid).platform_run_id == platform.first
    (poller,) = [arg for _, arg, _ in client.starts]
    assert poller.platform_run_id == platform.first


async def test_a_look_ends_the_child_only_once_the_run_is_over(engine: Engine) -> None:
    platform, client = FakePlatform(), FakeClient()
    finish, _ = build(engine, platform, client)
    platform.scripts["ultron~leadgen"] = Script(items=5, polls_to_finish=2)
    _, (cid,) = store_request(engine, {})
    run = await platform.start_run("ultron~leadgen", {}, StartOptions())
    with engine.begin() as conn:
        run_queries.transition_child(
            conn, cid, ChildState.RUNNING, platform_run_id=run.id, dataset_id=run.dataset_id
        )
    look = LookInput(
        poll=PollInput(child_id=cid, platform_run_id=run.id),
        dataset_id=run.dataset_id,
        parent_workflow_id=MASTER,
    )
    first = await ActivityEnvironment().run(finish.look_and_finish, look)
    assert not first.poll.terminal and first.finished is None
    assert child(engine, cid).state is ChildState.RUNNING and client.signals == []
    second = await ActivityEnvironment().run(finish.look_and_finish, look)
    assert second.poll.terminal and second.finished is not None
    assert (second.finished.state, second.finished.items) == ("succeeded", 5)
    assert second.finished.told_master and stored_rows(engine, cid) == 5
