"""Rows of runs that did not succeed are kept, once, against the emulator (issue 11,
point 6): a failed run and a run aborted by the caller end in their own state with
``partial: true`` and every row they pushed stored exactly once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from orchestrator.cli.devstack import DevStack
from tests.support.waiting import eventually

from .support import all_items, api_client, generator, request, submit, wait_terminal

pytestmark = pytest.mark.e2e


@pytest.fixture
def api(stack: DevStack) -> Iterator[httpx.Client]:
    with api_client(stack) as client:
        yield client


def stored_per_child(api: httpx.Client, run_id: str) -> Counter[str]:
    items = all_items(api, run_id)
    assert len({(i["childId"], i["itemIndex"]) for i in items}) == len(items), "a row twice"
    return Counter(i["childId"] for i in items)


def test_failed_and_aborted_children_keep_their_rows_once(
    api: httpx.Client, emulator: httpx.Client
) -> None:
    run_id = submit(
        api,
        request(
            generator(items=40, durationSecs=1, finalStatus="FAILED", failureMessage="crashed"),
            generator(items=30, durationSecs=1, hang=True),
        ),
    )

    def hanging_run_pushed_everything() -> bool:
        hanging = api.get(f"/runs/{run_id}").json()["children"][1]
        if hanging["state"] != "running":
            return False
        dataset = emulator.get(f"/v2/datasets/{hanging['datasetId']}").json()["data"]
        return bool(dataset["itemCount"] == 30)

    eventually(hanging_run_pushed_everything, description="the hanging run's 30 rows")
    eventually(lambda: api.get(f"/runs/{run_id}").json()["children"][0]["terminal"])
    assert api.post(f"/runs/{run_id}/abort").status_code == 202
    run = wait_terminal(api, run_id)
    assert run["state"] == "aborted"
    failed, aborted = run["children"]
    assert (failed["state"], failed["statusMessage"]) == ("failed", "crashed")
    assert (failed["itemsIngested"], failed["partial"]) == (40, True)
    assert (aborted["state"], aborted["platformStatus"]) == ("aborted", "ABORTED")
    assert (aborted["itemsIngested"], aborted["partial"]) == (30, True)
    assert stored_per_child(api, run_id) == {failed["id"]: 40, aborted["id"]: 30}
    assert run["itemsTotal"] == 70


def test_keep_partial_rows_false_stores_nothing_of_a_failed_run(api: httpx.Client) -> None:
    body = request(generator(items=20, durationSecs=1, finalStatus="FAILED"))
    run_id = submit(api, body | {"keepPartialRows": False})
    run = wait_terminal(api, run_id)
    (child,) = run["children"]
    assert child["state"] == "failed"
    assert (child["itemsIngested"], child["partial"]) == (0, False)
    assert all_items(api, run_id) == []
