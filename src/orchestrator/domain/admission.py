"""Admission of children to the platform account's capacity: the pure policy.

The account has a number of concurrent runs and of memory (MB) that every workspace shares.
A child is started only once it holds a *slot* (one run, its memory); until then it waits as
a *ticket* in its workspace's FIFO queue. Granting is round-robin across the workspaces that
have waiting tickets: each turn grants the head ticket of the next workspace (in rotation
order) that is under its own concurrency limit and whose head fits the free memory, and moves
that workspace to the back of the rotation. So a workspace with 100 waiting tickets delays a
workspace with one by at most one grant per other waiting workspace. Within a workspace the
order is FIFO; a head that does not fit the free memory blocks only its own workspace.

Trade-off: the state is plain data (it is the ``AdmissionWorkflow``'s state, carried through
continue-as-new), and every function mutates it in place and says what it did, so the
workflow stays a thin loop and everything here is tested without Temporal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: What a capacity error's type says was exhausted (apify's 402 error types).
CONCURRENCY_REFUSAL = "concurrent-runs-limit-exceeded"
MEMORY_REFUSAL = "actor-memory-limit-exceeded"


@dataclass
class Ticket:
    """A child waiting for a slot, and the master workflow to tell when it gets one."""

    child_id: str
    workspace_id: str
    memory_mb: int
    master_id: str
    #: Whether it was already marked ``queued`` in the database (done once, batched).
    marked: bool = False


@dataclass
class Slot:
    """A slot held by a child (granted, or adopted by the leak guard)."""

    workspace_id: str
    memory_mb: int
    #: Empty for a slot adopted from the database (a child of an old master).
    master_id: str = ""


@dataclass
class Capacity:
    """What the account lets *us* hold: runs and memory (MB)."""

    runs: int
    memory_mb: int


@dataclass
class AdmissionState:
    #: None until the first refresh: nothing is granted before the limits are known.
    capacity: Capacity | None = None
    held: dict[str, Slot] = field(default_factory=dict)
    #: Waiting tickets, FIFO per workspace.
    waiting: dict[str, list[Ticket]] = field(default_factory=dict)
    #: Round-robin order of the workspaces with waiting tickets (next first).
    rotation: list[str] = field(default_factory=list)
    #: Operators' per-workspace concurrency limits (absent = none).
    workspace_limits: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Grant:
    child_id: str
    master_id: str


def free_runs(state: AdmissionState) -> int:
    cap = state.capacity
    return 0 if cap is None else max(0, cap.runs - len(state.held))


def free_memory_mb(state: AdmissionState) -> int:
    cap = state.capacity
    used = sum(s.memory_mb for s in state.held.values())
    return 0 if cap is None else max(0, cap.memory_mb - used)


def held_by(state: AdmissionState, workspace_id: str) -> int:
    return sum(1 for s in state.held.values() if s.workspace_id == workspace_id)


def _waiting_ids(state: AdmissionState) -> dict[str, str]:
    return {t.child_id: ws for ws, q in state.waiting.items() for t in q}


def enqueue(state: AdmissionState, tickets: list[Ticket]) -> list[Grant]:
    """Add tickets at the back of their workspaces' queues (a workspace new to the rotation
    joins at its back). Idempotent: a ticket already waiting is not added twice (its master
    is updated); one already holding a slot is granted again (a restarted master asks
    again) and returned."""
    regrants: list[Grant] = []
    waiting = _waiting_ids(state)
    for ticket in tickets:
        slot = state.held.get(ticket.child_id)
        if slot is not None:
            slot.master_id = ticket.master_id
            regrants.append(Grant(ticket.child_id, ticket.master_id))
            continue
        if ticket.child_id in waiting:
            for queued in state.waiting[waiting[ticket.child_id]]:
                if queued.child_id == ticket.child_id:
                    queued.master_id = ticket.master_id
            continue
        state.waiting.setdefault(ticket.workspace_id, []).append(ticket)
        waiting[ticket.child_id] = ticket.workspace_id
        if ticket.workspace_id not in state.rotation:
            state.rotation.append(ticket.workspace_id)
    return regrants


def _under_limit(state: AdmissionState, workspace_id: str) -> bool:
    limit = state.workspace_limits.get(workspace_id)
    return limit is None or held_by(state, workspace_id) < limit


def grant(state: AdmissionState) -> list[Grant]:
    """Grant slots round-robin until no run slot is free or no head ticket can go."""
    granted: list[Grant] = []
    while free_runs(state) > 0:
        memory = free_memory_mb(state)
        chosen: str | None = None
        for ws in state.rotation:
            queue = state.waiting.get(ws)
            if queue and _under_limit(state, ws) and queue[0].memory_mb <= memory:
                chosen = ws
                break
        if chosen is None:
            break
        ticket = state.waiting[chosen].pop(0)
        state.held[ticket.child_id] = Slot(chosen, ticket.memory_mb, ticket.master_id)
        granted.append(Grant(ticket.child_id, ticket.master_id))
        state.rotation.remove(chosen)
        if state.waiting[chosen]:
            state.rotation.append(chosen)
        else:
            del state.waiting[chosen]
    return granted


def release(state: AdmissionState, child_ids: list[str]) -> int:
    """Free the slots of these children, or drop their waiting tickets; unknown ids are
    ignored. How many slots or tickets went."""
    gone = 0
    ids = set(child_ids)
    for cid in ids:
        if state.held.pop(cid, None) is not None:
            gone += 1
    for ws in list(state.waiting):
        queue = state.waiting[ws]
        kept = [t for t in queue if t.child_id not in ids]
        gone += len(queue) - len(kept)
        if kept:
            state.waiting[ws] = kept
        else:
            del state.waiting[ws]
            state.rotation.remove(ws)
    return gone


def refuse(state: AdmissionState, child_id: str, error_type: str | None) -> bool:
    """The platform refused a granted start for capacity (another user of the account holds
    the rest): the ticket goes back to the head of its workspace's queue, and the known
    capacity shrinks to what we hold now (runs for a concurrency refusal, memory for a
    memory one, both when the type says neither), so nothing more is tried before a
    release or the next refresh. False for a child that held no slot."""
    slot = state.held.pop(child_id, None)
    if slot is None:
        return False
    state.waiting.setdefault(slot.workspace_id, []).insert(
        0, Ticket(child_id, slot.workspace_id, slot.memory_mb, slot.master_id, marked=True)
    )
    if slot.workspace_id not in state.rotation:
        state.rotation.insert(0, slot.workspace_id)
    cap = state.capacity
    if cap is not None:
        if error_type != MEMORY_REFUSAL:
            cap.runs = min(cap.runs, len(state.held))
        if error_type != CONCURRENCY_REFUSAL:
            cap.memory_mb = min(cap.memory_mb, sum(s.memory_mb for s in state.held.values()))
    return True


def unmarked(state: AdmissionState) -> list[str]:
    """Waiting tickets not yet marked ``queued``; marks them (the caller writes them)."""
    ids: list[str] = []
    for queue in state.waiting.values():
        for ticket in queue:
            if not ticket.marked:
                ticket.marked = True
                ids.append(ticket.child_id)
    return ids


def queue_positions(state: AdmissionState) -> dict[str, int]:
    """Each waiting child's place (1 = next) in the order round-robin would grant them if
    every workspace could go: the k-th ticket of a workspace comes after k tickets of each
    other workspace, and one more of each workspace ahead of it in the rotation."""
    lengths = {ws: len(state.waiting.get(ws, [])) for ws in state.rotation}
    order = {ws: i for i, ws in enumerate(state.rotation)}
    positions: dict[str, int] = {}
    for ws in state.rotation:
        for k, ticket in enumerate(state.waiting.get(ws, [])):
            before = sum(
                min(n, k + (1 if order[other] < order[ws] else 0))
                for other, n in lengths.items()
                if other != ws
            )
            positions[ticket.child_id] = before + k + 1
    return positions


def capacity_for_us(
    max_runs: int,
    max_memory_mb: int,
    active_runs: int,
    active_memory_mb: int,
    our_runs: int,
    our_memory_mb: int,
) -> Capacity:
    """The account's maxima minus what others use (the platform's current use minus ours)."""
    others_runs = max(0, active_runs - our_runs)
    others_memory = max(0, active_memory_mb - our_memory_mb)
    return Capacity(max(0, max_runs - others_runs), max(0, max_memory_mb - others_memory))


def apply_refresh(
    state: AdmissionState,
    capacity: Capacity,
    workspace_limits: dict[str, int],
    stale: list[str],
    adopted: dict[str, Slot],
) -> None:
    """A refresh: new capacity and limits; slots of children terminal or gone in the database
    are released, and live children we did not hold are counted as held (leak guard)."""
    state.capacity = capacity
    state.workspace_limits = dict(workspace_limits)
    for cid in stale:
        state.held.pop(cid, None)
    waiting = _waiting_ids(state)
    for cid, slot in adopted.items():
        if cid not in state.held:
            if cid in waiting:  # it started after all (e.g. an old master): not waiting
                release(state, [cid])
            state.held[cid] = slot


@dataclass(frozen=True)
class WorkspaceLoad:
    workspace_id: str
    held: int
    waiting: int
    limit: int | None


@dataclass(frozen=True)
class Snapshot:
    """What the admission workflow's ``snapshot`` query answers."""

    known: bool
    capacity_runs: int
    capacity_memory_mb: int
    used_runs: int
    used_memory_mb: int
    free_runs: int
    free_memory_mb: int
    waiting: int
    workspaces: list[WorkspaceLoad]


def snapshot(state: AdmissionState) -> Snapshot:
    cap = state.capacity
    names = sorted(set(state.waiting) | {s.workspace_id for s in state.held.values()})
    return Snapshot(
        known=cap is not None,
        capacity_runs=cap.runs if cap else 0,
        capacity_memory_mb=cap.memory_mb if cap else 0,
        used_runs=len(state.held),
        used_memory_mb=sum(s.memory_mb for s in state.held.values()),
        free_runs=free_runs(state),
        free_memory_mb=free_memory_mb(state),
        waiting=sum(len(q) for q in state.waiting.values()),
        workspaces=[
            WorkspaceLoad(
                ws,
                held_by(state, ws),
                len(state.waiting.get(ws, [])),
                state.workspace_limits.get(ws),
            )
            for ws in names
        ],
    )
