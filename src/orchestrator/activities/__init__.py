"""Temporal activities: every side effect of the workflows, built from injected clients.

Each activity is idempotent: it can be retried, or run again after a worker crash, and the
database and the platform end up as if it had run once.
"""
