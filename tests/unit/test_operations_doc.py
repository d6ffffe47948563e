"""docs/OPERATIONS.md lists every setting with its real default, so operators can trust it."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.config.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "OPERATIONS.md"


def test_every_setting_is_documented_with_its_default() -> None:
    rows = dict(
        re.findall(r"^\| `ORCHESTRATOR_([A-Z0-9_]+)` \| `([^`]*)` \|", DOC.read_text(), re.M)
    )
    for name, field in Settings.model_fields.items():
        key = name.upper()
        assert key in rows, f"ORCHESTRATOR_{key} is missing from docs/OPERATIONS.md"
        default = field.default
        if isinstance(default, bool | int | float) or (isinstance(default, str) and default):
            assert rows[key] == str(default), f"ORCHESTRATOR_{key}: documented {rows[key]!r}"
