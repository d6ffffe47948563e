from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import Engine

from tests.unit.api_harness import Api, api_for


@pytest.fixture
async def api(sqlite_engine: Engine) -> AsyncIterator[Api]:
    """The in-process API on SQLite: the formats it enforces do not depend on the engine."""
    async with api_for(sqlite_engine) as a:
        yield a
