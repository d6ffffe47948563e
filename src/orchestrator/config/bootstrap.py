"""Start-up work shared by the API and the worker: migrate the database, seed shared config."""

from __future__ import annotations

import logging
from importlib import resources

from sqlalchemy import Engine

from orchestrator.config.settings import Settings
from orchestrator.db.engine import build_engine, migrate
from orchestrator.db.queries.registry import load_registry_file, seed_registry

log = logging.getLogger(__name__)


def bundled_registry_text() -> str:
    return resources.files("orchestrator.config").joinpath("actors.json").read_text("utf-8")


def prepare_database(settings: Settings) -> Engine:
    """An engine on a migrated database whose actor registry is seeded."""
    engine = build_engine(settings.database_url)
    migrate(engine)
    text = (
        settings.actor_registry_file.read_text("utf-8")
        if settings.actor_registry_file
        else bundled_registry_text()
    )
    with engine.begin() as conn:
        written = seed_registry(conn, load_registry_file(text))
    if written:
        log.info("actor registry: %d entr%s seeded", written, "y" if written == 1 else "ies")
    return engine
