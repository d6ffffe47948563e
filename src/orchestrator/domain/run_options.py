"""Options of one platform run, and the rules a run's options must satisfy before we submit.

The platform (shared/reference/apify-openapi.json ``RunOptions`` and the ``memory`` parameter
of ``POST /v2/actors/{actorId}/runs``) refuses a memory that is not a power of two between
128 and 32768 MB, a negative timeout and a negative ``maxItems``. Refusing those at submit
time means a caller learns at once, instead of a child failing later on the platform's
refusal. Three bounds are ours and stricter than the platform's:

- ``timeoutSec`` ≥ 1: the platform reads 0 as "no timeout", but a start without a timeout
  uses the actor's default and the poller's backstop cap needs a finite timeout, so 0
  would silently mean something else here;
- ``timeoutSec`` ≤ 7 days, a sanity cap (the platform documents none);
- ``maxItems`` ≥ 1: 0 caps the charged rows at none, which is never a useful request.

``maxTotalChargeUsd`` must be greater than 0: the platform refuses 0 or less at the start
(``max-total-charge-usd-must-be-greater-than-zero``), though its ``RunOptions`` schema says
``minimum: 0``.

An actor's registry entry may also set *hard caps* on ``maxItems`` and
``maxTotalChargeUsd`` (:class:`OptionCaps`): a request above one is refused, and a run that
leaves a capped option unset gets the cap, so no run of that actor is ever unbounded.

Option names are those stored with each child (and shown to callers): ``memoryMb``,
``timeoutSec``, ``build``, ``maxItems``, ``maxTotalChargeUsd``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from orchestrator.domain.errors import InvalidRunOption, OptionAboveCap

MEMORY_MB_MIN = 128
MEMORY_MB_MAX = 32768
TIMEOUT_SEC_MIN = 1
TIMEOUT_SEC_MAX = 7 * 24 * 3600
MAX_ITEMS_MIN = 1
BUILD_MAX_LENGTH = 64
#: Every memory the platform accepts (powers of two from MEMORY_MB_MIN to MEMORY_MB_MAX).
MEMORY_MB_CHOICES = tuple(
    1 << bit for bit in range(MEMORY_MB_MIN.bit_length() - 1, MEMORY_MB_MAX.bit_length())
)


@dataclass(frozen=True)
class RunOptions:
    """What a caller (or the registry's defaults) asks of one platform run; None = unset."""

    memory_mb: int | None = None
    timeout_sec: int | None = None
    build: str | None = None
    max_items: int | None = None
    max_total_charge_usd: float | None = None

    def over(self, defaults: RunOptions) -> RunOptions:
        """These options, with ``defaults`` filling what is unset."""
        unset = {f.name: getattr(defaults, f.name) for f in fields(self)}
        unset = {name: value for name, value in unset.items() if getattr(self, name) is None}
        return replace(self, **unset)

    def stored(self) -> dict[str, Any]:
        """The set options under their stored names (the form a child's row keeps)."""
        values = {
            "memoryMb": self.memory_mb,
            "timeoutSec": self.timeout_sec,
            "build": self.build,
            "maxItems": self.max_items,
            "maxTotalChargeUsd": self.max_total_charge_usd,
        }
        return {name: value for name, value in values.items() if value is not None}


def option_violations(options: RunOptions) -> list[tuple[str, str]]:
    """(option name, why) for every rule ``options`` breaks; empty when all hold."""
    found: list[tuple[str, str]] = []
    memory = options.memory_mb
    if memory is not None and memory not in MEMORY_MB_CHOICES:
        found.append(
            (
                "memoryMb",
                f"memoryMb must be a power of 2 between {MEMORY_MB_MIN} and {MEMORY_MB_MAX} "
                f"(got {memory})",
            )
        )
    timeout = options.timeout_sec
    if timeout is not None and not TIMEOUT_SEC_MIN <= timeout <= TIMEOUT_SEC_MAX:
        found.append(
            (
                "timeoutSec",
                f"timeoutSec must be between {TIMEOUT_SEC_MIN} and {TIMEOUT_SEC_MAX} seconds "
                f"(got {timeout})",
            )
        )
    if options.build is not None and len(options.build) > BUILD_MAX_LENGTH:
        found.append(("build", f"build must be at most {BUILD_MAX_LENGTH} characters"))
    if options.max_items is not None and options.max_items < MAX_ITEMS_MIN:
        found.append(
            ("maxItems", f"maxItems must be at least {MAX_ITEMS_MIN} (got {options.max_items})")
        )
    charge = options.max_total_charge_usd
    if charge is not None and not charge > 0:
        found.append(
            ("maxTotalChargeUsd", f"maxTotalChargeUsd must be greater than 0 (got {charge})")
        )
    return found


#: The options an actor may cap: attribute name, stored name.
_CAPPED = (("max_items", "maxItems"), ("max_total_charge_usd", "maxTotalChargeUsd"))


@dataclass(frozen=True)
class OptionCaps:
    """An actor's hard caps (None = uncapped): what no run of it may exceed."""

    max_items: int | None = None
    max_total_charge_usd: float | None = None

    def apply(self, options: RunOptions, *, pointer: str, actor: str) -> RunOptions:
        """``options`` within the caps: an unset capped option gets the cap; a value above
        a cap raises :class:`OptionAboveCap` naming ``pointer/<option>``."""
        capped = options
        for attr, name in (
            ("max_items", "maxItems"),
            ("max_total_charge_usd", "maxTotalChargeUsd"),
        ):
            cap = getattr(self, attr)
            value = getattr(options, attr)
            if cap is None:
                continue
            if value is None:
                capped = replace(capped, **{attr: cap})
            elif value > cap:
                raise OptionAboveCap(
                    f"{name} {value} is above the hard cap {cap} of actor {actor!r}",
                    field=f"{pointer}/{name}",
                )
        return capped


def check_run_options(options: RunOptions, *, pointer: str, source: str = "") -> None:
    """Raise :class:`InvalidRunOption` for the first broken rule, naming ``pointer/<option>``.

    ``source`` is added to the detail when the value did not come from the caller (a
    registry default), so the caller knows why an option they never sent is refused.
    """
    for name, why in option_violations(options):
        raise InvalidRunOption(why + (f" ({source})" if source else ""), field=f"{pointer}/{name}")
