"""Runs, datasets and webhook dispatches, with run status computed from wall-clock time.

A run stores only its start time, its script and abort requests; its status,
`finishedAt`, stats and visible item count are derived on every read from a
timeline (`RunRecord.timeline`). That makes restarts with `--state-file` trivial
and removes timers from the request path; the trade-off is that anything that
must *happen* at a transition (webhooks) needs the background ticker in
`webhooks.py`, which replays timeline phases it has not yet emitted.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from apify_emulator.actors import TERMINAL_STATUSES, RunScript
from apify_emulator.config import EmulatorConfig
from apify_emulator.pricing import Pricing
from apify_emulator.util import iso, stable_id

log = logging.getLogger(__name__)

EVENT_FOR_STATUS = {
    "READY": "ACTOR.RUN.CREATED",
    "SUCCEEDED": "ACTOR.RUN.SUCCEEDED",
    "FAILED": "ACTOR.RUN.FAILED",
    "ABORTED": "ACTOR.RUN.ABORTED",
    "TIMED-OUT": "ACTOR.RUN.TIMED_OUT",
}
ACTIVE_STATUSES = frozenset({"READY", "RUNNING", "TIMING-OUT", "ABORTING"})
# A run's span when it has no scripted duration (hang): its rows still arrive over 3 s.
HANG_ROWS_SECS = 3.0


@dataclass(frozen=True)
class Phase:
    status: str
    at: float  # wall-clock unix seconds
    message: str | None


@dataclass
class RunRecord:
    id: str
    actor_id: str
    actor_name: str
    user_id: str
    started_at: float
    scale: float  # time_scale captured at start, so a restart with another scale keeps timing
    script: RunScript
    timeout_secs: int
    memory_mbytes: int
    build: str
    max_items: int | None
    max_total_charge_usd: float | None
    input_body_len: int
    input_content_type: str
    input_body: str
    dataset_id: str
    key_value_store_id: str
    request_queue_id: str
    origin: str = "API"
    client_ip: str | None = None
    user_agent: str | None = None
    webhooks: list[dict[str, Any]] = field(default_factory=list)
    abort_at: float | None = None
    abort_graceful: bool = False
    emitted: int = 0  # timeline phases already processed by the webhook ticker
    status_message: str | None = None  # set by PUT /v2/actor-runs/{id}
    general_access: str = "FOLLOW_USER_SETTING"
    # The actor's pricing when the run started (a state file from before pricing: FREE).
    pricing: Pricing = field(default_factory=Pricing)

    # ---- timeline -------------------------------------------------------
    def timeline(self, cfg: EmulatorConfig) -> list[Phase]:
        """Ordered phases; the status at time t is the last phase with `at <= t`."""
        k = self.scale
        s = self.started_at
        running_at = s + cfg.ready_secs * k
        phases = [Phase("READY", s, "Starting the Actor run"), Phase("RUNNING", running_at, None)]
        dur = self.script.duration_secs
        natural_end = None if dur is None else running_at + dur * k
        timeout_at = (
            s + self.timeout_secs * k if self.timeout_secs > 0 and not self.script.stuck else None
        )
        ending: list[Phase]
        if timeout_at is not None and (natural_end is None or timeout_at < natural_end):
            ending = self._timing_out(timeout_at, cfg)
        elif natural_end is None:
            ending = []
        else:
            final, msg = self.script.final_status, self.script.final_message
            if final == "TIMED-OUT":
                ending = self._timing_out(natural_end, cfg, msg)
            elif final == "ABORTED":
                ending = [
                    Phase("ABORTING", natural_end, "Actor is being aborted"),
                    Phase(
                        "ABORTED", natural_end + cfg.aborting_secs * k, msg or "Actor was aborted"
                    ),
                ]
            elif final == "FAILED":
                ending = [Phase("FAILED", natural_end, msg or "Actor failed")]
            else:
                ending = [Phase("SUCCEEDED", natural_end, msg or "Actor finished successfully")]
        cap_at = self._charge_limit_at(cfg)
        if cap_at is not None and (not ending or cap_at < ending[0].at):
            ending = self._charge_limit(cap_at, cfg)
        phases.extend(ending)
        if self.abort_at is not None:
            a = self.abort_at
            phases = [p for p in phases if p.at <= a and p.status not in TERMINAL_STATUSES]
            if self.abort_graceful:
                phases.append(Phase("ABORTING", a, "Actor is being aborted"))
                phases.append(Phase("ABORTED", a + cfg.aborting_secs * k, "Actor was aborted"))
            else:
                phases.append(Phase("ABORTED", a, "Actor was aborted"))
        return phases

    def _timing_out(self, at: float, cfg: EmulatorConfig, msg: str | None = None) -> list[Phase]:
        return [
            Phase("TIMING-OUT", at, "Actor is timing out"),
            Phase("TIMED-OUT", at + cfg.timing_out_secs * self.scale, msg or "Actor timed out"),
        ]

    def _rows_span(self) -> float:
        """Wall-clock seconds over which the rows are pushed."""
        dur = self.script.duration_secs
        return (dur if dur is not None else HANG_ROWS_SECS) * self.scale

    def charge_limit_items(self) -> int | None:
        """Rows the run may push before maxTotalChargeUsd stops it (None: it never does)."""
        if self.max_total_charge_usd is None:
            return None
        rows = self.pricing.affordable_items(self.memory_mbytes, self.max_total_charge_usd)
        return rows if rows is not None and rows < self.script.item_count else None

    def _charge_limit_at(self, cfg: EmulatorConfig) -> float | None:
        """When the run tries to charge the first row it cannot pay for."""
        rows = self.charge_limit_items()
        if rows is None:
            return None
        running_at = self.started_at + cfg.ready_secs * self.scale
        return running_at + self._rows_span() * (rows + 1) / self.script.item_count

    def _charge_limit(self, at: float, cfg: EmulatorConfig) -> list[Phase]:
        # The SDK stops charging and pushing; the platform then aborts the run, which keeps
        # running (and using compute) for the graceful-abort window.
        limit = f"${self.max_total_charge_usd:g} (maxTotalChargeUsd)"
        return [
            Phase("ABORTING", at, f"Reached the maximum total charge of {limit}, aborting"),
            Phase(
                "ABORTED",
                at + cfg.aborting_secs * self.scale,
                f"Actor was aborted: it reached the maximum total charge of {limit}",
            ),
        ]

    def phase_at(self, cfg: EmulatorConfig, t: float) -> Phase:
        current = None
        for p in self.timeline(cfg):
            if p.at <= t:
                current = p
        assert current is not None
        return current

    def next_change_after(self, cfg: EmulatorConfig, t: float) -> float | None:
        for p in self.timeline(cfg):
            if p.at > t:
                return p.at
        return None

    def status(self, cfg: EmulatorConfig, t: float | None = None) -> str:
        return self.phase_at(cfg, time.time() if t is None else t).status

    # ---- dataset visibility ---------------------------------------------
    def visible_items(self, cfg: EmulatorConfig, t: float) -> int:
        """Items pushed by time t: linear over the scripted duration, frozen by abort/timeout
        and cut at the charge limit."""
        total = self.script.item_count
        limit = self.charge_limit_items()
        count = total if limit is None else limit
        start = self.started_at + cfg.ready_secs * self.scale
        span = self._rows_span()
        stop = t
        for p in self.timeline(cfg):
            if p.status in {"TIMING-OUT", "ABORTING", "ABORTED"} and p.at <= t:
                stop = min(stop, p.at)
                break
        if stop < start:
            return 0
        if span <= 0 or stop >= start + span:
            return count
        return min(count, int(total * (stop - start) / span))

    def item_count(self, cfg: EmulatorConfig, t: float) -> int:
        """The dataset's `itemCount` counter, which may lag the items (itemCountLagSecs)."""
        return self.visible_items(cfg, t - self.script.item_count_lag_secs * self.scale)

    # ---- views ----------------------------------------------------------
    def to_api(self, cfg: EmulatorConfig, t: float, *, with_usage: bool = True) -> dict[str, Any]:
        """The Get-run `data` object as of time t."""
        phase = self.phase_at(cfg, t)
        terminal = phase.status in TERMINAL_STATUSES
        finished = phase.at if terminal else None
        duration = max(0.0, (finished if finished is not None else t) - self.started_at)
        usage = self.usage(cfg, t, finished)
        compute_units = usage["usage"]["ACTOR_COMPUTE_UNITS"]
        data: dict[str, Any] = {
            "id": self.id,
            "actId": self.actor_id,
            "userId": self.user_id,
            "actorTaskId": None,
            "startedAt": iso(self.started_at),
            "finishedAt": iso(finished),
            "status": phase.status,
            "statusMessage": self._status_message(phase),
            "isStatusMessageTerminal": terminal,
            "meta": {
                "origin": self.origin,
                "clientIp": self.client_ip,
                "userAgent": self.user_agent,
            },
            "stats": self._stats(duration, compute_units, terminal),
            "options": {
                "build": self.build,
                "timeoutSecs": self.timeout_secs,
                "memoryMbytes": self.memory_mbytes,
                "diskMbytes": 2 * self.memory_mbytes,
                "maxItems": self.max_items,
                "maxTotalChargeUsd": self.max_total_charge_usd,
            },
            "pricingInfo": self.pricing.to_api(),
            "buildId": stable_id(f"build:{self.actor_id}:{self.build}"),
            "buildNumber": "0.0.1",
            "exitCode": self._exit_code(phase.status) if terminal else None,
            "generalAccess": self.general_access,
            **self._storages(),
            "containerUrl": f"https://{self.id.lower()}.runs.apify.net",
            "isContainerServerReady": not terminal and phase.status != "READY",
            "platformUsageBillingModel": "USER",
        }
        if "chargedEventCounts" in usage:
            data["chargedEventCounts"] = usage["chargedEventCounts"]
        if with_usage:
            data.update({k: usage[k] for k in ("usage", "usageTotalUsd", "usageUsd")})
        return data

    def usage(self, cfg: EmulatorConfig, t: float, finished: float | None) -> dict[str, Any]:
        """Usage and charges as the platform reports them at t.

        The figures trail the run by `usage_lag_secs` (scaled): they grow while it runs and
        settle that long after it ends, then never change again.
        """
        seen = t - cfg.usage_lag_secs * self.scale
        if finished is not None:
            seen = min(seen, finished)
        seen = max(seen, self.started_at)
        rows = self.visible_items(cfg, seen)
        return self.pricing.usage(self.memory_mbytes, seen - self.started_at, rows)

    def _status_message(self, phase: Phase) -> str | None:
        message = self.status_message or phase.message
        if phase.status == "RUNNING" and message is None:
            return self.script.running_message
        return message

    def _exit_code(self, status: str) -> int:
        """A terminal run's exit code: the script's for SUCCEEDED, never 0 for FAILED."""
        if status == "SUCCEEDED":
            return self.script.exit_code
        if status == "FAILED":
            return self.script.exit_code or 1
        return 1

    def _stats(self, duration: float, compute_units: float, terminal: bool) -> dict[str, Any]:
        memory_bytes = self.memory_mbytes * 1024 * 1024
        return {
            "inputBodyLen": self.input_body_len,
            "migrationCount": 0,
            "rebootCount": 0,
            "restartCount": 0,
            "resurrectCount": 0,
            "memAvgBytes": float(memory_bytes // 4),
            "memMaxBytes": memory_bytes // 2,
            "memCurrentBytes": 0 if terminal else memory_bytes // 4,
            "cpuAvgUsage": 25.0,
            "cpuMaxUsage": 100.0,
            "cpuCurrentUsage": 0.0 if terminal else 25.0,
            "netRxBytes": 0,
            "netTxBytes": 0,
            "durationMillis": int(duration * 1000),
            "runTimeSecs": round(duration, 3),
            "metamorph": 0,
            "computeUnits": compute_units,
        }

    def _storages(self) -> dict[str, Any]:
        return {
            "defaultKeyValueStoreId": self.key_value_store_id,
            "defaultDatasetId": self.dataset_id,
            "defaultRequestQueueId": self.request_queue_id,
            "storageIds": {
                "datasets": {"default": self.dataset_id},
                "keyValueStores": {"default": self.key_value_store_id},
                "requestQueues": {"default": self.request_queue_id},
            },
        }

    def to_short(self, cfg: EmulatorConfig, t: float) -> dict[str, Any]:
        full = self.to_api(cfg, t)
        keys = [
            "id",
            "actId",
            "userId",
            "actorTaskId",
            "status",
            "startedAt",
            "finishedAt",
            "buildId",
            "buildNumber",
            "meta",
            "usageTotalUsd",
            "defaultKeyValueStoreId",
            "defaultDatasetId",
            "defaultRequestQueueId",
        ]
        short = {key: full[key] for key in keys}
        short["buildNumberInt"] = 1
        return short

    def dataset_api(self, cfg: EmulatorConfig, t: float) -> dict[str, Any]:
        count = self.item_count(cfg, t)
        if self.script.params.get("emptyEvery"):
            clean = count - count // int(self.script.params["emptyEvery"])
        else:
            clean = count
        modified = min(t, self.phase_at(cfg, t).at) if count else self.started_at
        base = cfg.base_url()
        return {
            "id": self.dataset_id,
            "name": None,
            "userId": self.user_id,
            "createdAt": iso(self.started_at),
            "modifiedAt": iso(max(self.started_at, modified)),
            "accessedAt": iso(t),
            "itemCount": count,
            "cleanItemCount": clean,
            "actId": self.actor_id,
            "actRunId": self.id,
            "fields": [],
            "consoleUrl": f"{base}/_emulator/console/storage/datasets/{self.dataset_id}",
            "itemsPublicUrl": f"{base}/v2/datasets/{self.dataset_id}/items",
            "generalAccess": "FOLLOW_USER_SETTING",
            "stats": {"readCount": 0, "writeCount": count, "storageBytes": 0},
        }

    # ---- persistence ----------------------------------------------------
    def to_json(self) -> str:
        data = asdict(self)
        data["script"] = self.script.to_dict()
        data["pricing"] = self.pricing.to_dict()
        return json.dumps(data)

    @classmethod
    def from_json(cls, raw: str) -> RunRecord:
        data = json.loads(raw)
        data["script"] = RunScript.from_dict(data["script"])
        data["pricing"] = Pricing.from_dict(data.get("pricing") or {})
        return cls(**data)


# Fixed statements per table (no string-built SQL).
_UPSERT = {
    "runs": "INSERT OR REPLACE INTO runs (id, data) VALUES (?, ?)",
    "dispatches": "INSERT OR REPLACE INTO dispatches (id, data) VALUES (?, ?)",
}
_SELECT = {
    "runs": "SELECT data FROM runs ORDER BY rowid",
    "dispatches": "SELECT data FROM dispatches ORDER BY rowid",
}


class Persistence:
    """Write-through sqlite copy of runs and dispatches (stdlib sqlite3, one connection).

    Writes are synchronous on the event loop: local sqlite commits take well
    under a millisecond for these small JSON rows, which is cheaper than a
    thread hop, but it would not scale to a busy shared disk.
    """

    def __init__(self, path: str) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, data TEXT)")
        self._db.execute("CREATE TABLE IF NOT EXISTS dispatches (id TEXT PRIMARY KEY, data TEXT)")

    def save(self, table: str, key: str, data: str) -> None:
        with self._lock:
            self._db.execute(_UPSERT[table], (key, data))

    def load(self, table: str) -> Iterator[str]:
        with self._lock:
            rows = self._db.execute(_SELECT[table]).fetchall()
        for (data,) in rows:
            yield str(data)

    def clear(self) -> None:
        with self._lock:
            self._db.execute("DELETE FROM runs")
            self._db.execute("DELETE FROM dispatches")

    def close(self) -> None:
        with self._lock:
            self._db.close()


class Store:
    """In-memory indexes over runs and dispatches, optionally mirrored to sqlite."""

    def __init__(self, cfg: EmulatorConfig) -> None:
        self.cfg = cfg
        self.runs: dict[str, RunRecord] = {}
        self.by_dataset: dict[str, str] = {}
        self.dispatches: dict[str, dict[str, Any]] = {}
        self.webhook_keys: dict[str, str] = {}  # idempotencyKey -> webhook id
        # Runs not yet seen terminal; terminal is final here (no resurrect), so this set only
        # shrinks and cap checks stay O(active) instead of O(all runs) in long benchmarks.
        self.active_ids: set[str] = set()
        self.persistence = Persistence(cfg.state_file) if cfg.state_file else None
        if self.persistence:
            for raw in self.persistence.load("runs"):
                self._index(RunRecord.from_json(raw))
            for raw in self.persistence.load("dispatches"):
                dispatch = json.loads(raw)
                self.dispatches[dispatch["id"]] = dispatch
            log.info(
                "loaded %d runs, %d dispatches from %s",
                len(self.runs),
                len(self.dispatches),
                cfg.state_file,
            )

    def _index(self, run: RunRecord) -> None:
        self.runs[run.id] = run
        self.active_ids.add(run.id)
        self.by_dataset[run.dataset_id] = run.id
        for hook in run.webhooks:
            if hook.get("idempotencyKey"):
                self.webhook_keys[hook["idempotencyKey"]] = hook["id"]

    def add_run(self, run: RunRecord) -> None:
        self._index(run)
        self.save_run(run)

    def save_run(self, run: RunRecord) -> None:
        if self.persistence:
            self.persistence.save("runs", run.id, run.to_json())

    def save_dispatch(self, dispatch: dict[str, Any]) -> None:
        self.dispatches[dispatch["id"]] = dispatch
        if self.persistence:
            self.persistence.save("dispatches", dispatch["id"], json.dumps(dispatch))

    def run_for_dataset(self, dataset_id: str) -> RunRecord | None:
        run_id = self.by_dataset.get(dataset_id)
        return self.runs.get(run_id) if run_id else None

    def active_runs(self, t: float) -> list[RunRecord]:
        active = []
        for run_id in list(self.active_ids):
            run = self.runs[run_id]
            if run.status(self.cfg, t) in ACTIVE_STATUSES:
                active.append(run)
            else:
                self.active_ids.discard(run_id)
        return active

    def reset(self) -> None:
        self.runs.clear()
        self.by_dataset.clear()
        self.dispatches.clear()
        self.webhook_keys.clear()
        self.active_ids.clear()
        if self.persistence:
            self.persistence.clear()

    def close(self) -> None:
        if self.persistence:
            self.persistence.close()
