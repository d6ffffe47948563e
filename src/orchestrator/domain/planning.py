"""From a brief to a plan: which actor meets each need, with what input, in which order,
how many rows to expect and what it should cost. Pure and deterministic.

The knowledge is data, declared per actor in the catalog's ``planning`` section, never code
per actor:

- ``inputs``: for each input field, the sources to try in order. ``{"from": "brief.x"}`` takes
  a value from the caller's brief context (``brief``, ``icp``, ``limits``; a dotted path), and
  ``{"need": "leads", "field": "domain", "max": 500}`` takes the distinct values of ``field``
  from the rows of the step chosen for that need (a chained step). The first source that
  resolves is used; a required input none of whose sources resolves rules the actor out.
- ``rows``: the rows to expect: ``{"from": "brief.targetCount", "default": 100}``, or
  ``{"perValue": "domains"}`` (one row per value of that input).
- ``rowEvent``: for pay-per-event actors, the event charged per row (the start events are
  the platform's own).
- ``priority``: breaks ties between actors that cost the same (higher first).

The rule (:class:`CatalogPlanner`): for each need, in the caller's order, the candidates are
the actors with that capability whose inputs resolve; the cheapest estimate wins, then the
higher priority, then the name. Steps are ordered so that a step comes after the steps it
takes rows from. A need no actor can meet is refused naming ``/needs/N`` and saying why for
every candidate. The estimate is the charge the pricing record implies for the expected rows
(pay per event: start events plus one row event per row; pay per result: rows times the
price); platform usage of free and rented actors is not estimated (said in the plan).

Another strategy (one that asks a language model, say) implements :class:`Planner` and gets
the same catalog and brief; the rest of the system sees only :class:`Plan`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from orchestrator.domain.errors import ValidationFailed
from orchestrator.domain.pricing import (
    FREE,
    PAY_PER_EVENT,
    PRICE_PER_DATASET_ITEM,
    START_EVENT,
    ActorPricing,
    minimum_charge_usd,
    start_events,
)

#: Values a chained input takes from earlier rows when its source declares no ``max``.
DEFAULT_CHAIN_MAX = 1000


class NeedCannotBeMet(ValidationFailed):
    """A need no catalog actor can meet with this brief (``field``: ``/needs/N``)."""


@dataclass(frozen=True)
class InputSource:
    """One way to fill an input field: from the brief context, or from an earlier step."""

    path: str | None = None
    need: str | None = None
    field: str | None = None
    max: int | None = None


@dataclass(frozen=True)
class RowsRule:
    path: str | None = None
    default: int | None = None
    per_value: str | None = None


@dataclass(frozen=True)
class PlannableActor:
    """What the planner knows of one catalog actor."""

    name: str
    capabilities: tuple[str, ...]
    inputs: Mapping[str, tuple[InputSource, ...]] = field(default_factory=dict)
    required: frozenset[str] = frozenset()
    rows: RowsRule = RowsRule()
    row_event: str | None = None
    priority: int = 0
    pricing: ActorPricing | None = None
    memory_mb: int | None = None
    description: str = ""


@dataclass(frozen=True)
class BriefRequest:
    needs: tuple[str, ...]
    brief: Mapping[str, Any]
    icp: Mapping[str, Any]
    limits: Mapping[str, Any] = field(default_factory=dict)
    budget_usd: float | None = None


@dataclass(frozen=True)
class ChainedInput:
    """An input built from an earlier step's rows: the distinct ``field`` values, at most
    ``max`` (the request's ``inputFrom`` entry)."""

    step: int
    field: str
    max: int


@dataclass(frozen=True)
class PlanStep:
    index: int
    need: str
    actor: str
    input: dict[str, Any]
    input_from: dict[str, ChainedInput]
    depends_on: tuple[int, ...]
    expected_rows: int
    estimated_cost_usd: float
    minimum_charge_usd: float
    why: str
    rejected: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    strategy: str
    steps: tuple[PlanStep, ...]
    expected_rows: int
    estimated_cost_usd: float
    minimum_charge_usd: float
    budget_usd: float | None
    notes: tuple[str, ...] = ()


class Planner(Protocol):
    """A planning strategy: a brief and the catalog in, a plan (or NeedCannotBeMet) out."""

    name: str

    def plan(self, request: BriefRequest, actors: Sequence[PlannableActor]) -> Plan: ...


def resolve_path(context: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` of ``context``; None when any part is missing."""
    value: Any = context
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _usd(amount: Decimal) -> float:
    return float(amount.quantize(Decimal("0.000001")))


def estimate_charge_usd(
    pricing: ActorPricing | None, memory_mb: int | None, rows: int, row_event: str | None
) -> float:
    """What ``rows`` rows should be charged under the pricing record (platform usage of free
    and rented actors is not included)."""
    if pricing is None or pricing.model == FREE:
        return 0.0
    if pricing.model == PAY_PER_EVENT:
        total = Decimal(0)
        start = pricing.events.get(START_EVENT)
        if start is not None:
            total += Decimal(str(start.price_usd)) * start_events(memory_mb)
        event = pricing.events.get(row_event) if row_event else None
        if event is not None:
            total += Decimal(str(event.price_usd)) * rows
        return _usd(total)
    if pricing.model == PRICE_PER_DATASET_ITEM:
        return _usd(Decimal(str(pricing.price_per_unit_usd or 0)) * rows)
    return 0.0  # FLAT_PRICE_PER_MONTH: the rent is monthly, not per run


@dataclass
class _Candidate:
    actor: PlannableActor
    input: dict[str, Any]
    input_from: dict[str, tuple[str, InputSource]]  # field -> (need, source)
    rows: int
    cost: float


class CatalogPlanner:
    """The deterministic strategy: capabilities, declared mappings and prices (see above)."""

    name = "catalog"

    def plan(self, request: BriefRequest, actors: Sequence[PlannableActor]) -> Plan:
        if not request.needs:
            raise ValidationFailed("needs must name at least one capability", field="/needs")
        if len(set(request.needs)) != len(request.needs):
            raise ValidationFailed("needs lists a capability twice", field="/needs")
        context = {"brief": request.brief, "icp": request.icp, "limits": request.limits}
        max_rows = _int_limit(request.limits, "maxItemsPerStep")
        chosen: dict[str, _Candidate] = {}
        why: dict[str, tuple[str, tuple[str, ...]]] = {}
        for need in _source_first(request.needs, actors):
            picked = self._choose(need, actors, context, chosen, max_rows)
            if picked is None:
                reasons = self._reasons(need, actors, context, chosen)
                raise NeedCannotBeMet(
                    f"need {need!r} cannot be met: {reasons}",
                    field=f"/needs/{request.needs.index(need)}",
                )
            chosen[need], why[need] = picked[0], (picked[1], picked[2])
        order = list(chosen)  # the planned order: sources before the steps that use them
        steps = []
        for index, need in enumerate(order):
            candidate = chosen[need]
            input_from = {
                name: ChainedInput(
                    step=order.index(source_need),
                    field=source.field or "",
                    max=source.max or DEFAULT_CHAIN_MAX,
                )
                for name, (source_need, source) in candidate.input_from.items()
            }
            steps.append(
                PlanStep(
                    index=index,
                    need=need,
                    actor=candidate.actor.name,
                    input=candidate.input,
                    input_from=input_from,
                    depends_on=tuple(sorted({c.step for c in input_from.values()})),
                    expected_rows=candidate.rows,
                    estimated_cost_usd=candidate.cost,
                    minimum_charge_usd=minimum_charge_usd(
                        candidate.actor.pricing, candidate.actor.memory_mb
                    ),
                    why=why[need][0],
                    rejected=why[need][1],
                )
            )
        return self._finish(request, tuple(steps), chosen)

    def _finish(
        self, request: BriefRequest, steps: tuple[PlanStep, ...], chosen: dict[str, _Candidate]
    ) -> Plan:
        notes: list[str] = []
        estimate = math.fsum(s.estimated_cost_usd for s in steps)
        minimum = math.fsum(s.minimum_charge_usd for s in steps)
        unpriced = [c.actor.name for c in chosen.values() if not _priced(c.actor.pricing)]
        if unpriced:
            notes.append("platform usage (compute) of " + ", ".join(unpriced) + " is not estimated")
        if request.budget_usd is not None and estimate > request.budget_usd:
            notes.append(
                f"the estimate (${estimate:.4f}) is above the budget (${request.budget_usd:.4f}): "
                "the request will be stopped when the budget is spent"
            )
        return Plan(
            strategy=self.name,
            steps=steps,
            expected_rows=sum(s.expected_rows for s in steps),
            estimated_cost_usd=round(estimate, 6),
            minimum_charge_usd=round(minimum, 6),
            budget_usd=request.budget_usd,
            notes=tuple(notes),
        )

    def _choose(
        self,
        need: str,
        actors: Sequence[PlannableActor],
        context: Mapping[str, Any],
        chosen: Mapping[str, _Candidate],
        max_rows: int | None,
    ) -> tuple[_Candidate, str, tuple[str, ...]] | None:
        """The best candidate for ``need`` given the needs already planned, why, and why
        not the others; None when no candidate resolves."""
        capable = sorted((a for a in actors if need in a.capabilities), key=lambda a: a.name)
        viable: list[_Candidate] = []
        rejected: list[str] = []
        for actor in capable:
            candidate = _resolve(actor, context, chosen, max_rows)
            if isinstance(candidate, str):
                rejected.append(f"{actor.name}: {candidate}")
            else:
                viable.append(candidate)
        if not viable:
            return None
        viable.sort(key=lambda c: (c.cost, -c.actor.priority, c.actor.name))
        best, others = viable[0], viable[1:]
        if not others and not rejected:
            reason = f"the only catalog actor with capability {need!r}"
        elif not others:
            reason = f"the only actor with capability {need!r} whose inputs this brief provides"
        else:
            listed = ", ".join(f"{c.actor.name} ${c.cost:.4f}" for c in others)
            reason = f"the lowest estimated cost (${best.cost:.4f}; also possible: {listed})"
        rejected.extend(f"{c.actor.name}: estimated ${c.cost:.4f}" for c in others)
        return best, reason, tuple(rejected)

    def _reasons(
        self,
        need: str,
        actors: Sequence[PlannableActor],
        context: Mapping[str, Any],
        chosen: Mapping[str, _Candidate],
    ) -> str:
        capable = sorted((a for a in actors if need in a.capabilities), key=lambda a: a.name)
        if not capable:
            known = sorted({c for a in actors for c in a.capabilities})
            return "no catalog actor has this capability (known: " + ", ".join(known) + ")"
        parts = []
        for actor in capable:
            why = _resolve(actor, context, chosen, None)
            if isinstance(why, str):
                parts.append(f"{actor.name} {why}")
        return "; ".join(parts)


def _source_first(needs: Sequence[str], actors: Sequence[PlannableActor]) -> list[str]:
    """The needs in the caller's order, except that a need comes after the needs its
    actors' chained inputs take rows from (a cycle keeps the caller's order)."""
    uses = {
        need: {
            source.need
            for actor in actors
            if need in actor.capabilities
            for sources in actor.inputs.values()
            for source in sources
            if source.need in needs and source.need != need
        }
        for need in needs
    }
    ordered: list[str] = []
    while len(ordered) < len(needs):
        ready = [n for n in needs if n not in ordered and uses[n] <= set(ordered)]
        if not ready:  # a cycle: the rest in the caller's order
            ordered.extend(n for n in needs if n not in ordered)
            break
        ordered.append(ready[0])
    return ordered


def _priced(pricing: ActorPricing | None) -> bool:
    return pricing is not None and pricing.model in (PAY_PER_EVENT, PRICE_PER_DATASET_ITEM)


def _int_limit(limits: Mapping[str, Any], name: str) -> int | None:
    value = limits.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValidationFailed(
            f"limits.{name} must be a whole number >= 1", field=f"/limits/{name}"
        )
    return value


def _resolve(
    actor: PlannableActor,
    context: Mapping[str, Any],
    chosen: Mapping[str, _Candidate],
    max_rows: int | None,
) -> _Candidate | str:
    """The actor as a candidate with its inputs filled, or why it cannot be one."""
    static: dict[str, Any] = {}
    chained: dict[str, tuple[str, InputSource]] = {}
    for name, sources in actor.inputs.items():
        for source in sources:
            if source.path is not None:
                value = resolve_path(context, source.path)
                if value is not None:
                    static[name] = value
                    break
            elif source.need is not None and source.need in chosen:
                chained[name] = (source.need, source)
                break
        else:
            if name in actor.required:
                return f"needs input {name!r}: " + _missing(sources)
    rows = _expected_rows(actor, context, static, chained, chosen)
    if max_rows is not None:
        rows = min(rows, max_rows)
    cost = estimate_charge_usd(actor.pricing, actor.memory_mb, rows, actor.row_event)
    return _Candidate(actor, static, chained, rows, cost)


def _missing(sources: tuple[InputSource, ...]) -> str:
    said = []
    for source in sources:
        if source.path is not None:
            said.append(f"{source.path} is not in the brief")
        elif source.need is not None:
            said.append(f"no step meets need {source.need!r} (add it to needs)")
    return ", and ".join(said) or "no source is declared"


def _expected_rows(
    actor: PlannableActor,
    context: Mapping[str, Any],
    static: Mapping[str, Any],
    chained: Mapping[str, tuple[str, InputSource]],
    chosen: Mapping[str, _Candidate],
) -> int:
    rule = actor.rows
    if rule.per_value is not None:
        if rule.per_value in static:
            value = static[rule.per_value]
            return len(value) if isinstance(value, list) else 1
        if rule.per_value in chained:
            need, source = chained[rule.per_value]
            return min(chosen[need].rows, source.max or DEFAULT_CHAIN_MAX)
        return 0
    if rule.path is not None:
        value = resolve_path(context, rule.path)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return rule.default or 0
