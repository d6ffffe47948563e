"""The dashboard: one static page that reads and submits through the public HTTP API."""
