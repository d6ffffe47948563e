"""Helpers for end-to-end tests: waiting for conditions instead of sleeping.

Import them relatively (``from .helpers import eventually``) so the import works whether or
not ``tests/`` itself is a package.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    fn: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.25,
    *,
    retry_on: tuple[type[Exception], ...] = (AssertionError,),
    description: str | None = None,
) -> T:
    """Call ``fn`` until it returns a truthy value without raising; return that value.

    ``fn`` may assert (or raise one of ``retry_on``) while the condition does not hold yet.
    At the deadline the last error is raised again, chained into an AssertionError naming
    ``description`` (or ``fn``), or an AssertionError with the last falsy value.
    """
    what = description or getattr(fn, "__qualname__", repr(fn))
    deadline = time.monotonic() + timeout
    attempts = 0
    while True:
        attempts += 1
        last_error: Exception | None = None
        try:
            result = fn()
        except retry_on as exc:
            last_error = exc
        else:
            if result:
                return result
        if time.monotonic() >= deadline:
            if last_error is not None:
                raise AssertionError(
                    f"{what}: still failing after {timeout:.1f}s ({attempts} attempts): "
                    f"{last_error!r}"
                ) from last_error
            raise AssertionError(
                f"{what}: still {result!r} after {timeout:.1f}s ({attempts} attempts)"
            )
        time.sleep(interval)
