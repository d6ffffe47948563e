"""``python -m orchestrator`` is the ``orchestrator`` command."""

from orchestrator.cli.main import app

if __name__ == "__main__":
    app()
