"""Activity ``reconcile_drift``: one drift-repair pass (``service/reconcile.py``)."""

from __future__ import annotations

from temporalio import activity

from orchestrator.service.reconcile import Reconciler
from orchestrator.workflows.types import ReconcileResult


class ReconcileActivities:
    def __init__(self, reconciler: Reconciler) -> None:
        self._reconciler = reconciler

    @activity.defn(name="reconcile_drift")
    async def reconcile_drift(self) -> ReconcileResult:
        result = await self._reconciler.reconcile()
        if result.masters_restarted or result.pollers_restarted:
            activity.logger.warning(
                "reconciler repaired drift: %d master(s), %d poller(s) restarted",
                result.masters_restarted,
                result.pollers_restarted,
            )
        return result
