"""End-to-end tests: real processes (Temporal dev server, emulator, API, worker) over HTTP."""
