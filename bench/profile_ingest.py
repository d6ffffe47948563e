"""Where the orchestrator's ingest time goes: a standalone replica of its page loop, timed.

``python -m bench.profile_ingest [--items N] [--db sqlite|postgresql] [--cprofile]`` starts
a platform emulator (a child process on a free port, stopped at the end), creates one
generator dataset, and ingests it page by page the way ``ingest_dataset`` does, but strictly
one stage after another, so each stage's cost can be read off. It times both the earlier
path (``list_items`` decoded, each item re-encoded, SQLAlchemy executemany of dictionaries)
and the current one (JSON Lines split into lines, the orchestrator's own ``write_page``).

Trade-off: a replica, not the worker itself (no Temporal, no heartbeats, no cursor UPDATE or
event row per page, no overlap of download and insert), so its total is not the worker's;
its per-stage split is what it is for.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx

from bench.stack import EMULATOR_TOKEN, HOST, free_ports, postgres_database
from orchestrator.db.engine import build_engine, migrate
from orchestrator.db.queries._common import insert_ignoring_conflicts
from orchestrator.db.queries.items import write_page
from orchestrator.db.schema import scrape_items

PAGE = 1000
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
#: Stand-ins for the run and child records ``write_page`` reads its tags from.
_RUN: Any = SimpleNamespace(
    id="run_profile", workspace_id="ws_bench", skill_run_id=None, conversation_id=None
)
_CHILD: Any = SimpleNamespace(id="child_profile", actor="ultron-generator")


@contextlib.contextmanager
def emulator() -> Iterator[str]:
    (port,) = free_ports(1)
    env = {
        **os.environ,
        "APIFY_EMULATOR_RATE_LIMIT_RPS": "0",
        "APIFY_EMULATOR_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "apify_emulator", "--host", HOST, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://{HOST}:{port}"
    try:
        for _ in range(100):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/_emulator/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def make_dataset(url: str, items: int) -> str:
    with httpx.Client(
        base_url=url, timeout=60, headers={"Authorization": f"Bearer {EMULATOR_TOKEN}"}
    ) as http:
        run = http.post(
            "/v2/actors/ultron~generator/runs",
            params={"memory": 256, "waitForFinish": 60},
            json={"items": items, "itemBytes": 500, "durationSecs": 0.1, "seed": "profile"},
        ).json()["data"]
        for _ in range(60):
            if run["status"] == "SUCCEEDED":
                return str(run["defaultDatasetId"])
            run = http.get(f"/v2/actor-runs/{run['id']}", params={"waitForFinish": 5}).json()[
                "data"
            ]
    raise RuntimeError("the generator run did not succeed")


def rows(offset: int, encoded: list[str], now: datetime) -> list[dict[str, Any]]:
    return [
        {
            "run_id": "run_profile",
            "child_id": "child_profile",
            "item_index": offset + i,
            "workspace_id": "ws_bench",
            "skill_run_id": None,
            "conversation_id": None,
            "actor": "ultron-generator",
            "data": data,
            "created_at": now,
        }
        for i, data in enumerate(encoded)
    ]


async def replica(url: str, dataset_id: str, db_url: str, current: bool) -> dict[str, float]:
    """One ingest, stage after stage.

    ``current``: as the orchestrator does it now (JSON Lines split into lines, its own
    ``write_page``); otherwise the earlier path, as the simple loader does it (``list_items``
    decoded, every item re-encoded, SQLAlchemy executemany of row dictionaries).
    """
    from apify_client import ApifyClientAsync

    engine = build_engine(db_url)
    with engine.begin() as conn:
        conn.execute(scrape_items.delete())
    client = ApifyClientAsync(EMULATOR_TOKEN, api_url=url, api_public_url=url)
    dataset = client.dataset(dataset_id)
    spent = {"fetch+decode": 0.0, "encode": 0.0, "insert": 0.0}
    offset = 0
    now = datetime.now(UTC)
    start = time.perf_counter()
    for _ in range(100_000):
        t0 = time.perf_counter()
        if current:
            raw = await dataset.get_items_as_bytes(item_format="jsonl", offset=offset, limit=PAGE)
            encoded = [line for line in raw.decode("utf-8").split("\n") if line.strip()]
            t1 = t2 = time.perf_counter()
            with engine.begin() as conn:
                write_page(conn, _RUN, _CHILD, offset, encoded)
        else:
            page = await dataset.list_items(offset=offset, limit=PAGE)
            t1 = time.perf_counter()
            encoded = [_encode(item) for item in page.items]
            t2 = time.perf_counter()
            with engine.begin() as conn:
                stmt = insert_ignoring_conflicts(conn, scrape_items, ["child_id", "item_index"])
                if encoded:
                    conn.execute(stmt, rows(offset, encoded, now))
        t3 = time.perf_counter()
        spent["fetch+decode"] += t1 - t0
        spent["encode"] += t2 - t1
        spent["insert"] += t3 - t2
        offset += len(encoded)
        if len(encoded) < PAGE:
            break
    spent["total"] = time.perf_counter() - start
    spent["rows"] = offset
    engine.dispose()
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_ingest")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--cprofile", action="store_true", help="also print the top functions")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-prof-")))
        if args.db == "sqlite":
            db_url = f"sqlite:///{tmp / 'profile.db'}"
        else:
            db_url = stack.enter_context(postgres_database("prof"))
        engine = build_engine(db_url)
        migrate(engine)
        engine.dispose()
        url = stack.enter_context(emulator())
        dataset_id = make_dataset(url, args.items)
        for current in (False, True):
            label = (
                "now: JSON Lines + write_page"
                if current
                else "before: list_items + re-encode + SA executemany"
            )
            profiler = cProfile.Profile() if args.cprofile else None
            if profiler:
                profiler.enable()
            spent = asyncio.run(replica(url, dataset_id, db_url, current))
            if profiler:
                profiler.disable()
            n = spent.pop("rows")
            parts = ", ".join(f"{k} {v:.2f} s ({v / spent['total']:.0%})" for k, v in spent.items())
            sys.stdout.write(f"{label}: {n:.0f} rows, {n / spent['total']:,.0f} rows/s; {parts}\n")
            if profiler:
                buf = io.StringIO()
                pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(15)
                sys.stdout.write(buf.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
