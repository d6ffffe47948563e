"""Emulator settings: one frozen dataclass, filled from defaults, env vars and CLI flags.

A plain dataclass (not pydantic-settings) keeps the emulator free of the
orchestrator's settings machinery; the trade-off is a small hand-written env
parser (`EmulatorConfig.from_env`) for the few scalar types we need.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ENV_PREFIX = "APIFY_EMULATOR_"


@dataclass(frozen=True)
class EmulatorConfig:
    """Everything the emulator can be tuned with.

    Durations of scripted behaviour (actor run times, webhook retry back-off,
    TIMING-OUT/ABORTING windows, run `timeout`) are multiplied by `time_scale`,
    so `time_scale=0.05` makes a 3 s actor finish in 150 ms. HTTP-level waits
    (`waitForFinish`) are real seconds, as they are for the client.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    # Accepted API tokens; "*" accepts any non-empty token.
    tokens: tuple[str, ...] = ("emulator-token",)
    time_scale: float = 1.0
    # Public base URL used in Location headers and console URLs; derived from host/port if empty.
    public_url: str = ""
    # Webhook delivery: first retry after base delay (scaled), doubling, at most this many attempts.
    webhook_retry_base_secs: float = 1.0
    webhook_max_attempts: int = 12
    webhook_timeout_secs: float = 10.0
    # Account caps (0 disables a cap). Real Starter plan: 65536 MB, 32 runs.
    max_total_memory_mbytes: int = 65536
    max_concurrent_runs: int = 32
    # Per-resource requests per second (0 disables). Apify: 60 by default, 400 for run starts.
    rate_limit_rps: int = 60
    rate_limit_start_rps: int = 400
    # Retry-After (whole seconds) on the rate limiter's 429s; 0 sends none, as Apify documents
    # none. Lets tests prove a client honours the header.
    rate_limit_retry_after_secs: int = 0
    # How long a "lost start answer" in hang mode keeps the connection open (real seconds).
    lost_answer_hang_secs: float = 300.0
    # Scripted windows (scaled): READY before RUNNING, TIMING-OUT and graceful ABORTING.
    ready_secs: float = 0.5
    timing_out_secs: float = 1.0
    aborting_secs: float = 2.0
    default_timeout_secs: int = 3600
    # How far (scaled) a run's usage and charges trail it: they settle this long after the end.
    usage_lag_secs: float = 5.0
    default_memory_mbytes: int = 1024
    # sqlite file that keeps runs, datasets specs and dispatches across restarts ("" = memory only).
    state_file: str = ""
    # Seed for probabilistic fault injection, so "rate" faults replay identically.
    fault_seed: int = 0
    user_id: str = "uLtR0nEmuLat0rUsr"
    username: str = "ultron"
    log_level: str = "INFO"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def scaled(self, secs: float) -> float:
        """Scripted seconds -> wall-clock seconds."""
        return secs * self.time_scale

    def base_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        return f"http://{self.host}:{self.port}"

    def token_ok(self, token: str) -> bool:
        return bool(token) and ("*" in self.tokens or token in self.tokens)

    def replace(self, **changes: Any) -> EmulatorConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> EmulatorConfig:
        """Build a config from APIFY_EMULATOR_* variables, then apply explicit overrides.

        E.g. APIFY_EMULATOR_TIME_SCALE=0.1, APIFY_EMULATOR_TOKENS=a,b.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name == "extra":
                continue
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None:
                continue
            values[f.name] = _coerce(f.name, raw, getattr(cls(), f.name))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def _coerce(name: str, raw: str, default: Any) -> Any:
    if isinstance(default, bool):
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    if isinstance(default, tuple):
        return tuple(t.strip() for t in raw.split(",") if t.strip())
    if isinstance(default, str):
        return raw
    raise ValueError(f"cannot read {name} from the environment")
