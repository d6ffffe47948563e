"""The fast row text is the row: serving pages as text must not change a byte of a dataset."""

from __future__ import annotations

import json
from typing import Any

import pytest

from apify_emulator import EmulatorConfig
from apify_emulator.actors import find_actor, plan_run, row, row_texts
from apify_emulator.api import ITEMS_CHUNK, ITEMS_WHOLE, _ItemsQuery

from .conftest import local, make_config

GENERATOR_INPUTS: list[dict[str, Any]] = [
    {"items": 10, "seed": "plain"},
    {"items": 10, "seed": 'é\x1f"quote', "itemBytes": 10, "emptyEvery": 3, "hiddenFields": True},
    {"items": 10, "seed": 7, "itemBytes": 100, "hiddenFields": True},
    {"items": 10, "itemBytes": 4000, "emptyEvery": 1},
]
INDEXES = [*range(40), 999_999_999, 1_000_000_000, 12_345_678_901]


def _script(inp: dict[str, Any]) -> Any:
    actor = find_actor("~generator", "ultron")
    assert actor is not None
    return plan_run(actor, inp, None)


@pytest.mark.parametrize("inp", GENERATOR_INPUTS)
def test_generator_text_is_json_dumps_of_the_row(inp: dict[str, Any]) -> None:
    script = _script(inp)
    for window in (range(0, 40), range(39, -1, -1), range(999_999_999, 1_000_000_001)):
        texts = row_texts(script.kind, script.params, window)
        assert texts is not None
        expected = [
            json.dumps(row(script.kind, script.params, i), ensure_ascii=False) for i in window
        ]
        assert list(texts) == expected
    sparse = [
        next(iter(row_texts(script.kind, script.params, range(i, i + 1)) or [])) for i in INDEXES
    ]
    assert sparse == [
        json.dumps(row(script.kind, script.params, i), ensure_ascii=False) for i in INDEXES
    ]


def test_kinds_without_a_fast_path_say_so() -> None:
    assert row_texts("similarweb", {"domains": ["a.com"]}, range(1)) is None
    assert row_texts("leadgen", {}, range(1)) is None


async def _read(
    cfg: EmulatorConfig, inp: dict[str, Any], params: dict[str, Any]
) -> tuple[bytes, Any]:
    async with local(cfg) as http:
        started = await http.post(
            "/v2/actors/ultron~generator/runs", params={"waitForFinish": 30}, json=inp
        )
        run = started.json()["data"]
        assert run["status"] == "SUCCEEDED"
        page = await http.get(f"/v2/datasets/{run['defaultDatasetId']}/items", params=params)
        assert page.status_code == 200
        return page.content, page.headers


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
@pytest.mark.parametrize(
    "query",
    [
        {},
        {"desc": 1, "offset": 3},
        {"clean": 1},
        {"skipEmpty": 1, "limit": ITEMS_CHUNK + 7},
        {"fields": "id,#debug,payload", "outputFields": "key,dbg,p"},
        {"omit": "payload", "skipHidden": 1},
    ],
)
async def test_pages_are_the_rows_shaped_in_both_formats(fmt: str, query: dict[str, Any]) -> None:
    """Whole answers and streamed ones (past ITEMS_WHOLE, several chunks) hold exactly the
    rows the object path gives, for every filter the fast path must step aside for."""
    items = ITEMS_WHOLE + ITEMS_CHUNK + 3
    inp = {
        "items": items,
        "durationSecs": 0,
        "itemBytes": 80,
        "emptyEvery": 4,
        "hiddenFields": True,
    }
    body, headers = await _read(make_config(), inp, {**query, "format": fmt})
    script = _script(inp)
    shaping = _ItemsQuery(
        fmt=fmt,
        offset=int(query.get("offset", 0)),
        limit=query.get("limit"),
        desc=bool(query.get("desc")),
        skip_empty=bool(query.get("clean") or query.get("skipEmpty")),
        skip_hidden=bool(query.get("clean") or query.get("skipHidden")),
        fields=[f for f in str(query.get("fields", "")).split(",") if f],
        output_fields=[f for f in str(query.get("outputFields", "")).split(",") if f],
        omit={f for f in str(query.get("omit", "")).split(",") if f},
        flatten=[],
    )
    offset = shaping.offset
    end = items if shaping.limit is None else min(items, offset + shaping.limit)
    window = (
        range(offset, end) if not shaping.desc else range(items - 1 - offset, items - 1 - end, -1)
    )
    expected = list(shaping.items(script, window))
    if fmt == "json":
        assert json.loads(body) == expected
        texts = ",".join(json.dumps(e, ensure_ascii=False) for e in expected)
        assert body == f"[{texts}]".encode()
    else:
        assert body == "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in expected).encode()
    assert headers["x-apify-pagination-count"] == str(len(window))


async def test_empty_windows_are_empty_documents() -> None:
    inp = {"items": 3, "durationSecs": 0}
    assert (await _read(make_config(), inp, {"offset": 5}))[0] == b"[]"
    assert (await _read(make_config(), inp, {"offset": 5, "format": "jsonl"}))[0] == b""
