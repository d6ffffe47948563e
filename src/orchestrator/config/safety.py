"""The start-up check of ``orchestrator api`` and ``orchestrator worker`` (pure but for logging).

A process outside development refuses to start while any secret is unset, has a value that
is public (it is in the source), or is too short to be a key, or while a development-only
setting is on where it is unsafe. ``review`` says what is wrong, naming each setting by
its environment variable and never showing a value; ``check_start`` turns that into a
refusal (:class:`UnsafeSettingsError`), or, with ``ORCHESTRATOR_INSECURE_DEV_MODE=true``,
into one warning per problem.

The local stack (``orchestrator dev``) needs no exemption: it generates its own random
secrets under ``var/``, talks to the emulator on a loopback address with the emulator's
token, and its ``PUBLIC_URL`` is a loopback address, so it passes the same check as
production.

Trade-off: a fixed list of rules, each explained below, rather than a generic "production
profile" switch; a deployment cannot opt out of one rule without opting out of all of them
(development mode), which is deliberate: every rule guards a real hole, and the escape hatch
is loud and named ``insecure``.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import urlsplit

from orchestrator.config.settings import SecretName, Settings

log = logging.getLogger(__name__)

#: The two server keys are HMAC keys: 32 characters of `secrets.token_urlsafe` carry 192
#: bits. (The Apify token has the platform's own format; its length is not ours to judge.)
MIN_KEY_CHARS: Final = 32
_SERVER_KEYS: Final[tuple[SecretName, ...]] = ("webhook_secret", "callback_secret_key")

#: Values that are public: the development stand-ins (in the source) and the old built-in
#: defaults they replace (the same strings), so a configuration copied from an old
#: example is refused too.
PUBLIC_VALUES: Final = frozenset(Settings.DEVELOPMENT_SECRETS.values())

DEV_MODE_VARIABLE: Final = "ORCHESTRATOR_INSECURE_DEV_MODE"

Process = Literal["api", "worker"]
#: The secrets each process uses, so each is asked only for those: the API never calls the
#: platform, so it needs (and should hold) no Apify token.
SECRETS_USED: Final[Mapping[Process, tuple[SecretName, ...]]] = {
    "api": ("webhook_secret", "callback_secret_key"),
    "worker": ("apify_token", "webhook_secret", "callback_secret_key"),
}


def variable(name: str) -> str:
    """The environment variable of setting ``name``."""
    return f"ORCHESTRATOR_{name.upper()}"


@dataclass(frozen=True)
class Finding:
    """One unsafe setting: its variable and what is wrong (never its value)."""

    setting: str
    problem: str

    def __str__(self) -> str:
        return f"{self.setting} {self.problem}"


@dataclass(frozen=True)
class Review:
    """What is wrong with a configuration: ``refusals`` stop a process outside development
    mode; ``warnings`` are only logged."""

    refusals: tuple[Finding, ...]
    warnings: tuple[Finding, ...]


class UnsafeSettingsError(RuntimeError):
    """The process must not start; the message names every unsafe setting, no value."""

    def __init__(self, process: Process, refusals: Sequence[Finding]) -> None:
        lines = [f"orchestrator {process} refuses to start: unsafe settings outside development"]
        lines += [f"  - {finding}" for finding in refusals]
        lines.append(
            'See docs/OPERATIONS.md, "Secrets", to set them. For local development only, '
            f"`orchestrator dev` needs none of them, and {DEV_MODE_VARIABLE}=true lets a "
            "process start without them (never in production)."
        )
        super().__init__("\n".join(lines))
        self.refusals = tuple(refusals)


def is_loopback_host(host: str | None) -> bool:
    """Whether ``host`` (a URL's hostname) names this machine only."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _secret_findings(settings: Settings, process: Process) -> list[Finding]:
    found: list[Finding] = []
    local_platform = is_loopback_host(urlsplit(settings.apify_api_url).hostname)
    for name in SECRETS_USED[process]:
        raw = getattr(settings, name)
        value = raw.get_secret_value() if raw is not None else ""
        if not value:
            found.append(Finding(variable(name), "is not set"))
        elif value in PUBLIC_VALUES:
            # The emulator's public token is what a local emulator accepts; sent anywhere
            # else it is a configuration mistake at best.
            if name == "apify_token" and local_platform:
                continue
            found.append(Finding(variable(name), "has a public value (it is in the source code)"))
        elif name in _SERVER_KEYS and len(value) < MIN_KEY_CHARS:
            found.append(Finding(variable(name), f"is shorter than {MIN_KEY_CHARS} characters"))
    return found


def review(settings: Settings, process: Process) -> Review:
    """Every setting of ``settings`` unsafe for ``process`` (pure: reads nothing else)."""
    refusals = _secret_findings(settings, process)
    warnings: list[Finding] = []
    public = urlsplit(settings.public_url)
    platform = urlsplit(settings.apify_api_url)
    if settings.allow_insecure_callback_localhost and not is_loopback_host(public.hostname):
        # Plain-http callbacks to this machine's loopback services (an SSRF into the host)
        # are harmless only on a developer's machine; a PUBLIC_URL others can reach says
        # this is not one. Refused, not warned: a warning in a log is read too late.
        refusals.append(
            Finding(
                variable("allow_insecure_callback_localhost"),
                f"is true while {variable('public_url')} is not a loopback address",
            )
        )
    if (
        process == "worker"
        and platform.scheme != "https"
        and not is_loopback_host(platform.hostname)
    ):
        # Every platform call (the worker makes them all) carries the token as a bearer.
        refusals.append(
            Finding(
                variable("apify_api_url"), "is not https: it would send the Apify token in clear"
            )
        )
    if public.scheme != "https" and not is_loopback_host(public.hostname):
        # Webhook tokens would cross the network in clear; a stolen one only wakes a
        # poller (which confirms with the platform), so this is a warning.
        warnings.append(
            Finding(
                variable("public_url"),
                "is not https: platform webhooks carry their tokens in clear",
            )
        )
    return Review(refusals=tuple(refusals), warnings=tuple(warnings))


def check_start(settings: Settings, process: Process) -> None:
    """Refuse to start ``process`` (``api``/``worker``) with unsafe settings.

    Raises :class:`UnsafeSettingsError`; in development mode logs every refusal as a warning
    instead (unset secrets then take the public development values, ``Settings.secret``).
    """
    found = review(settings, process)
    for finding in found.warnings:
        log.warning("unsafe setting: %s", finding)
    if not settings.insecure_dev_mode:
        if found.refusals:
            raise UnsafeSettingsError(process, found.refusals)
        return
    log.warning(
        "%s=true: development mode, never in production; public development secrets stand in "
        "for unset ones",
        DEV_MODE_VARIABLE,
    )
    for finding in found.refusals:
        log.warning("unsafe setting (allowed in development mode): %s", finding)
