"""OpenTelemetry tracing through Temporal's contrib interceptor; off unless ``TRACING_ENABLED``.

``temporalio.contrib.opentelemetry.TracingInterceptor`` on the client (and so on every worker
built from it) makes spans for starting a workflow, running it, and scheduling and running
each activity, and carries the trace context in Temporal headers, so one request is one
trace across the API and every worker. The stable interceptor rather than the
experimental ``OpenTelemetryPlugin``: its spans appear as they happen, its API is not
marked as subject to change, and it needs no sandbox passthrough of our own.

Spans go through a batching processor to one OTLP/HTTP exporter, configured by the standard
``OTEL_*`` environment (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``...). Headers carry only trace ids, never
request data.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from temporalio.contrib.opentelemetry import TracingInterceptor

from orchestrator.config.settings import Settings

TRACER_NAME = "orchestrator"


def tracer_provider(service_name: str, processor: SpanProcessor) -> TracerProvider:
    """A provider whose resource comes from the ``OTEL_*`` environment, named
    ``service_name`` unless that environment names the service."""
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(processor)
    return provider


def tracing_interceptor(provider: TracerProvider) -> TracingInterceptor:
    """Temporal's interceptor, making its spans with ``provider``."""
    return TracingInterceptor(provider.get_tracer(TRACER_NAME))


def tracing_interceptors(
    settings: Settings, service_name: str, exporter: SpanExporter | None = None
) -> list[TracingInterceptor]:
    """The client interceptors of a process: none with tracing off; with it on, Temporal's
    interceptor on a provider exporting over OTLP (or ``exporter``), which also becomes the
    process's global provider so other instrumentation joins the same traces. Call once
    per process (the global provider can be set only once)."""
    if not settings.tracing_enabled:
        return []
    provider = tracer_provider(service_name, BatchSpanProcessor(exporter or OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return [tracing_interceptor(provider)]
