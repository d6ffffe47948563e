"""Turning a results file into ratios, target verdicts and a Markdown table.

Pure functions of the results dictionary: the table printed at the end of a run, the one in
docs/BENCHMARKS.md and ``python -m bench --report FILE`` are the same text. Targets are
reported (PASS / MISS), never asserted: a benchmark that fails a build on a noisy machine
teaches people to ignore it.
"""

from __future__ import annotations

import math
from typing import Any

#: Memory counts as flat when the worker's peak grows by at most this from the smallest
#: to the largest dataset.
FLAT_MEMORY_MIB = 64.0
LIMIT_SHARE = 0.6
#: PostgreSQL ingest from this many items on is held to a higher share of its limit (issue 14):
#: at 10k items fixed costs (noticing the end, scheduling the activity) still weigh most.
PG_LIMIT_SHARE = 0.85
PG_LIMIT_SHARE_FROM_ITEMS = 100_000
#: The emulator must serve JSON Lines at least as fast as a plain server would, so that it
#: never bounds what the benchmark shows (issue 14).
SERVE_ITEMS_PER_SEC = 100_000.0
SERVE_FROM_ITEMS = 100_000
#: Insert-only baselines, and how the limit names the one that bounds it.
INSERTS = {"insert": "insert", "insertCopy": "insert (COPY)", "insertCopyDirect": "insert (COPY)"}
WEBHOOK_P95_SECS = 1.0
POLL_SLACK_SECS = 2.0


def _rate(entry: dict[str, Any] | None) -> float | None:
    if not entry:
        return None
    value = entry.get("rowsPerSec")
    return float(value) if value else None


def limit_of(baseline: dict[str, Any]) -> tuple[float | None, str]:
    """The machine's limit for one size: the slower of download and the best bulk insert."""
    download = _rate(baseline.get("download"))
    inserts = {name: rate for name in INSERTS if (rate := _rate(baseline.get(name))) is not None}
    if download is None or not inserts:
        return None, ""
    best_name = max(inserts, key=lambda k: inserts[k])
    if download <= inserts[best_name]:
        return download, "download"
    return inserts[best_name], INSERTS[best_name]


def limit_share(kind: str, items: int) -> float:
    """The share of the limit the orchestrator's ingest is held to, per database and size."""
    if kind == "postgresql" and items >= PG_LIMIT_SHARE_FROM_ITEMS:
        return PG_LIMIT_SHARE
    return LIMIT_SHARE


def _ratio(a: float | None, b: float | None, digits: int = 2) -> float | None:
    return round(a / b, digits) if a and b else None


def _at_least(a: float | None, b: float | None, share: float) -> bool:
    """Whether a / b reaches ``share``, judged on the exact ratio: rounded first, 0.849 of a
    limit would pass a goal of 0.85."""
    return a is not None and b is not None and b > 0 and a / b >= share


#: Fan-out at scale (issue 15): per-child cost at 500 in flight against 100, and the times.
FANOUT_FLAT_RATIO = 1.2
FANOUT_SPAWN_SECS = 5.0
FANOUT_OVERHEAD_SECS = 5.0


def fanout_targets(found: dict[str, Any]) -> list[dict[str, Any]]:
    """Per database: the per-child ratios at 500 vs 100 children, and the 500 times."""
    targets: list[dict[str, Any]] = []
    for kind, entry in found.items():
        if "failed" in entry:
            targets.append(
                {
                    "target": f"fan-out at scale finished ({kind})",
                    "value": entry["failed"],
                    "goal": "every request terminal in time",
                    "met": False,
                }
            )
        levels = {level["children"]: level for level in entry["levels"]}
        at500 = levels.get(500)
        if at500 is None or 100 not in levels:
            continue
        for key, label in (("cpu", "CPU"), ("spawned", "spawn time"), ("overhead", "overhead")):
            value = at500["vsFirstPerChild"][key]
            targets.append(
                {
                    "target": f"fan-out {label} per child, 500 vs 100 ({kind})",
                    "value": value,
                    "goal": f"≤ {FANOUT_FLAT_RATIO}",
                    "met": value is not None and value <= FANOUT_FLAT_RATIO,
                }
            )
        for key, goal in (
            ("spawnedSecs", FANOUT_SPAWN_SECS),
            ("overheadSecs", FANOUT_OVERHEAD_SECS),
        ):
            value = at500[key]
            what = "all spawned" if key == "spawnedSecs" else "all terminal past the 3 s run"
            targets.append(
                {
                    "target": f"fan-out of 500, {what} ({kind})",
                    "value": value,
                    "goal": f"≤ {goal:g} s",
                    "met": value is not None and value <= goal,
                }
            )
    return targets


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Ratios per database and size, and one verdict per target."""
    targets: list[dict[str, Any]] = []
    ratios: dict[str, list[dict[str, Any]]] = {}
    for kind, db in results["databases"].items():
        rows = []
        for ing in db["ingest"]:
            base = db["baselines"].get(str(ing["items"]), {})
            limit, bound_by = limit_of(base)
            orch = float(ing["rowsPerSec"])
            simple = _rate(base.get("simple"))
            entry = {
                "items": ing["items"],
                "orchestrator": orch,
                "simple": simple,
                "naive": _rate(base.get("naive")),
                "limit": limit,
                "limitBoundBy": bound_by,
                "vsSimple": _ratio(orch, simple),
                "vsLimit": _ratio(orch, limit),
                "vsNaive": _ratio(orch, _rate(base.get("naive"))),
            }
            rows.append(entry)
            targets.append(
                {
                    "target": f"ingest ≥ simple loader ({kind}, {ing['items']:,} items)",
                    "value": _ratio(orch, simple, 3),
                    "goal": "≥ 1.0",
                    "met": _at_least(orch, simple, 1.0),
                }
            )
            share = limit_share(kind, ing["items"])
            targets.append(
                {
                    "target": f"ingest ≥ {share:.0%} of limit ({kind}, {ing['items']:,} items)",
                    "value": _ratio(orch, limit, 3),
                    "goal": f"≥ {share}",
                    "met": _at_least(orch, limit, share),
                }
            )
            serving = _rate(base.get("download"))
            if ing["items"] < SERVE_FROM_ITEMS:
                continue  # ten pages: the first connection and call weigh too much
            targets.append(
                {
                    "target": f"emulator serves JSON Lines ({kind} run, {ing['items']:,} items)",
                    "value": round(serving) if serving else None,
                    "goal": f"≥ {SERVE_ITEMS_PER_SEC:,.0f} items/s",
                    "met": serving is not None and serving >= SERVE_ITEMS_PER_SEC,
                }
            )
        ratios[kind] = rows
        if len(db["ingest"]) > 1:
            first, last = db["ingest"][0], db["ingest"][-1]
            growth = float(last["workerRssPeakMiB"]) - float(first["workerRssPeakMiB"])
            targets.append(
                {
                    "target": f"worker memory flat {first['items']:,} → {last['items']:,} ({kind})",
                    "value": round(growth, 1),
                    "goal": f"peak grows ≤ {FLAT_MEMORY_MIB:.0f} MiB",
                    "met": growth <= FLAT_MEMORY_MIB,
                }
            )
        for lat in db.get("latency", []):
            goal = (
                WEBHOOK_P95_SECS
                if lat["webhooks"]
                else results["config"]["pollIntervalSecs"] + POLL_SLACK_SECS
            )
            label = "webhooks" if lat["webhooks"] else "poll only"
            targets.append(
                {
                    "target": f"completion → visible p95, {label}",
                    "value": lat["p95"],
                    "goal": f"≤ {goal:g} s",
                    "met": lat["p95"] is not None
                    and lat["p95"] <= goal
                    and lat["visible"] == lat["children"],
                }
            )
        fan = db.get("fanout")
        if fan:
            targets.append(
                {
                    "target": f"platform calls per child, webhook path "
                    f"({fan['children']} children)",
                    "value": fan["maxEventCallsOneChild"],
                    "goal": f"≤ {fan['callBound']}",
                    "met": fan["maxEventCallsOneChild"] <= fan["callBound"],
                }
            )
        for ing in db["ingest"]:
            total = sum(ing["platformCalls"].values())
            targets.append(
                {
                    "target": f"platform calls, one child of {ing['items']:,} items ({kind})",
                    "value": total,
                    "goal": f"≤ {ing['callBound']}",
                    "met": total <= ing["callBound"],
                }
            )
    targets += fanout_targets(results.get("fanoutAtScale") or {})
    budget = results["plan"]["budget_secs"]
    targets.append(
        {
            "target": f"{results['mode']} run duration",
            "value": results.get("durationSecs"),
            "goal": f"< {budget:.0f} s",
            "met": results.get("durationSecs") is not None and results["durationSecs"] < budget,
        }
    )
    return {"ratios": ratios, "targets": targets}


def _num(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if digits == 0:
        return f"{round(float(value)):,}"
    return f"{float(value):,.{digits}f}"


def _load(results: dict[str, Any]) -> str:
    load = results.get("loadAverage")
    if not load:
        return ""
    return f"; 1-min load average {load['start'][0]:.2f} at start, {load['end'][0]:.2f} at end"


def _workers_summed(spent: dict[str, float]) -> dict[str, float]:
    """CPU seconds with every worker instance (``worker-2``) counted under ``worker``."""
    summed: dict[str, float] = {}
    for name, secs in spent.items():
        key = "worker" if name.startswith("worker") else name
        summed[key] = round(summed.get(key, 0.0) + secs, 2)
    return summed


def load_section(found: dict[str, Any] | None) -> list[str]:
    """Section 5 (the open-loop load), one row per worker count; nothing without a load."""
    if not found or not found.get("runs"):
        return []
    plan = found["plan"]
    out = [
        "",
        f"#### 5. Load ({plan['requests']} requests x {plan['children']} children at "
        f"{plan['rate']:g}/s, runs of {plan['child_secs']:g} s; account cap {plan['cap']} "
        f"concurrent runs vs a demand of ≈ {found['demandRuns']:g}; PostgreSQL, one API)",
        "",
        f"Beside the burst, a second workspace sends {plan['trickle_requests']} one-child "
        f"requests, one every {plan['trickle_every_secs']:g} s; the same trickle alone on the "
        "idle stack is the yardstick. Times in seconds.",
        "",
        "| workers | POST → 202 p50 / p95 | first POST → all terminal | burst request "
        "p50 / p95 | slots mean / peak (utilisation) | starts (402) | status | pages | other "
        "| trickle alone p50 | trickle under load p50 / max | slowdown |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in found["runs"]:
        accept, burst, slots = run["acceptLatency"], run["burstToTerminal"], run["slots"]
        calls, trickle = run["platformCalls"], run["trickle"]
        out.append(
            f"| {run['workers']} | {_num(accept['p50'], 2)} / {_num(accept['p95'], 2)} "
            f"| {_num(run['allTerminalSecs'], 1)} "
            f"| {_num(burst['p50'], 1)} / {_num(burst['p95'], 1)} "
            f"| {_num(slots['mean'], 1)} / {slots['peak']} of {slots['cap']} "
            f"({_num(slots['utilisation'], 2)}) "
            f"| {calls['start']} ({run['refusedStarts']}) | {calls['status']} "
            f"| {calls['datasetPages']} | {calls['other']} "
            f"| {_num(trickle['alone']['p50'], 2)} "
            f"| {_num(trickle['underLoad']['p50'], 1)} / {_num(trickle['underLoad']['max'], 1)} "
            f"| {_num(trickle['slowdownP50'], 1)}x |"
        )
    return out


def fanout_section(found: dict[str, Any] | None) -> list[str]:
    """Section 6 (fan-out at scale), one row per database and level; nothing without it."""
    if not found:
        return []
    plan = next(iter(found.values()))["plan"]
    out = [
        "",
        f"#### 6. Fan-out at scale (requests of {plan['per_request']} children at once, runs "
        f"of {plan['child_secs']:g} s and {plan['items']} rows; one API, one worker)",
        "",
        "Seconds from the first POST; *closed*: the last master workflow closed (usage "
        "settled, callbacks sent). Per child: history events (master + poller) and CPU ms "
        "by process; *vs first*: per-child ratio to the smallest level (goal ≤ 1.2). "
        "*Floor*: as many bare workflows (one activity, one signal, nothing else) on the same "
        "server and worker process model: all started / all done, CPU ms per child "
        "(Temporal + worker), and its own per-child ratio to the smallest level.",
        "",
        "| db | children | all spawned | all terminal | closed | events (master + poller) "
        "| CPU ms: temporal / worker / api / emulator | total | vs first: spawned / terminal "
        "overhead / CPU | floor: started / done (s), CPU ms | floor vs first: done / CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, entry in found.items():
        if "failed" in entry:
            out.append(f"| {kind} | stopped: {entry['failed']} |" + " |" * 9)
        for level in entry["levels"]:
            cpu = {k: 1000 * v for k, v in level["cpuSecsPerChild"].items()}
            vs = level["vsFirstPerChild"]
            out.append(
                f"| {kind} | {level['children']} | {_num(level['spawnedSecs'], 1)} "
                f"| {_num(level['terminalSecs'], 1)} | {_num(level['closedSecs'], 1)} "
                f"| {_num(level['historyEventsPerChild'], 1)} "
                f"({_num(level['masterEventsPerChild'], 1)} + "
                f"{_num(level['pollerEventsPerChild'], 1)}) "
                f"| {_num(cpu.get('temporal'))} / {_num(cpu.get('worker'))} / "
                f"{_num(cpu.get('api'))} / {_num(cpu.get('emulator'))} "
                f"| {_num(level['cpuMsPerChild'])} "
                f"| {_num(vs['spawned'], 2)} / {_num(vs['overhead'], 2)} / {_num(vs['cpu'], 2)} "
                f"| {_floor_cells(level)} |"
            )
    return out


def _floor_cells(level: dict[str, Any]) -> str:
    """The floor's two cells of a fan-out row (dashes for results from before it)."""
    floor = level.get("floor")
    if not floor:
        return "- | -"
    vs = level.get("floorVsFirstPerChild") or {}
    return (
        f"{_num(floor['startedSecs'], 1)} / {_num(floor['doneSecs'], 1)}, "
        f"{_num(floor['cpuMsPerChildTotal'])} "
        f"| {_num(vs.get('done'), 2)} / {_num(vs.get('cpu'), 2)}"
    )


def table(results: dict[str, Any]) -> str:
    """The whole report as Markdown (tables render readably on a terminal too)."""
    summary = results.get("summary") or summarize(results)
    machine = results["machine"]
    out: list[str] = [
        f"### Benchmark ({results['mode']}, {results['startedAt']}, "
        f"{_num(results.get('durationSecs'), 0)} s)",
        "",
        f"{machine['cpus']} x {machine['cpuModel'] or 'CPU'}, {machine['memGiB']} GiB, "
        f"Python {machine['python']}, SQLite {machine['sqlite']}, "
        f"PostgreSQL {machine['postgresql']}, commit {machine.get('gitCommit')}; "
        f"items ≈ {results['config']['itemBytes']} B, pages of {results['config']['pageSize']}"
        + _load(results)
        + ".",
        "",
        "#### 1. Ingest throughput (rows/s; orchestrator = platform finishedAt → last row stored)",
        "",
        "| db | items | orchestrator | (ingest only) | naive | simple loader "
        "| download only: JSONL (JSON decoded) | insert only: executemany (COPY merged, "
        "COPY direct) | limit | orch / simple | orch / limit | worker RSS before → peak (MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, db in results["databases"].items():
        by_items = {r["items"]: r for r in summary["ratios"].get(kind, [])}
        for ing in db["ingest"]:
            base = db["baselines"].get(str(ing["items"]), {})
            ratio = by_items.get(ing["items"], {})
            insert = _num(_rate(base.get("insert")))
            if base.get("insertCopy"):
                copies = [_num(_rate(base.get(k))) for k in ("insertCopy", "insertCopyDirect")]
                insert += f" ({', '.join(c for c in copies if c != '-')})"
            download = _num(_rate(base.get("download")))
            if base.get("downloadJson"):
                download += f" ({_num(_rate(base.get('downloadJson')))})"
            out.append(
                f"| {kind} | {ing['items']:,} | {_num(ing['rowsPerSec'])} "
                f"| {_num(ing.get('ingestRowsPerSec'))} | {_num(_rate(base.get('naive')))} "
                f"| {_num(_rate(base.get('simple')))} | {download} "
                f"| {insert} | {_num(ratio.get('limit'))} ({ratio.get('limitBoundBy', '')}) "
                f"| {_num(ratio.get('vsSimple'), 2)} | {_num(ratio.get('vsLimit'), 2)} "
                f"| {_num(ing['workerRssBeforeMiB'])} → {_num(ing['workerRssPeakMiB'])} |"
            )
    sqlite = results["databases"].get("sqlite", {})
    if sqlite.get("latency"):
        out += [
            "",
            "#### 2. Completion latency (platform finishedAt → rows visible through the API, s)",
            "",
            "| path | children | p50 | p95 | max | recorded p95 | polls / child | target p95 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for lat in sqlite["latency"]:
            goal = (
                WEBHOOK_P95_SECS
                if lat["webhooks"]
                else results["config"]["pollIntervalSecs"] + POLL_SLACK_SECS
            )
            path = (
                "webhooks"
                if lat["webhooks"]
                else f"poll only (interval {results['config']['pollIntervalSecs']:g} s)"
            )
            out.append(
                f"| {path} | {lat['visible']}/{lat['children']} | {_num(lat['p50'], 2)} "
                f"| {_num(lat['p95'], 2)} | {_num(lat['max'], 2)} "
                f"| {_num(lat['recordedP95'], 2)} | {lat['pollsPerChild']} | ≤ {goal:g} |"
            )
    fan = sqlite.get("fanout")
    if fan:
        out += [
            "",
            "#### 3. Fan-out (one request)",
            "",
            "| children | POST → all spawned (s) | POST → succeeded (s) | state |",
            "|---:|---:|---:|---|",
            f"| {fan['children']} | {_num(fan['spawnedSecs'], 2)} | "
            f"{_num(fan['succeededSecs'], 2)} | {fan['state']} ({fan['succeeded']} succeeded) |",
        ]
    out += [
        "",
        "#### 4. Platform calls per child (emulator counts; bound 3 + ⌈items / page⌉)",
        "",
        "Reads that settle a run's usage after its end are counted apart (last column).",
        "",
        "| scenario | items / child | start | status | dataset pages | other | total | bound "
        "| usage settling |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, db in results["databases"].items():
        for ing in db["ingest"]:
            c = ing["platformCalls"]
            out.append(
                f"| ingest, {kind} | {ing['items']:,} | {c['start']} | {c['status']} "
                f"| {c['datasetPages']} | {c['other']} | {sum(c.values())} | {ing['callBound']} "
                f"| {ing.get('usageSettleReads', '—')} |"
            )
    if fan:
        c = fan["callsPerChild"]
        out.append(
            f"| fan-out, {fan['children']} children (mean) | 100 | {c['start']:g} "
            f"| {c['status']:g} | {c['datasetPages']:g} | {c['other']:g} "
            f"| {sum(c.values()):g} (max {fan['maxEventCallsOneChild']} from events) "
            f"| {fan['callBound']} | — |"
        )
    out += load_section(results.get("load"))
    out += fanout_section(results.get("fanoutAtScale"))
    cpu_rows = [
        (f"ingest {ing['items']:,}, {kind}", ing["cpuSecs"])
        for kind, db in results["databases"].items()
        for ing in db["ingest"]
        if ing.get("cpuSecs")
    ]
    if fan and fan.get("cpuSecs"):
        cpu_rows.append((f"fan-out {fan['children']}", fan["cpuSecs"]))
    for entry in (results.get("load") or {}).get("runs", []):
        cpu_rows.append((f"load, {entry['workers']} worker(s)", _workers_summed(entry["cpuSecs"])))
    if cpu_rows:
        names = ("temporal", "emulator", "api", "worker", "bench")
        out += [
            "",
            "#### CPU seconds per process during the scenario (2 cores)",
            "",
            "| scenario | " + " | ".join(names) + " |",
            "|---|" + "---:|" * len(names),
        ]
        for label, spent in cpu_rows:
            out.append(f"| {label} | " + " | ".join(_num(spent.get(n), 1) for n in names) + " |")
    out += ["", "#### Targets", "", "| target | measured | goal | |", "|---|---:|---|---|"]
    for t in summary["targets"]:
        value = t["value"]
        shown = "-" if value is None else (f"{value:g}" if isinstance(value, float) else value)
        out.append(f"| {t['target']} | {shown} | {t['goal']} | {'PASS' if t['met'] else 'MISS'} |")
    notes = [
        f"naive baseline runs up to {n:,} items on {k}"
        for k, n in results["plan"]["naive_max"].items()
        if n < max(results["plan"]["sizes"])
    ]
    if notes:
        out += ["", "Notes: " + "; ".join(notes) + "."]
    return "\n".join(out)
