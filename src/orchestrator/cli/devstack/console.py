"""``orchestrator dev``: the local stack in the foreground, until Ctrl-C or SIGTERM.

The supervisor knows nothing of terminals; this module prints the address table and the
admin key, waits for an unexpected exit, and turns signals into an orderly stop (a second
signal kills what is left).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from orchestrator.cli.devstack.components import COMPONENTS, PortInUseError, StackError, StackPorts
from orchestrator.cli.devstack.supervisor import (
    DEFAULT_PORTS,
    DEV_API_KEY_FILE,
    DevStack,
    describe_exit,
)

if TYPE_CHECKING:
    from rich.console import Console


def run_dev_stack(
    var_dir: Path = Path("var"),
    ports: StackPorts = DEFAULT_PORTS,
    *,
    extra_env: Mapping[str, str] | None = None,
    emulator_time_scale: float | None = None,
    temporal_ui: bool = True,
    components: Sequence[str] = COMPONENTS,
    apis: int = 1,
    workers: int = 1,
) -> None:
    """Run the local stack in the foreground until Ctrl-C (``orchestrator dev``).

    ``apis`` / ``workers``: how many API and worker processes (the scale-out variant).
    Exits with status 1 if a component fails to start or dies unexpectedly, 2 if a port
    is already in use; stops everything cleanly in every case.
    """
    from rich.console import Console

    console = Console()
    stack = DevStack(
        var_dir,
        ports,
        extra_env=extra_env,
        emulator_time_scale=emulator_time_scale,
        temporal_ui=temporal_ui,
        components=components,
        apis=apis,
        workers=workers,
    )
    dead: tuple[str, int] | None = None
    with _signals_interrupt():
        try:
            with console.status("starting the local stack…"):
                stack.start()
            _print_welcome(console, stack)
            dead = _wait_for_an_exit(stack)
            _print_death(console, stack, *dead)
        except PortInUseError as exc:
            console.print(f"[red]cannot start:[/red] {exc}", highlight=False)
            raise SystemExit(2) from None
        except StackError as exc:
            console.print(f"[red]cannot start:[/red] {exc}", markup=False, highlight=False)
            raise SystemExit(1) from None
        except KeyboardInterrupt:
            console.print("stopping…")
        finally:
            _stop_or_kill_on_a_second_signal(stack, console)
    if dead is not None:
        raise SystemExit(1)
    console.print("stopped")


def _wait_for_an_exit(stack: DevStack) -> tuple[str, int]:
    """Block until a component exits on its own (Ctrl-C interrupts): its name and code."""
    while True:
        dead = stack.exited()
        if dead:
            return next(iter(dead.items()))
        time.sleep(0.5)


# -- signals --------------------------------------------------------------------------


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGINT raise KeyboardInterrupt inside; the old handlers come back after.

    SIGTERM (e.g. from a process manager) gets the same orderly shutdown as Ctrl-C; SIGINT
    is set explicitly because a shell starts background jobs with it ignored.
    """
    previous_term = signal.signal(signal.SIGTERM, signal.default_int_handler)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if previous_int is not None:  # None: installed outside Python; leave ours
            signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)


def _stop_or_kill_on_a_second_signal(stack: DevStack, console: Console) -> None:
    """Stop gracefully; a second Ctrl-C (or SIGTERM) meanwhile kills what is left instead
    of leaving orphans behind."""

    def force(signum: int, frame: FrameType | None) -> None:
        console.print("killing…")
        stack.kill_all()

    signal.signal(signal.SIGINT, force)
    signal.signal(signal.SIGTERM, force)
    stack.stop()


# -- what ``orchestrator dev`` prints ---------------------------------------------------


def _print_welcome(console: Console, stack: DevStack) -> None:
    """The address table, where logs and data go, how to submit, and the admin key."""
    from rich.table import Table

    table = Table(title="orchestrator dev: the local stack is up", show_header=True)
    table.add_column("component")
    table.add_column("listens at")
    table.add_column("pid", justify="right")
    for name in stack.instances:
        component = stack.component(name)
        pid = str(stack.pid(name) or "")
        for endpoint in component.endpoints:
            table.add_row(endpoint.label, endpoint.url, pid)
            pid = ""  # once per process
        if component.note is not None:
            table.add_row(name, component.note, pid)
    console.print(table)
    console.print(f"logs: {stack.log_dir}   data: {stack.var_dir}")
    several = len(stack.instances_of("api")) > 1 or len(stack.instances_of("worker")) > 1
    if several and stack.env["ORCHESTRATOR_DATABASE_URL"].startswith("sqlite"):
        # It works, but SQLite takes one writer at a time: not what scale-out is about.
        console.print(
            "[yellow]note:[/yellow] several processes share one SQLite file; set "
            "ORCHESTRATOR_DATABASE_URL to a PostgreSQL database to scale out"
        )
    if "api" in stack.components:
        api_url = stack.urls["api"]
        api_flag = "" if stack.ports.api == DEFAULT_PORTS.api else f" --api-url {api_url}"
        submit = f"orchestrator submit examples/demo.json --watch{api_flag}"
        console.print(f"submit the demo: [bold]{submit}[/bold]")
        # Shown on the developer's own terminal (never logged): a local admin key.
        console.print(
            f"admin API key (local stack only; saved in {stack.var_dir / DEV_API_KEY_FILE}):"
        )
        console.print(
            f"  export ORCHESTRATOR_API_KEY={stack.api_key}",
            markup=False,
            highlight=False,
            soft_wrap=True,  # one line, so it can be copied whole
        )
    console.print("press Ctrl-C to stop")


def _print_death(console: Console, stack: DevStack, name: str, code: int) -> None:
    failure = f"{name} {describe_exit(code)} unexpectedly"
    console.print(f"[red]{failure}[/red]; last lines of {stack.log_path(name)}:")
    console.print(stack.log_tail(name), markup=False, highlight=False)
