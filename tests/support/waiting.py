"""The one way tests wait: poll a condition until it holds, never a fixed sleep.

``eventually`` is for synchronous tests (e2e over HTTP), ``eventually_async`` for tests on
the session's event loop; the condition of the latter may be a coroutine function. Both
return the condition's first truthy value. While the condition raises one of ``retry_on``
(an assertion by default) it is tried again; at the deadline the last error or the last
falsy value is reported in an AssertionError that names the condition.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")

RetryOn = tuple[type[BaseException], ...]


class _Deadline:
    def __init__(self, fn: object, timeout: float, description: str | None) -> None:
        self.what = description or getattr(fn, "__qualname__", repr(fn))
        self.timeout = timeout
        self.at = time.monotonic() + timeout
        self.attempts = 0

    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def failure(self, last_error: BaseException | None, result: object) -> AssertionError:
        if last_error is not None:
            return AssertionError(
                f"{self.what}: still failing after {self.timeout:.1f}s "
                f"({self.attempts} attempts): {last_error!r}"
            )
        return AssertionError(
            f"{self.what}: still {result!r} after {self.timeout:.1f}s ({self.attempts} attempts)"
        )


def eventually(
    fn: Callable[[], T | None],
    timeout: float = 30.0,
    interval: float = 0.25,
    *,
    retry_on: RetryOn = (AssertionError,),
    description: str | None = None,
) -> T:
    """Call ``fn`` until it returns a truthy value without raising; return that value."""
    deadline = _Deadline(fn, timeout, description)
    while True:
        deadline.attempts += 1
        last_error: BaseException | None = None
        result: object = None
        try:
            value = fn()
        except retry_on as exc:
            last_error = exc
        else:
            if value:
                return value
            result = value
        if deadline.passed():
            raise deadline.failure(last_error, result) from last_error
        time.sleep(interval)


@overload
async def eventually_async(
    fn: Callable[[], Awaitable[T | None]],
    timeout: float = ...,
    interval: float = ...,
    *,
    retry_on: RetryOn = ...,
    description: str | None = ...,
) -> T: ...


@overload
async def eventually_async(
    fn: Callable[[], T | None],
    timeout: float = ...,
    interval: float = ...,
    *,
    retry_on: RetryOn = ...,
    description: str | None = ...,
) -> T: ...


async def eventually_async(
    fn: Callable[[], object],
    timeout: float = 30.0,
    interval: float = 0.05,
    *,
    retry_on: RetryOn = (AssertionError,),
    description: str | None = None,
) -> object:
    """Like :func:`eventually`, awaiting ``fn()`` when it returns an awaitable."""
    deadline = _Deadline(fn, timeout, description)
    while True:
        deadline.attempts += 1
        last_error: BaseException | None = None
        result: object = None
        try:
            value = fn()
            if inspect.isawaitable(value):
                value = await value
        except retry_on as exc:
            last_error = exc
        else:
            if value:
                return value
            result = value
        if deadline.passed():
            raise deadline.failure(last_error, result) from last_error
        await asyncio.sleep(interval)
