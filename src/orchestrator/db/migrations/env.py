"""Alembic environment: runs migrations on the engine handed over by ``db.engine.migrate``.

On PostgreSQL an advisory lock serialises processes that start at the same moment; on
SQLite the ``BEGIN IMMEDIATE`` transaction does the same.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Engine, text

from orchestrator.db.schema import metadata

MIGRATION_LOCK_ID = 7_204_001


def run_migrations_online() -> None:
    engine: Engine = context.config.attributes["engine"]
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as connection:
        if not sqlite:
            connection.execute(text("SELECT pg_advisory_lock(:id)"), {"id": MIGRATION_LOCK_ID})
            connection.commit()
        try:
            context.configure(
                connection=connection,
                target_metadata=metadata,
                render_as_batch=sqlite,
                transaction_per_migration=False,
            )
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
        finally:
            if not sqlite:
                connection.execute(
                    text("SELECT pg_advisory_unlock(:id)"), {"id": MIGRATION_LOCK_ID}
                )
                connection.commit()


if context.is_offline_mode():  # pragma: no cover - we only migrate online
    raise SystemExit("offline migrations are not supported; run `orchestrator migrate`")
run_migrations_online()
