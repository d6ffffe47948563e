"""A test's Temporal worker, shut down with a time limit.

``async with worker`` waits for the worker's shutdown without end. One CI run (stop 25) hung
for its whole 90 minutes at the end of an admission test, and the admission tests' worker
shutdowns hung here about once in 250: every Python task of the worker was done and
``Worker.run`` waited on the SDK core's ``finalize_shutdown`` (a Rust future) for ever. A
worker here serves only its test's own task queue, so one that will not stop is abandoned
after ``SHUTDOWN_LIMIT_SECONDS`` with a ``WorkerShutdownHung`` warning carrying every asyncio
task's chain of awaits (shown in the run's warnings summary). An abandoned worker's run task
ends when the session's loop cancels it (the SDK swallows a cancel of that final step).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from temporalio.worker import Worker

# A normal shutdown takes well under a second (activities are cancelled at once).
SHUTDOWN_LIMIT_SECONDS = 20.0


class WorkerShutdownHung(UserWarning):
    """A test's worker did not finish shutting down in time; it was abandoned."""


# Abandoned workers' run tasks: referenced, so they are not collected while still pending.
_abandoned: set[asyncio.Task[None]] = set()


@asynccontextmanager
async def running(
    worker: Worker, *, limit_seconds: float = SHUTDOWN_LIMIT_SECONDS
) -> AsyncIterator[Worker]:
    """Run ``worker`` for the block; a fatal worker error is raised when the block ends."""
    run = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        try:
            await asyncio.wait_for(worker.shutdown(), limit_seconds)
        except TimeoutError:
            _abandoned.add(run)
            run.add_done_callback(_abandoned.discard)
            warnings.warn(
                WorkerShutdownHung(
                    f"the worker of task queue {worker.task_queue} was not shut down after "
                    f"{limit_seconds:.0f} s and is abandoned; the event loop's "
                    f"tasks:\n{task_stacks()}"
                ),
                stacklevel=2,
            )
        else:
            await run


def task_stacks() -> str:
    """Every pending asyncio task of the running loop with its chain of awaits, innermost
    last (a task's own stack stops at its outermost coroutine)."""
    lines: list[str] = []
    for task in asyncio.all_tasks():
        lines.append(f"--- {task.get_name()}")
        step: Any = task.get_coro()
        while step is not None:
            frame = getattr(step, "cr_frame", None) or getattr(step, "gi_frame", None)
            if frame is not None:
                code = frame.f_code
                lines.append(f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}")
            step = getattr(step, "cr_await", None) or getattr(step, "gi_yieldfrom", None)
    return "\n".join(lines)
