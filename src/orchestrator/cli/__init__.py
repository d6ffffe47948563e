"""The ``orchestrator`` command line (Typer); Rich is used only here."""
