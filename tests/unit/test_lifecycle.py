"""The roll-up rule and child transitions (DESIGN.md's lifecycle table)."""

from __future__ import annotations

import pytest

from orchestrator.domain.lifecycle import (
    ChildState,
    RunState,
    child_state_for_platform_terminal,
    child_transition_allowed,
    is_platform_terminal,
    roll_up,
)

C = ChildState


@pytest.mark.parametrize(
    ("children", "aborted", "expected"),
    [
        ([], False, RunState.QUEUED),
        ([C.PENDING, C.PENDING], False, RunState.QUEUED),
        ([C.SPAWNING, C.PENDING], False, RunState.SPAWNING),
        ([C.RUNNING, C.PENDING], False, RunState.SPAWNING),
        ([C.RUNNING, C.INGESTING], False, RunState.RUNNING),
        ([C.RUNNING, C.SUCCEEDED], False, RunState.RUNNING),
        ([C.RUNNING, C.FAILED], False, RunState.PARTIAL),
        ([C.RUNNING, C.TIMED_OUT], False, RunState.PARTIAL),
        ([C.SUCCEEDED, C.SUCCEEDED], False, RunState.SUCCEEDED),
        ([C.FAILED, C.FAILED], False, RunState.FAILED),
        ([C.SUCCEEDED, C.FAILED], False, RunState.PARTIAL),
        ([C.SUCCEEDED, C.TIMED_OUT], False, RunState.PARTIAL),
        ([C.TIMED_OUT, C.TIMED_OUT], False, RunState.TIMED_OUT),
        ([C.FAILED, C.TIMED_OUT], False, RunState.TIMED_OUT),
        ([C.ABORTED, C.SUCCEEDED], True, RunState.ABORTED),
        ([C.RUNNING, C.ABORTED], True, RunState.RUNNING),
        ([C.ABORTED, C.ABORTED], False, RunState.ABORTED),
    ],
)
def test_roll_up(children: list[ChildState], aborted: bool, expected: RunState) -> None:
    assert roll_up(children, aborted=aborted) is expected


def test_children_only_move_forward() -> None:
    assert child_transition_allowed(C.PENDING, C.SPAWNING)
    assert child_transition_allowed(C.SPAWNING, C.RUNNING)
    assert child_transition_allowed(C.RUNNING, C.FAILED)
    assert not child_transition_allowed(C.RUNNING, C.SPAWNING)
    assert not child_transition_allowed(C.RUNNING, C.RUNNING)
    assert not child_transition_allowed(C.SUCCEEDED, C.FAILED)
    assert not child_transition_allowed(C.FAILED, C.SUCCEEDED)


def test_platform_status_spellings() -> None:
    assert is_platform_terminal("TIMED-OUT")
    assert not is_platform_terminal("TIMED_OUT")  # the webhook event spelling is not a status
    assert not is_platform_terminal("TIMING-OUT")
    assert not is_platform_terminal("SOMETHING-NEW")
    assert child_state_for_platform_terminal("SUCCEEDED") is C.INGESTING
    assert child_state_for_platform_terminal("FAILED") is C.FAILED
    assert child_state_for_platform_terminal("TIMED-OUT") is C.FAILED
    assert child_state_for_platform_terminal("ABORTED") is C.ABORTED
