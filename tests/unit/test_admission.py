"""The admission policy (domain/admission.py): grants, fairness, releases, refusals."""

from __future__ import annotations

from orchestrator.domain.admission import (
    CONCURRENCY_REFUSAL,
    MEMORY_REFUSAL,
    AdmissionState,
    Capacity,
    Grant,
    Slot,
    Ticket,
    apply_refresh,
    capacity_for_us,
    enqueue,
    free_runs,
    grant,
    queue_positions,
    refuse,
    release,
    snapshot,
    unmarked,
)


def tickets(ws: str, n: int, *, memory: int = 1024, start: int = 0) -> list[Ticket]:
    return [Ticket(f"{ws}.{i}", ws, memory, f"master-{ws}") for i in range(start, start + n)]


def state(runs: int = 2, memory: int = 1_000_000) -> AdmissionState:
    return AdmissionState(capacity=Capacity(runs, memory))


def ids(grants: list[Grant]) -> list[str]:
    return [g.child_id for g in grants]


def test_nothing_is_granted_before_the_capacity_is_known() -> None:
    s = AdmissionState()
    enqueue(s, tickets("a", 3))
    assert grant(s) == []
    assert free_runs(s) == 0


def test_grants_stop_when_no_run_slot_is_free() -> None:
    s = state(runs=2)
    enqueue(s, tickets("a", 5))
    assert ids(grant(s)) == ["a.0", "a.1"]
    assert grant(s) == []
    assert len(s.held) == 2 and len(s.waiting["a"]) == 3


def test_a_release_frees_a_slot_for_the_next_ticket_in_fifo_order() -> None:
    s = state(runs=2)
    enqueue(s, tickets("a", 4))
    grant(s)
    assert release(s, ["a.0"]) == 1
    assert ids(grant(s)) == ["a.2"]


def test_a_workspace_with_one_ticket_waits_at_most_one_slot_behind_a_burst_of_100() -> None:
    """The issue's claim: A holds 100 waiting tickets, B asks for one after them."""
    s = state(runs=1)
    enqueue(s, tickets("a", 100))
    assert ids(grant(s)) == ["a.0"]
    enqueue(s, tickets("b", 1))
    order: list[str] = []
    for _ in range(3):  # three slot turns: each frees the slot just granted
        release(s, [next(iter(s.held))])
        order += ids(grant(s))
    assert order.index("b.0") <= 1
    assert order == ["a.1", "b.0", "a.2"]


def test_round_robin_alternates_between_workspaces_with_waiting_tickets() -> None:
    s = state(runs=6)
    enqueue(s, tickets("a", 10) + tickets("b", 2) + tickets("c", 1))
    assert ids(grant(s)) == ["a.0", "b.0", "c.0", "a.1", "b.1", "a.2"]
    assert s.rotation == ["a"]


def test_a_workspace_at_its_own_limit_is_passed_over() -> None:
    s = state(runs=4)
    s.workspace_limits = {"a": 1}
    enqueue(s, tickets("a", 3) + tickets("b", 3))
    assert ids(grant(s)) == ["a.0", "b.0", "b.1", "b.2"]
    release(s, ["a.0"])
    assert ids(grant(s)) == ["a.1"]


def test_a_head_that_does_not_fit_the_free_memory_blocks_only_its_workspace() -> None:
    s = state(runs=10, memory=4096)
    enqueue(s, tickets("big", 2, memory=4096) + tickets("small", 3, memory=1024))
    assert ids(grant(s)) == ["big.0"]  # all memory taken
    release(s, ["big.0"])
    s.held["other"] = Slot("x", 2048)
    assert ids(grant(s)) == ["small.0", "small.1"]  # big.1 (4096) does not fit in 2048


def test_enqueue_is_idempotent_and_a_held_child_asked_again_is_granted_again() -> None:
    s = state(runs=1)
    enqueue(s, tickets("a", 2))
    granted = grant(s)
    again = enqueue(s, [Ticket("a.0", "a", 1024, "master-new"), *tickets("a", 1, start=1)])
    assert ids(again) == ["a.0"] and again[0].master_id == "master-new"
    assert [t.child_id for t in s.waiting["a"]] == ["a.1"]
    assert s.held["a.0"].master_id == "master-new" and ids(granted) == ["a.0"]


def test_a_release_of_a_waiting_ticket_removes_it_and_unknown_ids_are_ignored() -> None:
    s = state(runs=1)
    enqueue(s, tickets("a", 2) + tickets("b", 1))
    grant(s)
    assert release(s, ["a.1", "b.0", "nobody"]) == 2
    assert s.waiting == {} and s.rotation == []
    assert snapshot(s).waiting == 0 and snapshot(s).used_runs == 1


def test_a_concurrency_refusal_requeues_at_the_head_and_shrinks_runs_to_what_is_held() -> None:
    s = state(runs=4)
    enqueue(s, tickets("a", 5))
    grant(s)
    assert refuse(s, "a.3", CONCURRENCY_REFUSAL)
    assert s.capacity == Capacity(3, 1_000_000)
    assert [t.child_id for t in s.waiting["a"]] == ["a.3", "a.4"]
    assert grant(s) == []  # no storm: nothing is tried until a release or a refresh
    release(s, ["a.0"])
    assert ids(grant(s)) == ["a.3"]
    assert not refuse(s, "never-held", CONCURRENCY_REFUSAL)


def test_a_memory_refusal_shrinks_memory_not_runs() -> None:
    s = state(runs=4, memory=8192)
    enqueue(s, tickets("a", 3))
    grant(s)
    refuse(s, "a.2", MEMORY_REFUSAL)
    assert s.capacity == Capacity(4, 2048)
    assert grant(s) == []


def test_queue_positions_follow_the_round_robin_order() -> None:
    s = state(runs=0)
    enqueue(s, tickets("a", 3) + tickets("b", 1))
    assert queue_positions(s) == {"a.0": 1, "b.0": 2, "a.1": 3, "a.2": 4}
    # They are what grant would do, one slot at a time.
    s.capacity = Capacity(4, 1_000_000)
    assert ids(grant(s)) == ["a.0", "b.0", "a.1", "a.2"]


def test_tickets_are_marked_queued_once() -> None:
    s = state(runs=1)
    enqueue(s, tickets("a", 3))
    grant(s)
    assert unmarked(s) == ["a.1", "a.2"]
    assert unmarked(s) == []


def test_capacity_for_us_subtracts_only_what_others_use() -> None:
    # The account: 10 runs, 32 GB; 7 active of which 4 are ours.
    assert capacity_for_us(10, 32768, 7, 7 * 1024, 4, 4 * 1024) == Capacity(7, 29696)
    # Ours not yet visible on the platform: others never count below zero.
    assert capacity_for_us(10, 32768, 0, 0, 3, 3072) == Capacity(10, 32768)
    assert capacity_for_us(2, 1024, 9, 9216, 0, 0) == Capacity(0, 0)


def test_a_refresh_releases_stale_slots_and_adopts_live_children_it_did_not_hold() -> None:
    s = state(runs=1)
    enqueue(s, tickets("a", 2))
    grant(s)
    apply_refresh(
        s,
        Capacity(5, 10_000),
        {"a": 3},
        stale=["a.0"],
        adopted={"old.0": Slot("b", 512), "a.1": Slot("a", 1024)},
    )
    assert set(s.held) == {"old.0", "a.1"}
    assert s.waiting == {}  # a.1 had started after all (an old master): not waiting
    assert s.capacity == Capacity(5, 10_000) and s.workspace_limits == {"a": 3}
    snap = snapshot(s)
    assert (snap.used_runs, snap.free_runs, snap.used_memory_mb) == (2, 3, 1536)
    assert [(w.workspace_id, w.held, w.limit) for w in snap.workspaces] == [
        ("a", 1, 3),
        ("b", 1, None),
    ]
