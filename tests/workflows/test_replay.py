"""Determinism: recorded workflow histories replay against the current workflow code.

``histories/*.json`` were recorded from real runs (``python -m
tests.workflows.record_histories`` records them again). A change to live workflow code that
would break a running workflow fails here; such a change belongs behind
``workflow.patched()``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.service import RPCError
from temporalio.worker import Replayer

from orchestrator.domain.ids import (
    admission_workflow_id,
    child_id,
    orchestrator_workflow_id,
    poller_workflow_id,
)
from orchestrator.service.admission import refresh_admission
from orchestrator.worker import WORKFLOWS
from orchestrator.workflows.admission import AdmissionWorkflow
from tests.support.waiting import eventually_async
from tests.workflows.conftest import Harness
from tests.workflows.fakes import Script
from tests.workflows.support import (
    request,
    result_of,
    run_to_end,
    submit,
    transitions,
    wait_for_workflow,
)

HISTORIES = Path(__file__).parent / "histories"


async def histories_of(h: Harness, run_id: str, children: int) -> dict[str, WorkflowHistory]:
    ids = [orchestrator_workflow_id(run_id)] + [
        poller_workflow_id(child_id(run_id, i)) for i in range(children)
    ]
    return {wid: await h.env.client.get_workflow_handle(wid).fetch_history() for wid in ids}


async def record_scenarios(h: Harness) -> dict[str, WorkflowHistory]:
    """A success with a failed sibling and several polls, and an aborted request."""
    h.platform.scripts["ultron~leadgen"] = Script(items=12, polls_to_finish=2)
    h.platform.scripts["ultron~similarweb-bulk"] = Script(final_status="FAILED")
    run_id, _ = await run_to_end(
        h, request({"actor": "ultron-leadgen"}, {"actor": "ultron-similarweb-bulk"})
    )
    recorded = {
        f"partial-{kind}": history
        for kind, history in zip(
            ("master", "poller-0", "poller-1"),
            (await histories_of(h, run_id, 2)).values(),
            strict=True,
        )
    }
    h.platform.scripts["ultron~generator"] = Script(polls_to_finish=10**9)
    aborted = await submit(h, request({"actor": "ultron-generator"}))
    await wait_for_workflow(h, poller_workflow_id(child_id(aborted, 0)))
    from orchestrator.service.control import abort_request

    await abort_request(h.engine, h.env.client, aborted)
    await result_of(h, aborted)
    for kind, history in zip(
        ("master", "poller-0"), (await histories_of(h, aborted, 1)).values(), strict=True
    ):
        recorded[f"aborted-{kind}"] = history
    return recorded


async def record_chained(h: Harness) -> dict[str, WorkflowHistory]:
    """A chained request (issue 12): leads, then traffic for their domains, then a run
    skipped because its source gave no values."""
    h.platform.scripts["ultron~leadgen"] = Script(
        rows=[{"domain": "a.com"}, {"domain": "b.com"}, {"domain": "a.com"}]
    )
    h.platform.scripts["ultron~similarweb-bulk"] = Script(items=2)
    run_id, _ = await run_to_end(
        h,
        request(
            {"actor": "ultron-leadgen"},
            {
                "actor": "ultron-similarweb-bulk",
                "inputFrom": {"domains": {"run": 0, "field": "domain"}},
            },
            {"actor": "ultron-generator", "inputFrom": {"x": {"run": 1, "field": "missing"}}},
        ),
    )
    master = await h.env.client.get_workflow_handle(
        orchestrator_workflow_id(run_id)
    ).fetch_history()
    return {"chained-master": master}


async def record_admitted(h: Harness) -> dict[str, WorkflowHistory]:
    """Admission (issue 14): an account of one run, so the second child waits queued for
    the first one's slot, and the admission workflow that granted both."""
    h.platform.max_runs = 1
    # An admission workflow of an earlier scenario knows a larger account: it reads again.
    await refresh_admission(h.env.client, h.task_queue)

    async def capacity_of_one() -> bool:
        handle = h.env.client.get_workflow_handle(admission_workflow_id(h.task_queue))
        try:
            snap = await handle.query(AdmissionWorkflow.snapshot)
        except RPCError:
            return True  # none yet: it reads the limits when it starts
        return snap.capacity_runs == 1

    await eventually_async(capacity_of_one, description="the account of one run known")
    h.platform.scripts["ultron~leadgen"] = Script(items=2, polls_to_finish=2)
    run_id, _ = await run_to_end(
        h,
        request(
            {"actor": "ultron-leadgen", "input": {"brief": "b0"}},
            {"actor": "ultron-leadgen", "input": {"brief": "b1"}},
        ),
    )
    assert "queued" in transitions(h, run_id)  # the history covers a wait for a slot
    master, *_ = (await histories_of(h, run_id, 2)).values()
    admission = await h.env.client.get_workflow_handle(
        admission_workflow_id(h.task_queue)
    ).fetch_history()
    return {"admitted-master": master, "admitted-admission": admission}


async def record_all(h: Harness) -> dict[str, WorkflowHistory]:
    """Every scenario's histories, by name (what ``record_histories`` writes). The first
    scenarios are recorded twice under two names: ``partial-*`` and ``aborted-*`` hold what
    the first poller type did, ``v2-*`` what ``PollerWorkflowV2`` does (issue 15)."""
    scenarios = await record_scenarios(h)
    v2 = {f"v2-{name}": history for name, history in scenarios.items()}
    return scenarios | v2 | await record_chained(h) | await record_admitted(h)


async def test_fresh_histories_replay(harness: Harness) -> None:
    recorded = await record_all(harness)
    replayer = Replayer(workflows=WORKFLOWS)
    for name, history in recorded.items():
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{name}: {result.replay_failure}"


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_recorded_histories_replay(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    await Replayer(workflows=WORKFLOWS).replay_workflow(history)
