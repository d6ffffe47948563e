"""Settings and shared configuration.

Settings are read once, in a composition root (the API app factory, the worker builder or a
CLI command) and passed down; nothing reads the environment at import time.
"""

from orchestrator.config.settings import Settings

__all__ = ["Settings"]
