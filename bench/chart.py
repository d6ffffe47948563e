"""A dependency-free SVG bar chart of ingest throughput from a results file.

``python -m bench.chart RESULTS.json OUT.svg`` redraws it. One group of horizontal bars per
database and dataset size: the naive script, the simple loader, the orchestrator, and the two
halves of the limit, on one linear rows-per-second axis shared by every group, so bar lengths
compare across groups.

Trade-off: hand-written SVG (a few dozen lines) instead of a plotting library: no new
dependency, a diff-friendly text file in docs/, and no styling beyond what the point needs.
"""

from __future__ import annotations

import json
import sys
from html import escape
from pathlib import Path
from typing import Any

SERIES = (
    ("naive", "naive (call + list_items + INSERT per row)", "#b0b0b0"),
    ("simple", "simple loader (pages, executemany)", "#7f9fbf"),
    ("orchestrator", "orchestrator (finishedAt → last row)", "#d9822b"),
    ("download", "limit: download only (JSONL)", "#5fa55a"),
    ("insert", "limit: insert only (best method)", "#2f6f2c"),
)
BAR_H = 13
GAP = 3
LABEL_W = 150
PLOT_W = 560
RIGHT_W = 90


def _values(db: dict[str, Any], ing: dict[str, Any]) -> dict[str, float | None]:
    base = db["baselines"].get(str(ing["items"]), {})
    inserts = [
        float(base[k]["rowsPerSec"])
        for k in ("insert", "insertCopy", "insertCopyDirect")
        if base.get(k) and base[k].get("rowsPerSec")
    ]

    def rate(name: str) -> float | None:
        entry = base.get(name)
        return float(entry["rowsPerSec"]) if entry and entry.get("rowsPerSec") else None

    return {
        "naive": rate("naive"),
        "simple": rate("simple"),
        "orchestrator": float(ing["rowsPerSec"]),
        "download": rate("download"),
        "insert": max(inserts) if inserts else None,
    }


def render(results: dict[str, Any]) -> str:
    groups: list[tuple[str, dict[str, float | None]]] = []
    for kind, db in results["databases"].items():
        for ing in db["ingest"]:
            groups.append((f"{kind}, {ing['items']:,} items", _values(db, ing)))
    top = max((v for _, vals in groups for v in vals.values() if v), default=1.0)
    group_h = len(SERIES) * (BAR_H + GAP) + 14
    legend_h = len(SERIES) * 16 + 10
    title_h = 40
    width = LABEL_W + PLOT_W + RIGHT_W
    height = title_h + len(groups) * group_h + legend_h + 24
    machine = results["machine"]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        '<text x="8" y="18" font-size="14" font-weight="bold">Ingest throughput, rows/s '
        "(higher is better)</text>",
        f'<text x="8" y="33" fill="#555">{escape(results["mode"])} run '
        f"{escape(results['startedAt'])}"
        f" · {machine['cpus']} CPUs · items ≈ {results['config']['itemBytes']} B</text>",
    ]
    y = title_h
    for label, values in groups:
        parts.append(f'<text x="8" y="{y + group_h / 2}" font-weight="bold">{escape(label)}</text>')
        for i, (key, _, color) in enumerate(SERIES):
            value = values.get(key)
            by = y + i * (BAR_H + GAP)
            if value is None:
                parts.append(
                    f'<text x="{LABEL_W + 2}" y="{by + BAR_H - 3}" fill="#999">not run</text>'
                )
                continue
            w = max(1.0, PLOT_W * value / top)
            parts.append(
                f'<rect x="{LABEL_W}" y="{by}" width="{w:.1f}" height="{BAR_H}" fill="{color}"/>'
            )
            parts.append(
                f'<text x="{LABEL_W + w + 4:.1f}" y="{by + BAR_H - 3}">{value:,.0f}</text>'
            )
        y += group_h
    parts.append(
        f'<line x1="{LABEL_W}" y1="{title_h - 4}" x2="{LABEL_W}" y2="{y - 10}" stroke="#333"/>'
    )
    y += 6
    for i, (_, name, color) in enumerate(SERIES):
        ly = y + i * 16
        parts.append(f'<rect x="{LABEL_W}" y="{ly}" width="12" height="12" fill="{color}"/>')
        parts.append(f'<text x="{LABEL_W + 18}" y="{ly + 10}">{escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -m bench.chart RESULTS.json OUT.svg\n")
        return 2
    results = json.loads(Path(argv[0]).read_text())
    Path(argv[1]).write_text(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
