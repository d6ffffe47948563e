"""api_keys: bearer API keys, stored as SHA-256 hashes, scoped to a workspace or admin.

Revision ID: 0005_api_keys
Revises: 0004_shared_config
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_api_keys"
down_revision = "0004_shared_config"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("workspace_id", sa.String(128)),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("revoked_at", TS),
        sa.Column("last_used_at", TS),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
    )
    op.create_index("ix_api_keys_workspace_id", "api_keys", ["workspace_id"])


def downgrade() -> None:
    op.drop_index("ix_api_keys_workspace_id", table_name="api_keys")
    op.drop_table("api_keys")
