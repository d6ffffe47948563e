"""The baselines: what a user would do without the orchestrator, and the machine's limit.

Each baseline reads a dataset of the same emulator the orchestrator reads and writes the same
``scrape_items`` table (created by the project's own migrations, so the indexes match) in a
fresh database of the same kind:

- ``naive``: the official ``apify-client``'s ``call()``, then ``list_items`` page by page,
  one INSERT statement per row (one transaction per page);
- ``simple``: plain HTTP pages one after another, each page decoded, every item re-encoded as
  JSON text (as the orchestrator stores it) and bulk-inserted (executemany, ON CONFLICT DO
  NOTHING, one transaction per page) before the next page is fetched;
- ``download``: JSON Lines pages through the official client, nothing decoded or written (the
  emulator's raw serving rate; ``downloadJson``: the simple loader's decoded pages, for
  reference);
- ``insert``: the same rows, encoded beforehand, bulk-inserted with nothing downloaded;
  on PostgreSQL also through COPY into a temporary table merged with ON CONFLICT DO NOTHING,
  and through COPY straight into the table with no conflict handling (the raw load rate).

Every timed load, the orchestrator's and each baseline's, starts on an empty ``scrape_items``
and a settled database (``empty_items``, ``settle``): a table that already holds earlier
loads' rows, or a load that pays for the previous one's writeback, would make the two sides
of a ratio differ in more than the code under test.

Trade-off: the baselines run synchronously in the benchmark process (the way a user's script
would), while the stack is idle; they share the machine with the idle stack, the emulator
and the database, as the orchestrator does.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import httpx
from sqlalchemy import Engine, Insert, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError

from bench.stack import EMULATOR_TOKEN
from orchestrator.activities.ingest import PIPELINE_ROWS
from orchestrator.db.engine import build_engine, migrate
from orchestrator.db.queries.items import PG_COPY_DIRECT, binary_copy_page
from orchestrator.db.schema import scrape_items

PAGE_SIZE: Final = 1000
#: Bounds every page loop: 10M items at most.
MAX_PAGES: Final = 10_000

log = logging.getLogger("bench")

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def encode_item(item: Any) -> str:
    """An item as JSON text, encoded the way the orchestrator stores it."""
    return _encode(item)


def empty_items(engine: Engine) -> None:
    """Empty ``scrape_items`` (untimed set-up before a load). Measured on PostgreSQL: 1M rows
    by raw COPY on top of 2M earlier ones ran at 66k rows/s, into an empty table at 76k
    (medians of 4 interleaved pairs)."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("TRUNCATE scrape_items"))
        else:
            conn.execute(text("DELETE FROM scrape_items"))


def settle(engine: Engine) -> None:
    """Let the previous load's writes land before the next timed one (untimed): PostgreSQL
    checkpoints, so no load inherits dirty buffers or starts nearer a WAL-size checkpoint,
    and the kernel writes back dirty pages, so no load is throttled by an earlier one's
    writeback. Measured: four raw COPYs of 1M rows spread 84k-144k rows/s unsettled."""
    if engine.dialect.name == "postgresql":
        try:
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("CHECKPOINT"))
        except DBAPIError as exc:  # CHECKPOINT needs a superuser or pg_checkpoint
            log.warning("no CHECKPOINT before the load: %s", exc.orig)
    os.sync()


@dataclass
class Tagging:
    """The columns every row of one load carries besides its index and data."""

    run_id: str
    child_id: str
    workspace_id: str = "ws_bench"
    actor: str = "ultron-generator"
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def rows(self, offset: int, encoded: Sequence[str]) -> list[dict[str, Any]]:
        return [
            {
                "run_id": self.run_id,
                "child_id": self.child_id,
                "item_index": offset + i,
                "workspace_id": self.workspace_id,
                "skill_run_id": None,
                "conversation_id": None,
                "actor": self.actor,
                "data": data,
                "created_at": self.created_at,
            }
            for i, data in enumerate(encoded)
        ]


class BaselineDb:
    """A migrated database of one kind whose ``scrape_items`` is emptied before each load."""

    def __init__(self, url: str, workdir: Path) -> None:
        self.url = url
        self.sqlite = url.startswith("sqlite")
        self._template = workdir / "template.db"
        self._path = workdir / "baseline.db"
        if self.sqlite:
            workdir.mkdir(parents=True, exist_ok=True)
            engine = build_engine(f"sqlite:///{self._template}")
            migrate(engine)
            engine.dispose()
            self.url = f"sqlite:///{self._path}"
        else:
            engine = build_engine(url)
            migrate(engine)
            engine.dispose()
        self.engine: Engine | None = None
        self._pg_engine: Engine | None = None

    def fresh(self) -> Engine:
        """An engine on an empty, freshly migrated ``scrape_items`` (untimed set-up)."""
        self.close()
        if self.sqlite:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self._path}{suffix}").unlink(missing_ok=True)
            shutil.copyfile(self._template, self._path)
            self.engine = build_engine(self.url)
            settle(self.engine)
            return self.engine
        # PostgreSQL: one engine (a warm connection) for every load, emptied in between.
        if self._pg_engine is None:
            self._pg_engine = build_engine(self.url)
        empty_items(self._pg_engine)
        settle(self._pg_engine)
        return self._pg_engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None

    def dispose(self) -> None:
        self.close()
        if self._pg_engine is not None:
            self._pg_engine.dispose()
            self._pg_engine = None


def upsert_statement(engine: Engine) -> Insert:
    """``INSERT … ON CONFLICT (child_id, item_index) DO NOTHING`` for the engine's dialect."""
    index = ["child_id", "item_index"]
    if engine.dialect.name == "sqlite":
        return sqlite.insert(scrape_items).on_conflict_do_nothing(index_elements=index)
    return postgresql.insert(scrape_items).on_conflict_do_nothing(index_elements=index)


def count_rows(engine: Engine, child_id: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM scrape_items WHERE child_id = :c"), {"c": child_id}
            ).scalar_one()
        )


def _pages(http: httpx.Client, dataset_id: str) -> Iterator[tuple[int, list[Any]]]:
    """(offset, items) of each page, read until a short page."""
    offset = 0
    for _ in range(MAX_PAGES):
        response = http.get(
            f"/v2/datasets/{dataset_id}/items", params={"offset": offset, "limit": PAGE_SIZE}
        )
        response.raise_for_status()
        items: list[Any] = response.json()
        yield offset, items
        offset += len(items)
        if len(items) < PAGE_SIZE:
            return
    raise RuntimeError("dataset longer than the benchmark's page bound")


def _http(emulator_url: str) -> httpx.Client:
    return httpx.Client(
        base_url=emulator_url, timeout=60, headers={"Authorization": f"Bearer {EMULATOR_TOKEN}"}
    )


def _result(rows: int, seconds: float, **extra: Any) -> dict[str, Any]:
    return {
        "rows": rows,
        "seconds": round(seconds, 4),
        "rowsPerSec": round(rows / seconds, 1) if seconds > 0 else None,
        **extra,
    }


def naive(
    emulator_url: str, db: BaselineDb, run_input: dict[str, Any], label: str
) -> dict[str, Any]:
    """apify-client ``call()``, ``list_items`` pages, one INSERT per row.

    Rows per second are counted from the platform run's ``finishedAt`` (as for the
    orchestrator) to the last commit; ``loadSeconds`` counts from ``call()``'s return.
    """
    from apify_client import ApifyClient

    engine = db.fresh()
    client = ApifyClient(EMULATOR_TOKEN, api_url=emulator_url, api_public_url=emulator_url)
    tagging = Tagging(run_id=f"naive-{label}", child_id=f"naive-{label}")
    insert_one = scrape_items.insert()
    run = client.actor("ultron~generator").call(run_input=run_input, memory_mbytes=256, logger=None)
    called = time.time()
    if run is None or run.status != "SUCCEEDED":
        raise RuntimeError(f"naive: the run ended {run.status if run else None}")
    dataset = client.dataset(run.default_dataset_id)
    offset = 0
    for _ in range(MAX_PAGES):
        page = dataset.list_items(offset=offset, limit=PAGE_SIZE)
        with engine.begin() as conn:
            for row in tagging.rows(offset, [encode_item(item) for item in page.items]):
                conn.execute(insert_one, row)
        offset += len(page.items)
        if len(page.items) < PAGE_SIZE:
            break
    done = time.time()
    assert run.finished_at is not None
    finished = run.finished_at.timestamp()
    stored = count_rows(engine, tagging.child_id)
    db.close()
    return _result(stored, done - finished, loadSeconds=round(done - called, 4))


def simple_loader(
    emulator_url: str,
    db: BaselineDb,
    dataset_id: str,
    label: str,
    keep: list[str] | None = None,
) -> dict[str, Any]:
    """Plain HTTP pages, each re-encoded and bulk-inserted before the next is fetched.

    ``keep`` collects the encoded items (for the insert-only limit; appending costs nothing
    measurable next to the insert).
    """
    engine = db.fresh()
    tagging = Tagging(run_id=f"simple-{label}", child_id=f"simple-{label}")
    stmt = upsert_statement(engine)
    with _http(emulator_url) as http:
        start = time.perf_counter()
        for offset, items in _pages(http, dataset_id):
            encoded = [encode_item(item) for item in items]
            if encoded:
                with engine.begin() as conn:
                    conn.execute(stmt, tagging.rows(offset, encoded))
            if keep is not None:
                keep.extend(encoded)
        seconds = time.perf_counter() - start
    stored = count_rows(engine, tagging.child_id)
    db.close()
    return _result(stored, seconds)


def download_only(emulator_url: str, dataset_id: str) -> dict[str, Any]:
    """The download half alone, as the orchestrator reads: JSON Lines pages through the
    official client (``get_items_as_bytes``), lines counted, nothing decoded or written.
    This is also the emulator's raw serving rate, as a fast client sees it."""
    from apify_client import ApifyClient

    dataset = ApifyClient(
        EMULATOR_TOKEN, api_url=emulator_url, api_public_url=emulator_url
    ).dataset(dataset_id)
    rows = 0
    nbytes = 0
    start = time.perf_counter()
    for _ in range(MAX_PAGES):
        body = dataset.get_items_as_bytes(item_format="jsonl", offset=rows, limit=PAGE_SIZE)
        nbytes += len(body)
        count = body.count(b"\n")
        rows += count
        if count < PAGE_SIZE:
            break
    seconds = time.perf_counter() - start
    return _result(rows, seconds, bytes=nbytes, bytesPerRow=round(nbytes / max(rows, 1)))


def download_json(emulator_url: str, dataset_id: str) -> dict[str, Any]:
    """The simple loader's page loop (plain ``httpx``, JSON arrays decoded), nothing written;
    for reference: what reading decoded items costs a user's script."""
    rows = 0
    with _http(emulator_url) as http:
        start = time.perf_counter()
        for offset, items in _pages(http, dataset_id):
            rows = offset + len(items)
        seconds = time.perf_counter() - start
    return _result(rows, seconds)


def _paged(encoded: Sequence[str]) -> Iterator[tuple[int, Sequence[str]]]:
    for offset in range(0, len(encoded), PAGE_SIZE):
        yield offset, encoded[offset : offset + PAGE_SIZE]


def insert_only(db: BaselineDb, encoded: Sequence[str], label: str) -> dict[str, Any]:
    """The rows, encoded beforehand, bulk-inserted page by page (executemany ON CONFLICT)."""
    engine = db.fresh()
    tagging = Tagging(run_id=f"insert-{label}", child_id=f"insert-{label}")
    stmt = upsert_statement(engine)
    start = time.perf_counter()
    for offset, page in _paged(encoded):
        with engine.begin() as conn:
            conn.execute(stmt, tagging.rows(offset, page))
    seconds = time.perf_counter() - start
    stored = count_rows(engine, tagging.child_id)
    db.close()
    return _result(stored, seconds, method="executemany ON CONFLICT DO NOTHING")


_COLUMNS: Final = (
    "run_id, child_id, item_index, workspace_id, skill_run_id, conversation_id, actor, data, "
    "created_at"
)


def insert_only_copy(db: BaselineDb, encoded: Sequence[str], label: str) -> dict[str, Any]:
    """PostgreSQL: COPY each page into a temporary table, merge with ON CONFLICT DO NOTHING."""
    engine = db.fresh()
    tagging = Tagging(run_id=f"copy-{label}", child_id=f"copy-{label}")
    start = time.perf_counter()
    for offset, page in _paged(encoded):
        with engine.begin() as conn:
            raw: Any = conn.connection.driver_connection
            with raw.cursor() as cur:
                cur.execute(
                    f"CREATE TEMP TABLE stage ON COMMIT DROP AS SELECT {_COLUMNS} "  # noqa: S608
                    "FROM scrape_items WITH NO DATA"
                )
                with cur.copy(f"COPY stage ({_COLUMNS}) FROM STDIN") as copy:
                    for row in tagging.rows(offset, page):
                        copy.write_row(
                            (
                                row["run_id"],
                                row["child_id"],
                                row["item_index"],
                                row["workspace_id"],
                                None,
                                None,
                                row["actor"],
                                row["data"],
                                row["created_at"],
                            )
                        )
                cur.execute(
                    f"INSERT INTO scrape_items ({_COLUMNS}) SELECT {_COLUMNS} FROM stage "  # noqa: S608
                    "ON CONFLICT (child_id, item_index) DO NOTHING"
                )
    seconds = time.perf_counter() - start
    stored = count_rows(engine, tagging.child_id)
    db.close()
    return _result(stored, seconds, method="COPY to temp table + INSERT ON CONFLICT DO NOTHING")


def insert_only_copy_direct(db: BaselineDb, encoded: Sequence[str], label: str) -> dict[str, Any]:
    """PostgreSQL's raw load rate: binary COPY of each page straight into ``scrape_items``,
    with no conflict handling at all, written the way the orchestrator writes at its fastest:
    ``PIPELINE_ROWS`` rows per transaction, committed asynchronously, each COPY stream built
    by the orchestrator's own ``binary_copy_page`` from items already in bytes. Not a loader
    anyone should ship (a retried page fails on the unique index), but the fastest plain use
    of the driver: the insert half of the limit the orchestrator is measured against."""
    items = [item.encode() for item in encoded]  # as they come off the network
    engine = db.fresh()
    tagging = Tagging(run_id=f"direct-{label}", child_id=f"direct-{label}")
    fields = (tagging.run_id, tagging.child_id, tagging.workspace_id, None, None, tagging.actor)
    start = time.perf_counter()
    for first in range(0, len(items), PIPELINE_ROWS):
        with engine.begin() as conn:
            raw: Any = conn.connection.driver_connection
            with raw.cursor() as cur:
                cur.execute("SET LOCAL synchronous_commit TO OFF")
                for offset in range(first, min(len(items), first + PIPELINE_ROWS), PAGE_SIZE):
                    page = items[offset : offset + PAGE_SIZE]
                    with cur.copy(PG_COPY_DIRECT) as copy:
                        copy.write(binary_copy_page(fields, tagging.created_at, offset, page))
    seconds = time.perf_counter() - start
    stored = count_rows(engine, tagging.child_id)
    db.close()
    items.clear()
    return _result(
        stored,
        seconds,
        method="binary COPY straight into the table, no conflict handling, asynchronous commit",
    )


def limit_pass(
    emulator_url: str, db: BaselineDb, dataset_id: str, encoded: Sequence[str], label: str
) -> dict[str, Any]:
    """One more pass of the measures that set the limit: the download and the fastest insert
    (executemany on SQLite, COPY straight into the table on PostgreSQL)."""
    found = {"download": download_only(emulator_url, dataset_id)}
    if db.sqlite:
        found["insert"] = insert_only(db, encoded, label)
    else:
        found["insertCopyDirect"] = insert_only_copy_direct(db, encoded, label)
    return found


def best_pass(passes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The fastest of several passes of one measure (on a shared machine, the least
    disturbed), with every pass's rate beside it."""
    best = max(passes, key=lambda entry: float(entry["rowsPerSec"]))
    return {**best, "passes": [entry["rowsPerSec"] for entry in passes]}


def run_baselines(
    emulator_url: str,
    db: BaselineDb,
    dataset_for: Callable[[dict[str, Any]], str],
    run_input: dict[str, Any],
    label: str,
    *,
    with_naive: bool,
    passes: int = 1,
    between: Callable[[], object] | None = None,
) -> dict[str, Any]:
    """Every baseline for one dataset size on one database; returns results by name. The
    measures that set the limit run ``passes`` times, each keeping its best pass, and
    ``between`` (the orchestrator's own pass) runs before each pass after the first, so
    both sides of a ratio are measured through the same spells of a shared machine."""
    dataset_id = dataset_for(run_input)
    found: dict[str, Any] = {}
    if with_naive:
        found["naive"] = naive(emulator_url, db, run_input, label)
    keep: list[str] = []
    found["simple"] = simple_loader(emulator_url, db, dataset_id, label, keep)
    found["download"] = download_only(emulator_url, dataset_id)
    found["downloadJson"] = download_json(emulator_url, dataset_id)
    found["insert"] = insert_only(db, keep, label)
    if not db.sqlite:
        found["insertCopy"] = insert_only_copy(db, keep, label)
        found["insertCopyDirect"] = insert_only_copy_direct(db, keep, label)
    extra = []
    for n in range(1, passes):
        if between is not None:
            between()
        extra.append(limit_pass(emulator_url, db, dataset_id, keep, f"{label}-{n}"))
    if extra:
        for name in extra[0]:
            found[name] = best_pass([found[name], *(more[name] for more in extra)])
    keep.clear()
    return found
