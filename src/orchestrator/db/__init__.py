"""The app database: SQLAlchemy Core tables, engine set-up, Alembic migrations and queries.

One code path serves SQLite (the default, a local file) and PostgreSQL (at scale).
"""
