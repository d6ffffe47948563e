"""Record the replay-test histories: ``python -m tests.workflows.record_histories [NAME…]``.

With names (e.g. ``admitted-master``), only those are written: how a new scenario's
histories are added while the recorded ones keep what older code did. Without, every one
is recorded again: only after a deliberate, compatible change to the workflows' history
(and commit the result); never to make a failing replay pass.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from orchestrator.db.engine import build_engine, migrate
from tests.conftest import temporal_binary
from tests.workflows.conftest import Harness, seed, worker_config
from tests.workflows.fakes import FakePlatform
from tests.workflows.test_replay import HISTORIES, record_all


async def main(names: list[str]) -> None:
    from orchestrator.activities.deps import ActivityDeps
    from orchestrator.worker import build_worker

    env = await WorkflowEnvironment.start_local(dev_server_existing_path=temporal_binary())
    with tempfile.TemporaryDirectory() as tmp:
        engine = build_engine(f"sqlite:///{Path(tmp) / 'replay.db'}")
        migrate(engine)
        seed(engine)
        platform = FakePlatform()
        config = worker_config()
        deps = ActivityDeps(engine=engine, platform=platform, config=config)
        worker = build_worker(env.client, "record-histories", deps)
        async with worker:
            harness = Harness(env, engine, platform, "record-histories", worker, config)
            recorded = await record_all(harness)
        engine.dispose()
    await env.shutdown()
    HISTORIES.mkdir(exist_ok=True)
    unknown = set(names) - recorded.keys()
    if unknown:
        raise SystemExit(f"no such history: {', '.join(sorted(unknown))}")
    for name, history in recorded.items():
        if not names or name in names:
            (HISTORIES / f"{name}.json").write_text(history.to_json())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
