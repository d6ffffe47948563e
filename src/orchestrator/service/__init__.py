"""Use cases shared by the HTTP API and the CLI: submit a request, signal a poller."""
