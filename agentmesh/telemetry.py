"""Traces, request ids and JSON logs for every service (docs/design.md §8).

One `Telemetry` per service: an SDK TracerProvider and MeterProvider with `service.name`
(OTEL_SERVICE_NAME wins), exporting spans over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
OTEL_TRACES_EXPORTER=otlp) is set (Jaeger ingests OTLP natively; gRPC or HTTP/protobuf by
OTEL_EXPORTER_OTLP_PROTOCOL, the exporters are handed in by the RPC edge, `agentmesh.rpc.telemetry.OTLP`),
else to a local JSONL span file that `agentmesh trace <request_id>` reads. Spans are exported in
batches by the OTel SDK's BatchSpanProcessor; metrics are `agentmesh.metrics`. The providers are
handed to whoever records explicitly and are not installed globally by default, because tests run
several services in one process.

The request id is minted once at the edge (or taken from `x-request-id`), travels as metadata and
W3C baggage, is set on every span by `RequestIdSpanProcessor`, and is in every JSON log line beside
the trace id. This module imports neither grpc nor the stubs: the server and client span
interceptors live in `agentmesh.rpc.telemetry`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)

from agentmesh import __version__, callctx
from agentmesh.config import ConfigError, Settings
from agentmesh.metrics import MeterSetup, Metrics, build_meter_provider
from agentmesh.redacted import RedactingSpanExporter, redact_free_text
from agentmesh.semconv import ATTR_REQUEST_ID, BAGGAGE_REQUEST_ID

__all__ = [
    "SPAN_BATCH_DELAY_S",
    "JsonFormatter",
    "JsonlSpanExporter",
    "OtlpExporters",
    "RequestIdSpanProcessor",
    "Telemetry",
    "configure_logging",
    "current_request_id",
    "otlp_endpoint",
    "service_resource",
    "service_var",
    "setup_telemetry",
    "span_to_dict",
    "trace_exporters",
]

OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
OTLP_TRACES_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"

service_var: ContextVar[str | None] = ContextVar("agentmesh_log_service", default=None)
"""The service serving the current call, so log lines are attributed right when tests run several
services in one process (one process = one service in production, where it equals the default)."""


def current_request_id() -> str | None:
    """The request id of the current call: the context variable, else the W3C baggage entry."""
    rid = callctx.request_id_var.get()
    if rid:
        return rid
    value = baggage.get_baggage(BAGGAGE_REQUEST_ID)
    return str(value) if value else None


# --- spans -----------------------------------------------------------------------------------------


class RequestIdSpanProcessor(SpanProcessor):
    """Puts `agentmesh.request_id` on every span at start, so spans made in servicer code carry it.

    The id comes from `callctx.request_id_var`, else from the baggage of the parent context (a server
    span starts before `RequestContextInterceptor.enter` has run, but after the upstream baggage was
    extracted; an edge call's server span gets the attribute from `enter` instead).
    """

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        rid = callctx.request_id_var.get()
        if not rid:
            value = baggage.get_baggage(BAGGAGE_REQUEST_ID, parent_context)
            rid = str(value) if value else None
        if rid:
            span.set_attribute(ATTR_REQUEST_ID, rid)

    def on_end(self, span: ReadableSpan) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _attributes(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    # OTel has already cleaned attribute values to primitives or tuples of them; anything else is
    # left to json.dumps(default=str) in the exporter.
    if not attrs:
        return {}
    return {key: list(value) if type(value) is tuple else value for key, value in attrs.items()}


def span_to_dict(span: ReadableSpan) -> dict[str, Any]:
    """One span as the JSONL record `agentmesh trace` reads (ids in hex, times in Unix nanoseconds)."""
    ctx = span.get_span_context()
    parent = span.parent
    service = span.resource.attributes.get(SERVICE_NAME) if span.resource else None
    return {
        "trace_id": format(ctx.trace_id, "032x") if ctx else None,
        "span_id": format(ctx.span_id, "016x") if ctx else None,
        "parent_span_id": format(parent.span_id, "016x") if parent else None,
        "name": span.name,
        "kind": span.kind.name,
        "service": service,
        "scope": span.instrumentation_scope.name if span.instrumentation_scope else None,
        "start_time_unix_nano": span.start_time,
        "end_time_unix_nano": span.end_time,
        "status": {"code": span.status.status_code.name, "description": span.status.description},
        "attributes": _attributes(span.attributes),
        "events": [
            {"name": e.name, "time_unix_nano": e.timestamp, "attributes": _attributes(e.attributes)}
            for e in span.events
        ],
        "links": [
            {
                "trace_id": format(link.context.trace_id, "032x"),
                "span_id": format(link.context.span_id, "016x"),
                "attributes": _attributes(link.attributes),
            }
            for link in span.links
        ],
    }


class JsonlSpanExporter(SpanExporter):
    """Appends one JSON object per span to a file that several processes may share.

    Each export is one `os.write` on an O_APPEND descriptor, so concurrent writers never interleave
    within a line; the lock serialises writers of this process.
    """

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = Path(path)
        self.create = create
        """False: spans are written only to a file that exists already (the CLI's, beside the services')."""
        self._lock = threading.Lock()
        self._closed = False
        # Opened once: an open/close per span cost about a tenth of a request's CPU.
        self._fd: int | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        data = "".join(
            json.dumps(span_to_dict(s), ensure_ascii=False, separators=(",", ":"), default=str) + "\n" for s in spans
        ).encode("utf-8")
        if not data or (not self.create and self._fd is None and not self.path.exists()):
            return SpanExportResult.SUCCESS
        try:
            with self._lock:
                if self._fd is None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                os.write(self._fd, data)
        except OSError:
            logging.getLogger(__name__).exception("cannot write spans to %s", self.path)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


SPAN_BATCH_DELAY_S = 0.2
"""About this long after a span ends, it is in the span file (the batch processor's schedule delay,
unless OTEL_BSP_SCHEDULE_DELAY says otherwise)."""

TRACES_EXPORTER_ENV = "OTEL_TRACES_EXPORTER"
_KNOWN_TRACE_EXPORTERS = frozenset({"otlp", "console", "none"})


def otlp_endpoint() -> str | None:
    """The OTLP endpoint from the environment (traces-specific variable first), or None."""
    for name in (OTLP_TRACES_ENDPOINT_ENV, OTLP_ENDPOINT_ENV):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def trace_exporters() -> frozenset[str]:
    """Where spans go: OTEL_TRACES_EXPORTER (`otlp`, `console`, `none`, comma-separated) when set; else
    `otlp` when an OTLP endpoint is set, else `jsonl` (the span file `agentmesh trace` reads)."""
    raw = os.environ.get(TRACES_EXPORTER_ENV, "").strip()
    if not raw:
        return frozenset({"otlp" if otlp_endpoint() else "jsonl"})
    names = frozenset(part.strip().lower() for part in raw.split(",") if part.strip())
    unknown = names - _KNOWN_TRACE_EXPORTERS
    if unknown:
        raise ConfigError(
            f"{TRACES_EXPORTER_ENV}={raw!r}: unknown exporter {sorted(unknown)}; use otlp, console or none"
        )
    return names - {"none"}


def service_resource(service_name: str) -> Resource:
    """The resource of a service's spans and metrics: `service.name` (OTEL_SERVICE_NAME wins over
    `service_name`), `service.version`, and OTEL_RESOURCE_ATTRIBUTES, read by the SDK's own detector."""
    ours = Resource.create({SERVICE_NAME: service_name, SERVICE_VERSION: __version__})
    # Resource.create lets explicit attributes override the environment's; the operator's word wins here.
    return ours.merge(OTELResourceDetector().detect())


class OtlpExporters(Protocol):
    """Builds the OTLP exporters (the RPC edge's `agentmesh.rpc.telemetry.OTLP`: gRPC or HTTP/protobuf,
    endpoint, headers, timeout and TLS from the standard OTEL_EXPORTER_OTLP_* variables)."""

    def span_exporter(self) -> SpanExporter: ...

    def metric_exporter(self) -> MetricExporter: ...


@dataclass
class Telemetry:
    """The tracing and metrics set-up of one service; hand `tracer_provider` and `metrics` to whoever records."""

    service_name: str
    """`service.name` of the resource (OTEL_SERVICE_NAME when set)."""
    tracer_provider: TracerProvider
    exporter: str
    """Where spans go: "jsonl", "otlp", "console", several joined by "+", or "none"."""
    span_file: Path | None = None
    """The JSONL file when `exporter` is jsonl."""
    endpoint: str | None = None
    """The OTLP endpoint from the environment when spans go over OTLP (None: the exporter's default)."""
    meter: MeterSetup = field(default_factory=lambda: MeterSetup(None, None, Metrics()))
    """The MeterProvider and the Prometheus registry of `/metrics` (none when metrics are off)."""
    _closed: bool = field(default=False, repr=False)

    @property
    def metrics(self) -> Metrics:
        """This service's instruments (no-op ones when metrics are off)."""
        return self.meter.metrics

    def tracer(self, name: str = "agentmesh") -> trace.Tracer:
        """A tracer of this service (for spans made in domain code, e.g. GenAI spans)."""
        return self.tracer_provider.get_tracer(name, __version__)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Exports every finished span now."""
        return self.tracer_provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        """Flushes and stops the exporters. Idempotent.

        With OTLP this blocks on network I/O: from async code use `aclose()` so the event loop (which
        may be serving the collector, as in tests) keeps running.
        """
        if self._closed:
            return
        self._closed = True
        self.tracer_provider.force_flush()
        self.tracer_provider.shutdown()
        self.meter.shutdown()

    async def aclose(self) -> None:
        """`shutdown()` in a worker thread."""
        await asyncio.to_thread(self.shutdown)


def _batch(exporter: SpanExporter, delay_ms: int | None) -> BatchSpanProcessor:
    """The SDK's batch processor over `exporter`, behind the redaction guard: no span leaves with a
    secret in its status or events (agentmesh.redacted)."""
    return BatchSpanProcessor(RedactingSpanExporter(exporter), schedule_delay_millis=delay_ms)


def setup_telemetry(
    service_name: str,
    settings: Settings,
    *,
    span_file: Path | None = None,
    set_global: bool = False,
    configure_logs: bool = True,
    otlp: OtlpExporters | None = None,
    metrics: bool = True,
    create_span_file: bool = True,
) -> Telemetry:
    """Builds the TracerProvider and MeterProvider of one service and (by default) its JSON logging.

    The standard variables apply: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (the resource),
    OTEL_TRACES_EXPORTER (`trace_exporters`), OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_* (the batch
    processor), OTEL_METRICS_EXPORTER and OTEL_METRIC_EXPORT_INTERVAL (agentmesh.metrics), and the
    OTEL_EXPORTER_OTLP_* variables read by the exporters `otlp` builds. Exporting over OTLP without
    `otlp` is a configuration error (only processes with the RPC edge export over OTLP).
    `span_file` overrides `settings.telemetry.span_file`; with `create_span_file=False` spans go to it
    only when it exists already. `metrics=False` records none (the CLI). The
    providers are made global only with `set_global=True`; everything in agentmesh takes them explicitly.
    """
    resource = service_resource(service_name)
    provider = TracerProvider(resource=resource)
    # First, so the attribute is on the span before any exporter could see it.
    provider.add_span_processor(RequestIdSpanProcessor())
    # The SDK's batch processor: spans leave on its own thread, off every call's path.
    delay_ms = None if os.environ.get("OTEL_BSP_SCHEDULE_DELAY") else int(SPAN_BATCH_DELAY_S * 1000)
    exporters = trace_exporters()
    path: Path | None = None
    if "otlp" in exporters:
        if otlp is None:
            raise ConfigError(
                f"spans go over OTLP ({OTLP_ENDPOINT_ENV} or {TRACES_EXPORTER_ENV}) but {service_name} "
                "has no OTLP exporter"
            )
        provider.add_span_processor(_batch(otlp.span_exporter(), delay_ms))
    if "console" in exporters:
        provider.add_span_processor(_batch(ConsoleSpanExporter(), delay_ms))
    if "jsonl" in exporters:
        path = Path(span_file if span_file is not None else settings.telemetry.span_file)
        # Readers that need a span the moment its call returns call force_flush.
        exporter = JsonlSpanExporter(path, create=create_span_file)
        provider.add_span_processor(_batch(exporter, delay_ms))
    meter = build_meter_provider(
        resource,
        enabled=metrics and settings.telemetry.metrics,
        otlp_exporter=otlp.metric_exporter if otlp is not None else None,
    )
    telemetry = Telemetry(
        str(resource.attributes.get(SERVICE_NAME, service_name)),
        provider,
        "+".join(sorted(exporters)) or "none",
        span_file=path,
        endpoint=otlp_endpoint() if "otlp" in exporters else None,
        meter=meter,
    )
    if set_global:
        trace.set_tracer_provider(provider)
    if configure_logs:
        configure_logging(telemetry.service_name, settings)
    return telemetry


# --- logs ------------------------------------------------------------------------------------------

# Attributes every LogRecord has; anything else on a record came from `extra={...}`.
_RECORD_FIELDS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, service, logger, message, request_id, trace_id,
    span_id, exc_info (text), and any `extra` fields."""

    def __init__(self, service_name: str) -> None:
        super().__init__()
        self.service_name = service_name

    def format(self, record: logging.LogRecord) -> str:
        span_ctx = trace.get_current_span().get_span_context()
        payload: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "service": service_var.get() or self.service_name,
            "logger": record.name,
            # Every line through the redactor: a message or traceback may quote an upstream's text.
            "message": redact_free_text(record.getMessage()),
            "request_id": current_request_id(),
            "trace_id": format(span_ctx.trace_id, "032x") if span_ctx.is_valid else None,
            "span_id": format(span_ctx.span_id, "016x") if span_ctx.is_valid else None,
        }
        if record.exc_info:
            payload["exc_info"] = redact_free_text(self.formatException(record.exc_info))
        elif record.exc_text:
            payload["exc_info"] = redact_free_text(record.exc_text)
        if record.stack_info:
            payload["stack_info"] = redact_free_text(self.formatStack(record.stack_info))
        for key, value in record.__dict__.items():
            if key in _RECORD_FIELDS or key.startswith("_"):
                continue
            # Our fields win; a clashing extra is kept under another name rather than dropped.
            shown = redact_free_text(value, whole_text=False) if isinstance(value, str) else value
            payload[f"extra_{key}" if key in payload else key] = shown
        return json.dumps(payload, ensure_ascii=False, default=str)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is at emit time (pytest swaps it per test)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


_HANDLER_MARK = "_agentmesh_json_handler"


def configure_logging(service_name: str, settings: Settings) -> None:
    """Sends every log record as a JSON line to stderr (and `settings.telemetry.log_file` if set).

    Idempotent: handlers installed by an earlier call are replaced, never duplicated.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _HANDLER_MARK, False):
            root.removeHandler(handler)
            handler.close()

    formatter = JsonFormatter(service_name)
    handlers: list[logging.Handler] = [_StderrHandler()]
    log_file = settings.telemetry.log_file
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        # Mode "a" opens with O_APPEND: lines of several processes never overwrite each other.
        handlers.append(logging.FileHandler(log_file, mode="a", encoding="utf-8"))
    for handler in handlers:
        handler.setFormatter(formatter)
        setattr(handler, _HANDLER_MARK, True)
        root.addHandler(handler)
    root.setLevel(settings.telemetry.log_level)
