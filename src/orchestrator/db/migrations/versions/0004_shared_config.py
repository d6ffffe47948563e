"""shared_config: operator-editable shared configuration (actor registry, defaults).

Revision ID: 0004_shared_config
Revises: 0003_scrape_events
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_shared_config"
down_revision = "0003_scrape_events"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shared_config",
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("value_json", sa.Text, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_shared_config"),
    )


def downgrade() -> None:
    op.drop_table("shared_config")
