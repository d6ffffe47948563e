"""Identifiers: our own ids, and the Temporal workflow ids derived from them.

Workflow ids are derived deterministically so that starting a workflow twice for the same
request or child is recognised by Temporal as the same execution.
"""

from __future__ import annotations

import secrets

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def _random(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(20))


def new_run_id() -> str:
    """A new request id: ``run_`` and 20 random base32 characters (100 bits)."""
    return _random("run_")


def new_plan_id() -> str:
    """A new plan id: ``plan_`` and 20 random base32 characters."""
    return _random("plan_")


def child_id(run_id: str, index: int) -> str:
    """The id of the ``index``-th child of a request."""
    return f"{run_id}.{index}"


def orchestrator_workflow_id(run_id: str) -> str:
    return f"scrape/{run_id}"


def poller_workflow_id(child: str) -> str:
    return f"scrape-child/{child}"


def admission_workflow_id(task_queue: str) -> str:
    """The one admission workflow of a task queue (every worker of it shares the account)."""
    return f"admission/{task_queue}"
