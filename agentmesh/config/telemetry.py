"""The `telemetry:` section: traces, metrics and logs."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from agentmesh.config.base import _Section


class TelemetrySettings(_Section):
    """Traces, metrics and logs (docs/design.md §8). Exporters follow the standard OTEL_* variables."""

    span_file: Path = Path("var/spans.jsonl")
    """Where spans go when no OTLP endpoint is set; `agentmesh trace` reads it."""
    trace_query_url: str = ""
    """A Jaeger v2 query service (its `/api/v3` HTTP API, e.g. `http://localhost:16686`) that `agentmesh trace`
    reads traces from, falling back to `span_file`; empty: the span file only."""
    metrics: bool = True
    """Record metrics: served at `/metrics` on the service's HTTP listener (`services.<svc>.http_port`) and
    sent over OTLP when OTEL_METRICS_EXPORTER says so (docs/design.md §8)."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_file: Path | None = None
    """JSON log lines go to stderr, and also here when set."""
