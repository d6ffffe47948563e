"""Actor inputs against their catalog JSON Schema (draft 2020-12), with ``jsonschema``.

Two rules: a catalog entry's ``inputSchema`` must itself be a valid draft 2020-12 schema
(checked when the entry is saved), and a run's input must satisfy it (checked before
anything is stored or spawned). Both answer with a JSON pointer and a message a caller can
act on. Pure: no I/O. Remote ``$ref``\\s are never fetched (``jsonschema`` resolves only
references inside the schema unless given a registry that retrieves), so a schema cannot
make the API call out; an unresolvable reference is reported as an invalid input.

Trade-off: validators are cached per schema text (a catalog holds a handful of schemas,
and compiling one per request would be waste); the cache is small and bounded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from referencing.exceptions import Unresolvable

#: Longest message a problem carries (an error may quote a large input value).
MAX_MESSAGE_CHARS = 300


@dataclass(frozen=True)
class InputError:
    """Where an input (or a schema) is wrong - a JSON pointer, "" for the root - and why."""

    pointer: str
    message: str


def json_pointer(path: Iterable[Any]) -> str:
    """RFC 6901 pointer of a path (``~`` and ``/`` escaped)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def _short(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 1] + "…"


def _later(error: ValidationError, provided_later: frozenset[str]) -> bool:
    """Whether ``error`` is only that a top-level field provided later is missing
    (jsonschema reports each missing required property as its own error)."""
    if not provided_later or error.validator != "required" or error.absolute_path:
        return False
    return any(error.message == f"{name!r} is a required property" for name in provided_later)


def schema_error(schema: Mapping[str, Any]) -> InputError | None:
    """Why ``schema`` is not a valid draft 2020-12 JSON Schema, or None if it is."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return InputError(json_pointer(exc.path), _short(exc.message))
    return None


@lru_cache(maxsize=64)
def _validator(schema_text: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema_text))


def input_error(
    schema: Mapping[str, Any], instance: Any, *, provided_later: frozenset[str] = frozenset()
) -> InputError | None:
    """The most relevant reason ``instance`` fails ``schema`` (``jsonschema.best_match``),
    or None when it is valid. ``schema`` must have passed :func:`schema_error`.

    ``provided_later``: top-level fields that are not there yet (a chained run's fields,
    built from earlier rows before it starts); they count as present, and are checked when
    the built input is (``activities.steps``)."""
    if not schema:
        return None  # the empty schema accepts everything
    validator = _validator(json.dumps(schema, sort_keys=True, separators=(",", ":")))
    try:
        errors = [e for e in validator.iter_errors(instance) if not _later(e, provided_later)]
        error: ValidationError | None = best_match(errors)
    except Unresolvable as exc:
        return InputError("", _short(f"the actor's input schema has an unresolvable $ref: {exc}"))
    if error is None:
        return None
    return InputError(json_pointer(error.absolute_path), _short(error.message))
