"""``orchestrator``: start the local stack, run the API or the worker, submit and watch.

Every command builds its settings once (from ``ORCHESTRATOR_*`` environment variables)
and passes them down.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

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
    # httpx logs every request's full URL at INFO; a caller's callback URL may carry a
    # token in its query string. Our own modules log scheme://host only.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))


def _exit_after_failed_start(code: int) -> NoReturn:
    """Exit without interpreter teardown once a start failed after talking to Temporal.

    The SDK's Rust threads may still call into Python while the interpreter finalizes, which
    aborts the process ("Fatal Python error: PyGILState_Release", temporalio/sdk-python#300)
    and would hide the exit status and the message. Nothing is left to clean up here.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@app.command()
def dev(
    var_dir: Annotated[Path, typer.Option(help="Where local state and logs go.")] = Path("var"),
    api_port: int = 8000,
    emulator_port: int = 8765,
    temporal_port: int = 7233,
    temporal_ui_port: int = 8233,
    worker_metrics_port: int = 9464,
    temporal_metrics_port: int = 9465,
    workers: Annotated[
        int, typer.Option(min=1, help="Worker processes, all on one task queue.")
    ] = 1,
    apis: Annotated[
        int, typer.Option(min=1, help="API processes, on --api-port, --api-port + 1, …")
    ] = 1,
) -> None:
    """Start the whole local stack: Temporal dev server, platform emulator, worker and API.

    With --workers N / --apis M it runs N worker and M API processes against the one
    Temporal server, emulator and database (set ORCHESTRATOR_DATABASE_URL to a PostgreSQL
    database for that: SQLite has one writer at a time).
    """
    from orchestrator.cli.devstack import StackPorts, run_dev_stack

    run_dev_stack(
        workers=workers,
        apis=apis,
        var_dir=var_dir,
        ports=StackPorts(
            temporal=temporal_port,
            temporal_ui=temporal_ui_port,
            emulator=emulator_port,
            api=api_port,
            worker_metrics=worker_metrics_port,
            temporal_metrics=temporal_metrics_port,
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
    settings = _settings_safe_to_start("api")
    try:
        uvicorn.run(
            create_app(settings),
            host=host or settings.api_host,
            port=port or settings.api_port,
            log_level=log_level,
        )
    except SystemExit as exc:  # uvicorn's "startup failed" (the log says why)
        _exit_after_failed_start(exc.code if isinstance(exc.code, int) else 1)


@app.command()
def worker(log_level: str = "info") -> None:
    """Run the Temporal worker (migrates the database on start)."""
    from orchestrator.config.temporal import TemporalSetupError
    from orchestrator.worker import run_worker

    _logging(log_level)
    settings = _settings_safe_to_start("worker")
    try:
        asyncio.run(run_worker(settings))
    except TemporalSetupError as exc:  # wrong settings or a refusal: say which, no traceback
        typer.echo(f"cannot start the worker: {exc}", err=True)
        _exit_after_failed_start(1)


def _settings_safe_to_start(process: Literal["api", "worker"]) -> Settings:
    """The settings, or exit 2 naming every unsafe one (config/safety.py; never a value)."""
    from orchestrator.config.safety import UnsafeSettingsError, check_start

    settings = Settings()
    try:
        check_start(settings, process)
    except UnsafeSettingsError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    return settings


@app.command()
def mcp(log_level: str = "warning") -> None:
    """Serve the MCP tools over stdio (for desktop MCP clients); the key is ORCHESTRATOR_API_KEY.

    The API serves the same tools over Streamable HTTP at /mcp; see docs/MCP.md.
    """
    from orchestrator.mcp.stdio import KeyRejected, run_stdio

    _logging(log_level)  # to stderr: stdout carries the protocol
    api_key = os.environ.get("ORCHESTRATOR_API_KEY", "").strip()
    if not api_key:
        typer.echo("set ORCHESTRATOR_API_KEY to a workspace API key", err=True)
        raise typer.Exit(2)
    from orchestrator.config.temporal import TemporalSetupError

    try:
        asyncio.run(run_stdio(Settings(), api_key))
    except KeyRejected as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from None
    except TemporalSetupError as exc:
        typer.echo(f"cannot start the MCP server: {exc}", err=True)
        _exit_after_failed_start(1)


@app.command()
def migrate() -> None:
    """Apply database migrations and seed the actor registry, then exit."""
    from orchestrator.config.bootstrap import prepare_database

    _logging("info")
    prepare_database(Settings()).dispose()
    console.print("[green]database is up to date[/green]")


#: Where ``orchestrator dev`` keeps its admin key; ``submit`` reads it when no key is given.
DEV_API_KEY_FILE = Path("var") / "dev-api-key"


def _api_key(explicit: str | None) -> str:
    if explicit:
        return explicit
    if DEV_API_KEY_FILE.is_file():
        return DEV_API_KEY_FILE.read_text("utf-8").strip()
    console.print(
        "[red]no API key:[/red] pass --api-key, set ORCHESTRATOR_API_KEY, or run "
        "`orchestrator dev` here (it writes var/dev-api-key)"
    )
    raise typer.Exit(1)


@app.command()
def submit(
    request_file: Annotated[Path, typer.Argument(help="JSON body of POST /runs.")],
    api_url: Annotated[str, typer.Option(help="Base URL of the API.")] = "http://127.0.0.1:8000",
    watch: Annotated[bool, typer.Option(help="Show progress until the request ends.")] = False,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="ORCHESTRATOR_API_KEY",
            show_envvar=True,
            help="API key; defaults to the local stack's var/dev-api-key.",
        ),
    ] = None,
) -> None:
    """Submit a request from a JSON file, optionally watching it to the end."""
    body = json.loads(request_file.read_text("utf-8"))
    headers = {"Authorization": f"Bearer {_api_key(api_key)}"}
    with httpx.Client(base_url=api_url, timeout=30, headers=headers) as client:
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
        cost = _usd(run.get("usageTotalUsd", 0.0), run.get("usageSettled", False))
        console.print(
            f"[{colour}]{run['state']}[/{colour}]: {run['itemsTotal']} item(s), cost {cost}; "
            f"rows at {api_url}/runs/{run_id}/items"
        )
        if run["state"] != "succeeded":
            raise typer.Exit(2)


def _usd(amount: float | None, settled: bool) -> str:
    """A cost as the table shows it; ``~`` marks a figure that may still grow."""
    if amount is None:
        return ""
    return f"{'' if settled else '~'}${amount:.4f}"


def _caption(run: dict[str, Any]) -> str:
    """Total cost (next to the plan's estimate for a planned request), the budget if any,
    and why the request was stopped if it was."""
    caption = f"total cost {_usd(run.get('usageTotalUsd', 0.0), run.get('usageSettled', False))}"
    plan = run.get("plan")
    if plan is not None:
        caption += f" (plan estimate ${plan['estimatedCostUsd']:.4f})"
    if run.get("budgetUsd") is not None:
        caption += f" of a ${run['budgetUsd']:.4f} budget"
    if run.get("stopMessage"):
        caption += f" — {run['stopMessage']}"
    return caption


def _fed_by(child: dict[str, Any]) -> str:
    """Where a chained run's input comes from, and how many values it got once built:
    ``domains ← #0.domain (23)``; empty for a run with a static input."""
    built = child.get("inputBuilt") or {}
    parts = []
    for name, source in (child.get("inputFrom") or {}).items():
        count = f" ({built[name]})" if name in built else ""
        parts.append(f"{name} ← #{source['run']}.{source['field']}{count}")
    return ", ".join(parts)


def _table(run: dict[str, Any]) -> Table:
    title = f"{run['id']} — {run['state']}"
    plan = run.get("plan")
    steps = {step["index"]: step for step in plan["steps"]} if plan else {}
    if plan is not None:
        title += f" — planned for {', '.join(plan['needs'])}"
    table = Table(title=title, caption=_caption(run), expand=False)
    columns = ["#", "need", "actor", "input from", "state", "platform", "items", "cost", "message"]
    for column in columns:
        table.add_column(column, justify="right" if column == "cost" else "left")
    for child in run["children"]:
        step = steps.get(child["index"])
        table.add_row(
            str(child["index"]),
            step["need"] if step else "",
            child["actor"],
            _fed_by(child),
            child["state"],
            child["platformStatus"] or "",
            str(child["itemsIngested"]),
            _usd(child.get("usageTotalUsd"), child.get("usageSettled", False)),
            (child["statusMessage"] or "")[:60],
        )
    return table


# After the request ends, how long the watch waits for its costs to settle (they are
# preliminary for some seconds after each run's end).
SETTLE_WATCH_SECONDS = 60.0


def _watch(client: httpx.Client, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = client.get(f"/runs/{run_id}").json()
    ended: float | None = None
    with Live(_table(run), console=console, refresh_per_second=4) as live:
        while not run["terminal"] or not run.get("usageSettled", True):
            if run["terminal"]:
                ended = ended or time.monotonic()
                if time.monotonic() - ended > SETTLE_WATCH_SECONDS:
                    break
            time.sleep(0.5)
            run = client.get(f"/runs/{run_id}").json()
            live.update(_table(run))
    console.line()  # a Live display ends without one when the output is not a terminal
    return run


actors_app = typer.Typer(
    help="The actor catalog: list, show, put, remove, history (talks to the HTTP API; "
    "changes need an admin key).",
)
app.add_typer(actors_app, name="actors")

ApiUrl = Annotated[str, typer.Option(help="Base URL of the API.")]
ApiKey = Annotated[
    str | None,
    typer.Option(
        envvar="ORCHESTRATOR_API_KEY",
        show_envvar=True,
        help="API key (admin to change the catalog); defaults to the local stack's "
        "var/dev-api-key.",
    ),
]
DEFAULT_API_URL = "http://127.0.0.1:8000"


def _api_client(api_url: str, api_key: str | None) -> httpx.Client:
    """An HTTP client on the API with the caller's key (tests substitute an in-process one)."""
    headers = {"Authorization": f"Bearer {_api_key(api_key)}"}
    return httpx.Client(base_url=api_url, timeout=30, headers=headers)


def _answer(response: httpx.Response, *ok: int) -> Any:
    """The response's JSON, or the problem it reports (and exit 1)."""
    if response.status_code in ok:
        return response.json()
    try:
        body = response.json()
        where = f" ({body['field']})" if body.get("field") else ""
        console.print(
            f"[red]{response.status_code} {body.get('code', '')}[/red]{where}: "
            f"{body.get('detail', '')}"
        )
    except (ValueError, AttributeError):
        console.print(f"[red]{response.status_code}[/red] {response.text}")
    raise typer.Exit(1)


def _list_actors(api_url: str, api_key: str | None) -> None:
    with _api_client(api_url, api_key) as client:
        catalog = _answer(client.get("/actors"), 200)
    table = Table(
        "actor",
        "platform actor",
        "capabilities",
        "version",
        "description",
        caption=f"catalog version {catalog['version']}",
    )
    for entry in catalog["actors"]:
        table.add_row(
            entry["name"],
            entry["platformActorId"],
            ", ".join(entry.get("capabilities", [])),
            str(entry["version"]),
            entry.get("description", ""),
        )
    console.print(table)


@actors_app.callback(invoke_without_command=True)
def actors(ctx: typer.Context, api_url: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None) -> None:
    """The actor catalog; with no command, list it."""
    if ctx.invoked_subcommand is None:
        _list_actors(api_url, api_key)


@actors_app.command("list")
def actors_list(api_url: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None) -> None:
    """List the catalog (any key): each actor, its capabilities and version."""
    _list_actors(api_url, api_key)


@actors_app.command("show")
def actors_show(
    name: Annotated[str, typer.Argument(help="The logical actor name.")],
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """Print one entry as JSON (what `put` takes, plus its name and version)."""
    with _api_client(api_url, api_key) as client:
        entry = _answer(client.get(f"/actors/{name}"), 200)
    typer.echo(json.dumps(entry, indent=2, ensure_ascii=False))


@actors_app.command("put")
def actors_put(
    name: Annotated[str, typer.Argument(help="The logical actor name.")],
    entry_file: Annotated[Path, typer.Argument(help="The entry as JSON (see docs/API.md).")],
    if_version: Annotated[
        int | None,
        typer.Option(help="Only if the entry is at this version (refused if it changed)."),
    ] = None,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """Create or replace an entry (admin key); each change is a new catalog version."""
    body = json.loads(entry_file.read_text("utf-8"))
    if isinstance(body, dict):  # `show` output works as input: drop what the API adds
        body = {k: v for k, v in body.items() if k not in ("name", "version")}
    headers = {"If-Match": f'"{if_version}"'} if if_version is not None else {}
    with _api_client(api_url, api_key) as client:
        response = client.put(f"/admin/actors/{name}", json=body, headers=headers)
        saved = _answer(response, 200, 201)
    verb = "created" if response.status_code == 201 else "saved"
    console.print(f"{verb} {name} (version {saved['version']})")


@actors_app.command("remove")
def actors_remove(
    name: Annotated[str, typer.Argument(help="The logical actor name.")],
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """Remove an entry (admin key); requests already made keep running."""
    with _api_client(api_url, api_key) as client:
        change = _answer(client.delete(f"/admin/actors/{name}"), 200)
    console.print(f"removed {name} (version {change['version']})")


@actors_app.command("history")
def actors_history(
    name: Annotated[str, typer.Argument(help="The logical actor name.")],
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """Every version of an entry, oldest first (admin key)."""
    with _api_client(api_url, api_key) as client:
        history = _answer(client.get(f"/admin/actors/{name}/history"), 200)
    table = Table("version", "change", "by", "at", "platform actor")
    for change in history["changes"]:
        entry = change["entry"] or {}
        table.add_row(
            str(change["version"]),
            change["change"],
            change["changedBy"],
            change["changedAt"],
            entry.get("platformActorId", ""),
        )
    console.print(table)


#: Commands that derive workspace secrets read the local stack's generated secrets too
#: (``orchestrator dev`` keeps them in var/dev-secrets.env), as they read its database;
#: ``.env`` and the environment win over them.
_DEV_ENV_FILES = (Path("var") / "dev-secrets.env", Path(".env"))


def _callback_secret_key(settings: Settings) -> str:
    from orchestrator.config.settings import MissingSecretError

    try:
        return settings.secret("callback_secret_key")
    except MissingSecretError as exc:
        typer.echo(f"{exc}: give it the API's and workers' value", err=True)
        raise typer.Exit(2) from None


keys_app = typer.Typer(help="Create, list and revoke API keys (talks to the database).")
app.add_typer(keys_app, name="keys")
workspaces_app = typer.Typer(help="Workspace settings: callback signing secret, spending limit.")
app.add_typer(workspaces_app, name="workspaces")


@keys_app.command("create")
def keys_create(
    workspace: Annotated[str | None, typer.Option(help="Scope the key to this workspace.")] = None,
    admin: Annotated[bool, typer.Option("--admin", help="Create an admin key.")] = False,
    name: Annotated[str, typer.Option(help="A label for people.")] = "",
) -> None:
    """Create a key and print it once (only its hash is stored)."""
    from orchestrator.config.bootstrap import prepare_database
    from orchestrator.service.auth import create_key

    if (workspace is None) == (not admin):
        console.print("[red]choose exactly one of --workspace WS and --admin[/red]")
        raise typer.Exit(2)
    settings = Settings(_env_file=_DEV_ENV_FILES)
    server_key = _callback_secret_key(settings)
    engine = prepare_database(settings)
    with engine.begin() as conn:
        created = create_key(
            conn, workspace_id=workspace, name=name, callback_secret_key=server_key
        )
    engine.dispose()
    scope = f"workspace {workspace}" if workspace else "admin"
    console.print(f"API key {created.record.id} ({scope}); shown once, store it now:")
    typer.echo(created.plaintext)
    if created.callback_secret:
        console.print(f"callback signing secret of {workspace} (shown once):")
        typer.echo(created.callback_secret)


@keys_app.command("list")
def keys_list(
    workspace: Annotated[str | None, typer.Option(help="Only this workspace's keys.")] = None,
) -> None:
    """List keys (ids and metadata; the keys themselves are not stored)."""
    from orchestrator.config.bootstrap import prepare_database
    from orchestrator.db.queries.api_keys import list_keys

    engine = prepare_database(Settings())
    with engine.connect() as conn:
        records = list_keys(conn, workspace_id=workspace)
    engine.dispose()
    table = Table("key id", "scope", "name", "created", "last used", "revoked")
    for r in records:
        table.add_row(
            r.id,
            r.workspace_id or "admin",
            r.name,
            r.created_at.isoformat(timespec="seconds"),
            r.last_used_at.isoformat(timespec="seconds") if r.last_used_at else "",
            r.revoked_at.isoformat(timespec="seconds") if r.revoked_at else "",
        )
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="The key id (ork_<id>_…).")]) -> None:
    """Revoke a key; it stops working at once."""
    from orchestrator.config.bootstrap import prepare_database
    from orchestrator.db.queries.api_keys import revoke_key

    engine = prepare_database(Settings())
    with engine.begin() as conn:
        found = revoke_key(conn, key_id)
    engine.dispose()
    if not found:
        console.print(f"[red]no key {key_id}[/red]")
        raise typer.Exit(1)
    console.print(f"revoked {key_id}")


@workspaces_app.command("rotate-secret")
def workspaces_rotate_secret(
    workspace: Annotated[str, typer.Argument(help="The workspace id.")],
) -> None:
    """Give the workspace a new callback signing secret and print it once."""
    from datetime import timedelta

    from orchestrator.config.bootstrap import prepare_database
    from orchestrator.service.workspaces import rotate_callback_secret

    settings = Settings(_env_file=_DEV_ENV_FILES)
    server_key = _callback_secret_key(settings)
    engine = prepare_database(settings)
    with engine.begin() as conn:
        rotated = rotate_callback_secret(
            conn,
            workspace,
            server_key=server_key,
            grace=timedelta(seconds=settings.callback_secret_grace_seconds),
        )
    engine.dispose()
    console.print(f"new callback signing secret of {workspace} (shown once):")
    typer.echo(rotated.callback_secret)
    if rotated.previous_valid_until:
        console.print(
            f"the previous secret also signs until {rotated.previous_valid_until.isoformat()}"
        )


@workspaces_app.command("budget")
def workspaces_budget(
    workspace: Annotated[str, typer.Argument(help="The workspace id.")],
    limit_usd: Annotated[
        float | None, typer.Option("--limit-usd", help="Set the limit (USD per period).")
    ] = None,
    period: Annotated[
        str, typer.Option("--period", help="`month` or `day` (UTC), with --limit-usd.")
    ] = "month",
    clear: Annotated[bool, typer.Option("--clear", help="Remove the limit.")] = False,
) -> None:
    """Show, set or remove the workspace's spending limit. While it is spent, new requests
    are refused (402) and running ones are stopped."""
    from orchestrator.config.bootstrap import prepare_database
    from orchestrator.db.queries.budgets import limit_status
    from orchestrator.domain.errors import DomainError
    from orchestrator.domain.spending import BudgetPeriod
    from orchestrator.service import budgets

    if period not in {p.value for p in BudgetPeriod}:
        console.print(f"[red]--period must be month or day, not {period!r}[/red]")
        raise typer.Exit(2)
    engine = prepare_database(Settings())
    try:
        with engine.begin() as conn:
            if clear:
                budgets.clear_workspace_budget(conn, workspace)
            elif limit_usd is not None:
                budgets.set_workspace_budget(conn, workspace, limit_usd, BudgetPeriod(period))
            status = limit_status(conn, workspace)
    except DomainError as exc:
        console.print(f"[red]{exc.detail}[/red]")
        raise typer.Exit(2) from None
    finally:
        engine.dispose()
    if status is None:
        console.print(f"{workspace} has no spending limit")
        return
    state = "[red]exhausted[/red]" if status.exhausted else "available"
    console.print(
        f"{status.limit.describe()}: ${status.spent_usd:.6f} spent since "
        f"{status.period_start:%Y-%m-%d}, ${status.remaining_usd:.6f} left ({state})"
    )


@workspaces_app.command("concurrency")
def workspaces_concurrency(
    workspace: Annotated[str, typer.Argument(help="The workspace id.")],
    max_runs: Annotated[
        int | None,
        typer.Option("--max-runs", help="Set the most platform runs it may hold at once."),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the limit.")] = False,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """Show, set or remove the workspace's concurrency limit (through the API, which tells
    the admission workflow at once). Waiting runs are admitted round-robin across
    workspaces; one at its limit is passed over until one of its runs ends."""
    if clear and max_runs is not None:
        console.print("[red]give --max-runs or --clear, not both[/red]")
        raise typer.Exit(2)
    path = f"/workspaces/{workspace}/concurrency"
    with _api_client(api_url, api_key) as client:
        if clear:
            view = _answer(client.delete(path), 200)
        elif max_runs is not None:
            view = _answer(client.put(path, json={"maxConcurrentRuns": max_runs}), 200)
        else:
            view = _answer(client.get(path), 200)
    limit = view["maxConcurrentRuns"]
    if limit is None:
        console.print(f"{workspace} has no concurrency limit")
    else:
        console.print(f"{workspace} may hold at most {limit} platform run(s) at once")
