"""Database look-ups that only tests need (the product reads rows through db/queries)."""

from __future__ import annotations

from sqlalchemy import Connection, func, select

from orchestrator.db.schema import scrape_items, scrape_runs


def count_items(conn: Connection, run_id: str) -> int:
    """Every stored row of a request, whichever child it came from."""
    query = select(func.count()).select_from(scrape_items).where(scrape_items.c.run_id == run_id)
    return int(conn.execute(query).scalar_one())


def count_runs(conn: Connection, workspace_id: str) -> int:
    """Every stored request of a workspace."""
    mine = scrape_runs.c.workspace_id == workspace_id
    query = select(func.count()).select_from(scrape_runs).where(mine)
    return int(conn.execute(query).scalar_one())
