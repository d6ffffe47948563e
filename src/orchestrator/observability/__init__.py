"""What an operator watches: Prometheus metrics and OpenTelemetry traces (docs/OPERATIONS.md).

``metrics`` holds every metric object and its labels (one module, stable names prefixed
``orchestrator_``); ``collectors`` the figures read at scrape time (from the database, from
the admission workflow's snapshot); ``exposition`` how a process serves them and the
Temporal runtime whose SDK metrics go to a port of their own; ``tracing`` the optional
OpenTelemetry setup through Temporal's contrib interceptor.
"""
