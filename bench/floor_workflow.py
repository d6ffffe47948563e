"""The engine's floor under the fan-out: the least one child can cost in this design.

A child is followed by a workflow of its own (``PollerWorkflow``, docs/DESIGN.md), started by
the client (as the start activity starts each poller), which looks at the platform at least
once (an activity) and is woken by the run's webhook (a signal). ``FloorChild`` is exactly
that and nothing else: no database, no platform, an activity that returns its argument. Run
on the same Temporal server and machine as the orchestrator, N of them say what N children
cost the engine and the Python SDK alone, so the fan-out scenario can report the
orchestrator against it (bench/fanout.py). This module imports only ``temporalio``: the
workflow sandbox loads it as it loads ours.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

FLOOR_WORKFLOW = "BenchFloorChild"
FLOOR_SIGNAL = "platform_signal"


@activity.defn(name="bench_floor_look")
async def floor_look(child: str) -> str:
    """The look at the platform, minus the platform."""
    return child


@workflow.defn(name=FLOOR_WORKFLOW)
class FloorChild:
    def __init__(self) -> None:
        self._signalled = False

    @workflow.signal(name=FLOOR_SIGNAL)
    def platform_signal(self) -> None:
        self._signalled = True

    @workflow.run
    async def run(self, child: str) -> str:
        await workflow.execute_activity(
            floor_look, child, start_to_close_timeout=timedelta(seconds=60)
        )
        await workflow.wait_condition(lambda: self._signalled)
        return child
