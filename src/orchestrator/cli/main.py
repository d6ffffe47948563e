"""``orchestrator``: start the local stack, run the API or the worker, submit and watch.

Every command builds its settings once (from ``ORCHESTRATOR_*`` environment variables)
and passes them down.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from orchestrator.config.settings import Settings

app = typer.Typer(
    help="Scraper orchestrator: spawn, track and ingest scraper runs on the platform.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()


def _logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


@app.command()
def dev(
    var_dir: Annotated[Path, typer.Option(help="Where local state and logs go.")] = Path("var"),
    api_port: int = 8000,
    emulator_port: int = 8765,
    temporal_port: int = 7233,
    temporal_ui_port: int = 8233,
) -> None:
    """Start the whole local stack: Temporal dev server, platform emulator, worker and API."""
    from orchestrator.cli.devstack import StackPorts, run_dev_stack

    run_dev_stack(
        var_dir=var_dir,
        ports=StackPorts(
            temporal=temporal_port,
            temporal_ui=temporal_ui_port,
            emulator=emulator_port,
            api=api_port,
        ),
    )


@app.command()
def api(
    host: Annotated[str | None, typer.Option(help="Interface to bind.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to bind.")] = None,
    log_level: str = "info",
) -> None:
    """Run the HTTP API (migrates the database on start)."""
    import uvicorn

    from orchestrator.app import create_app

    _logging(log_level)
    settings = Settings()
    uvicorn.run(
        create_app(settings),
        host=host or settings.api_host,
        port=port or settings.api_port,
        log_level=log_level,
    )


@app.command()
def worker(log_level: str = "info") -> None:
    """Run the Temporal worker (migrates the database on start)."""
    from orchestrator.worker import run_worker

    _logging(log_level)
    asyncio.run(run_worker(Settings()))


@app.command()
def migrate() -> None:
    """Apply database migrations and seed the actor registry, then exit."""
    from orchestrator.config.bootstrap import prepare_database

    _logging("info")
    prepare_database(Settings()).dispose()
    console.print("[green]database is up to date[/green]")


@app.command()
def submit(
    request_file: Annotated[Path, typer.Argument(help="JSON body of POST /runs.")],
    api_url: Annotated[str, typer.Option(help="Base URL of the API.")] = "http://127.0.0.1:8000",
    watch: Annotated[bool, typer.Option(help="Show progress until the request ends.")] = False,
) -> None:
    """Submit a request from a JSON file, optionally watching it to the end."""
    body = json.loads(request_file.read_text("utf-8"))
    with httpx.Client(base_url=api_url, timeout=30) as client:
        response = client.post("/runs", json=body)
        if response.status_code != 202:
            console.print(f"[red]{response.status_code}[/red] {response.text}")
            raise typer.Exit(1)
        accepted = response.json()
        run_id = accepted["runId"]
        console.print(f"accepted: [bold]{run_id}[/bold]  ({api_url}{accepted['statusUrl']})")
        if not watch:
            return
        run = _watch(client, run_id)
        colour = "green" if run["state"] == "succeeded" else "yellow"
        console.print(
            f"[{colour}]{run['state']}[/{colour}]: {run['itemsTotal']} item(s); "
            f"rows at {api_url}/runs/{run_id}/items"
        )
        if run["state"] != "succeeded":
            raise typer.Exit(2)


def _table(run: dict[str, Any]) -> Table:
    table = Table(title=f"{run['id']} — {run['state']}", expand=False)
    for column in ("#", "actor", "state", "platform", "items", "message"):
        table.add_column(column)
    for child in run["children"]:
        table.add_row(
            str(child["index"]),
            child["actor"],
            child["state"],
            child["platformStatus"] or "",
            str(child["itemsIngested"]),
            (child["statusMessage"] or "")[:60],
        )
    return table


def _watch(client: httpx.Client, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = client.get(f"/runs/{run_id}").json()
    with Live(_table(run), console=console, refresh_per_second=4) as live:
        while not run["terminal"]:
            time.sleep(0.5)
            run = client.get(f"/runs/{run_id}").json()
            live.update(_table(run))
    return run


@app.command()
def actors() -> None:
    """List the actor registry."""
    from orchestrator.config.bootstrap import prepare_database
    from orchestrator.db.queries.registry import list_actors

    engine = prepare_database(Settings())
    with engine.connect() as conn:
        entries = list_actors(conn)
    table = Table("actor", "platform actor", "defaults", "description")
    for name, entry in entries.items():
        table.add_row(
            name,
            entry.platform_actor_id,
            entry.defaults.model_dump_json(by_alias=True, exclude_none=True),
            entry.description,
        )
    console.print(table)
