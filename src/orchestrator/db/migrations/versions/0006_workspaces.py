"""workspaces: per-workspace callback signing secret nonces (current and previous).

Revision ID: 0006_workspaces
Revises: 0005_api_keys
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_workspaces"
down_revision = "0005_api_keys"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "workspaces",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("secret_nonce", sa.String(64), nullable=False),
        sa.Column("previous_secret_nonce", sa.String(64)),
        sa.Column("previous_secret_expires_at", TS),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("secret_rotated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_workspaces"),
    )


def downgrade() -> None:
    op.drop_table("workspaces")
