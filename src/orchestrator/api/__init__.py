"""The HTTP API (FastAPI): runs, items, events, the platform webhook receiver, health."""
