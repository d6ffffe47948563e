"""Local emulator of the Apify API v2 surface the orchestrator uses.

Owns nothing but the package namespace; the trade-off is a tiny public surface
(`create_app`, `EmulatorConfig`) so callers never reach into internals.
"""

from apify_emulator.app import create_app
from apify_emulator.config import EmulatorConfig

__all__ = ["EmulatorConfig", "create_app"]
