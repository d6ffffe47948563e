"""actor_catalog_changes: the actor catalog's versioned change log; scrape_runs.catalog_version:
the catalog version a request was validated against (null for requests from before).

Entries already in shared_config are recorded as versions 1..n ("created" by "migration"),
in name order, so the log starts from what the catalog holds and version 0 means empty.

Revision ID: 0011_actor_catalog
Revises: 0010_budget_stop
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0011_actor_catalog"
down_revision = "0010_budget_stop"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
_PREFIX = "actor:"


def upgrade() -> None:
    changes = op.create_table(
        "actor_catalog_changes",
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("change", sa.String(16), nullable=False),
        sa.Column("entry_json", sa.Text()),
        sa.Column("changed_by", sa.String(128), nullable=False),
        sa.Column("changed_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("version", name="pk_actor_catalog_changes"),
    )
    op.create_index("ix_actor_catalog_changes_actor", "actor_catalog_changes", ["actor", "version"])
    op.add_column("scrape_runs", sa.Column("catalog_version", sa.Integer(), nullable=True))
    shared_config = sa.table(
        "shared_config", sa.column("key", sa.String()), sa.column("value_json", sa.Text())
    )
    existing = op.get_bind().execute(
        sa.select(shared_config.c.key, shared_config.c.value_json)
        .where(shared_config.c.key.startswith(_PREFIX))
        .order_by(shared_config.c.key)
    )
    now = datetime.now(UTC)
    rows = [
        {
            "version": version,
            "actor": key.removeprefix(_PREFIX),
            "change": "created",
            "entry_json": value,
            "changed_by": "migration",
            "changed_at": now,
        }
        for version, (key, value) in enumerate(existing, start=1)
    ]
    if rows:
        op.bulk_insert(changes, rows)


def downgrade() -> None:
    with op.batch_alter_table("scrape_runs") as batch:
        batch.drop_column("catalog_version")
    op.drop_index("ix_actor_catalog_changes_actor", table_name="actor_catalog_changes")
    op.drop_table("actor_catalog_changes")
