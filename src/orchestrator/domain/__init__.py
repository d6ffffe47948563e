"""Pure domain logic: ids, lifecycle states, the roll-up rule and error types.

No I/O and no third-party imports, so workflows (inside Temporal's sandbox), the API, the
CLI and the dashboard can all import it and agree on what every state means.
"""
