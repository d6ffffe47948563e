"""Chained runs: a child's input sources (scrape_children.input_from_json, the earlier runs'
row fields its input fields are built from; null for a run that is not chained) and, once
built, the number of values per field (input_built_json) and when (input_built_at).

Revision ID: 0012_step_inputs
Revises: 0011_actor_catalog
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_step_inputs"
# Re-chained onto 0011 when the branches are merged.
down_revision = "0011_actor_catalog"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scrape_children") as batch:
        batch.add_column(sa.Column("input_from_json", sa.Text(), nullable=True))
        batch.add_column(sa.Column("input_built_json", sa.Text(), nullable=True))
        batch.add_column(sa.Column("input_built_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scrape_children") as batch:
        batch.drop_column("input_built_at")
        batch.drop_column("input_built_json")
        batch.drop_column("input_from_json")
