"""Engine construction and migrations for SQLite and PostgreSQL.

SQLite is tuned for one writer at a time among several processes: WAL, ``synchronous=NORMAL``,
a busy timeout, and ``BEGIN IMMEDIATE`` for every transaction, because a deferred
transaction that reads and then writes fails with "database is locked" under concurrency
whatever the busy timeout (measured in shared/reference/temporal-notes.md §4).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


READ_ONLY_OPTION = "orchestrator_read_only"


def read_only(engine: Engine) -> Engine:
    """The same engine (same pool) for transactions that only read.

    On SQLite they begin DEFERRED, so in WAL mode they never wait for a writer; every other
    transaction begins IMMEDIATE. Never write through it. No effect on PostgreSQL.
    """
    return engine.execution_options(**{READ_ONLY_OPTION: True})


def build_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url`` with this project's connection settings applied."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30}, **kwargs)
        _tune_sqlite(engine)
        return engine
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        # Plain postgresql:// would pick psycopg2; we ship psycopg 3.
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)


def _tune_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN instead of pysqlite's implicit one.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.get_execution_options().get(READ_ONLY_OPTION):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


def migrate(engine: Engine) -> None:
    """Bring the database to the newest schema (idempotent; safe from several processes)."""
    command.upgrade(alembic_config(engine), "head")
