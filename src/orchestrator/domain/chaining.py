"""Chained runs: a run whose input fields are built from an earlier run's rows.

A request's run may say ``inputFrom: {"domains": {"run": 0, "field": "domain"}}``: its input
field ``domains`` is the JSON array of the ``domain`` values of run 0's rows. This module
holds the rules, pure so that the service (validation at submission), the activity that
builds the value (``activities/steps.py``) and the workflow (the step graph) share them:

- ``run`` names an *earlier* run of the same request, so the graph is acyclic by
  construction (a forward, self or unknown reference is refused);
- ``field`` is a dotted path into each row (``domain``, ``company.domain``): each segment a
  key of an object; a row where the path is missing or null gives nothing; a path that ends
  on an array gives its non-null elements (one level);
- ``distinct`` (default true) keeps the first occurrence of each value, in row order
  (values are compared as canonical JSON, so ``{"a": 1}`` twice is one value);
- ``max`` caps the number of values; its default and hard maximum is a setting
  (``max_step_input_values``), resolved at submission and stored with the source, so a
  value is always rebuilt the same way.

The trade-off: only whole rows' fields are selected - no filters, no transformations - so a
source is data a planner can emit and a reader can check at a glance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.domain.errors import ValidationFailed


class InvalidInputFrom(ValidationFailed):
    """An ``inputFrom`` source that cannot be built (bad reference, field or cap)."""


@dataclass(frozen=True)
class StepSource:
    """Where one input field of a chained run comes from."""

    run: int
    field: str
    distinct: bool = True
    #: Most values taken; None until resolved against the setting at submission.
    max: int | None = None

    def stored(self) -> dict[str, Any]:
        """The stored (and canonical) form, camel-free because every key is one word."""
        return {"run": self.run, "field": self.field, "distinct": self.distinct, "max": self.max}

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> StepSource:
        return cls(
            run=int(data["run"]),
            field=str(data["field"]),
            distinct=bool(data.get("distinct", True)),
            max=None if data.get("max") is None else int(data["max"]),
        )


def pointer_token(name: str) -> str:
    """A JSON pointer reference token (RFC 6901: ``~`` is ``~0``, ``/`` is ``~1``)."""
    return name.replace("~", "~0").replace("/", "~1")


def check_input_from(
    index: int,
    run_input: Mapping[str, Any],
    input_from: Mapping[str, StepSource],
    *,
    runs: int,
    hard_max: int,
) -> dict[str, StepSource]:
    """Validate run ``index``'s sources; the sources with ``max`` resolved.

    Raises :class:`InvalidInputFrom` naming the offending member as a JSON pointer
    (``/runs/N/inputFrom/<field>/run``, ``.../field``, ``.../max``, or the field itself when
    it is also in the run's ``input``).
    """
    resolved: dict[str, StepSource] = {}
    for name, source in input_from.items():
        at = f"/runs/{index}/inputFrom/{pointer_token(name)}"
        if not name:
            raise InvalidInputFrom("an inputFrom field name must not be empty", field=at)
        if name in run_input:
            raise InvalidInputFrom(
                f"input field {name!r} is given both in input and in inputFrom; keep one",
                field=at,
            )
        if source.run < 0 or source.run >= runs:
            raise InvalidInputFrom(
                f"inputFrom {name!r} names run {source.run}, which is not a run of this "
                f"request (runs 0 to {runs - 1})",
                field=f"{at}/run",
            )
        if source.run >= index:
            which = "itself" if source.run == index else f"a later run ({source.run})"
            raise InvalidInputFrom(
                f"inputFrom {name!r} of run {index} names {which}; a run can only take its "
                "input from an earlier run of the request",
                field=f"{at}/run",
            )
        if not source.field or any(not part for part in source.field.split(".")):
            raise InvalidInputFrom(
                f"inputFrom {name!r}: field must be a row field or a dotted path "
                "(like 'domain' or 'company.domain')",
                field=f"{at}/field",
            )
        if source.max is not None and not 1 <= source.max <= hard_max:
            raise InvalidInputFrom(
                f"inputFrom {name!r}: max is {source.max}; it must be between 1 and {hard_max}",
                field=f"{at}/max",
            )
        resolved[name] = StepSource(
            run=source.run,
            field=source.field,
            distinct=source.distinct,
            max=hard_max if source.max is None else source.max,
        )
    return resolved


def dependencies(
    input_from: Sequence[Mapping[str, StepSource] | None],
) -> dict[int, list[int]]:
    """For each chained run (by index), the earlier runs it waits for (sorted, distinct)."""
    return {
        index: sorted({source.run for source in sources.values()})
        for index, sources in enumerate(input_from)
        if sources
    }


def field_values(row: Any, path: str) -> list[Any]:
    """The values a row gives for a dotted ``path`` (none for a missing or null one)."""
    value = row
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return []
        value = value[part]
    if value is None:
        return []
    if isinstance(value, list):
        return [v for v in value if v is not None]
    return [value]


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass
class ValueCollector:
    """Builds one input field's value from rows given one at a time, in row order."""

    source: StepSource
    values: list[Any] = field(default_factory=list)
    _seen: set[str] = field(default_factory=set)

    @property
    def cap(self) -> int:
        if self.source.max is None:
            raise ValueError("the source's max was never resolved")
        return self.source.max

    @property
    def full(self) -> bool:
        """No further row can change the value (the cap is reached)."""
        return len(self.values) >= self.cap

    def add(self, row: Any) -> None:
        for value in field_values(row, self.source.field):
            if self.full:
                return
            if self.source.distinct:
                key = _key(value)
                if key in self._seen:
                    continue
                self._seen.add(key)
            self.values.append(value)


def build_values(source: StepSource, rows: Iterable[Any]) -> list[Any]:
    """The value of one input field from ``rows`` (decoded), all at once."""
    collector = ValueCollector(source)
    for row in rows:
        if collector.full:
            break
        collector.add(row)
    return collector.values


def skip_message(name: str, source: StepSource, actor: str, state: str, rows: int) -> str:
    """Why a chained run was skipped: its source gave no value for ``name``."""
    why = f"run {source.run} ({actor}) produced no `{source.field}` values"
    if state != "succeeded":
        why += f" (it ended {state} with {rows} row(s))"
    return f"skipped: {why} for its input field `{name}`"
