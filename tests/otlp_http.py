"""A local OTLP/HTTP receiver for tests: a real HTTP server taking what the OTel SDK's HTTP/protobuf exporters
send (POST /v1/traces, /v1/metrics with ExportTraceServiceRequest / ExportMetricsServiceRequest bodies,
gzip or not), decoded with opentelemetry-proto, as an OpenTelemetry Collector or Jaeger v2 on 4318 would.

It also answers the read side of Jaeger v2's query API (its `/api/v3` HTTP gateway, what `agentmesh
trace` reads with `telemetry.trace_query_url`), from the spans it received, in Jaeger's format (the
gateway's jsonpb of OTLP TracesData: ids in hex, enums as numbers, int64 as strings; a 404 with an error
object when nothing matches; jaegertracing/jaeger cmd/jaeger/internal/extension/jaegerquery/internal/apiv3):
- `GET /api/v3/services` -> `{"services": [...]}`;
- `GET /api/v3/traces?query.serviceName=&query.startTimeMin=&query.startTimeMax=&query.attributes={json}`
  (or the snake_case aliases) -> `{"result": {"resourceSpans": [...]}}`, whole traces;
- `GET /api/v3/traces/{trace_id}` -> the same for one trace.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

__all__ = ["OtlpHttpReceiver", "ReceivedSpan", "attribute_value"]

_KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def attribute_value(value: common_pb2.AnyValue) -> Any:
    """An OTLP AnyValue as Python, keeping its type (an int stays an int: the conventions require it)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [attribute_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: attribute_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: attribute_value(kv.value) for kv in items}


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    """The exporting resource's service.name."""
    resource: dict[str, Any]
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status_code: int


@dataclass
class OtlpHttpReceiver:
    """`with OtlpHttpReceiver() as receiver:`; point OTEL_EXPORTER_OTLP_ENDPOINT at `receiver.url`."""

    traces: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
    metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    content_types: set[str] = field(default_factory=set)
    queries: list[str] = field(default_factory=list)
    """The query API's requests (path and query string), in order."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                with receiver._lock:
                    receiver.queries.append(self.path)
                if url.path == "/api/v3/services":
                    self._json(200, {"services": receiver.services()})
                elif url.path == "/api/v3/traces":
                    self._traces(receiver.find_traces(query))
                elif url.path.startswith("/api/v3/traces/"):
                    self._traces(receiver.jaeger_traces({url.path.rsplit("/", 1)[1].lower()}))
                else:
                    self._json(404, {"error": {"httpCode": 404, "message": "not found"}})

            def _traces(self, data: dict[str, Any] | None) -> None:
                if data is None:
                    self._json(404, {"error": {"httpCode": 404, "message": "No traces found"}})
                else:
                    self._json(200, {"result": data})

            def _json(self, status: int, body: Any) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                message: Any
                if self.path == "/v1/traces":
                    message = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    response = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    message = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                    response = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                with receiver._lock:
                    receiver.paths.append(self.path)
                    receiver.content_types.add(self.headers.get("Content-Type", ""))
                    (receiver.traces if self.path == "/v1/traces" else receiver.metrics).append(message)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(response)))
                self.end_headers()
                self.wfile.write(response)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="otlp-http", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> OtlpHttpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            requests = list(self.traces)
        found = []
        for request in requests:
            for resource_spans in request.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found.append(
                            ReceivedSpan(
                                service=str(resource.get("service.name")),
                                resource=resource,
                                name=span.name,
                                kind=_KINDS.get(span.kind, str(span.kind)),
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                attributes=_attributes(span.attributes),
                                status_code=span.status.code,
                            )
                        )
        return found

    # --- the read side: Jaeger v2's query API ---------------------------------------------------------

    def _resource_spans(self) -> list[tuple[str, Any, Any]]:
        """(service.name, resource, span) of every received span."""
        with self._lock:
            requests = list(self.traces)
        found = []
        for request in requests:
            for resource_spans in request.resource_spans:
                service = str(_attributes(resource_spans.resource.attributes).get("service.name"))
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found.append((service, resource_spans.resource, span))
        return found

    def services(self) -> list[str]:
        return sorted({service for service, _, _ in self._resource_spans()})

    def find_traces(self, query: dict[str, str]) -> dict[str, Any] | None:
        """Jaeger's FindTraces: the traces with a span of the service, in the time range, holding the
        attributes (values compared as text); None when none matches."""

        def get(name: str, alias: str) -> str:
            return query.get(name) or query.get(alias, "")

        service = get("query.serviceName", "query.service_name")
        low, high = get("query.startTimeMin", "query.start_time_min"), get("query.startTimeMax", "query.start_time_max")
        if not low or not high:
            raise ValueError("query.startTimeMin and query.startTimeMax are required")
        t0, t1 = (int(dt.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() * 1e9) for t in (low, high))
        wanted = json.loads(query.get("query.attributes") or "{}")
        traces = {
            span.trace_id.hex()
            for name, _, span in self._resource_spans()
            if (not service or name == service)
            and t0 <= span.start_time_unix_nano <= t1
            and all(str(_attributes(span.attributes).get(k)) == str(v) for k, v in wanted.items())
        }
        return self.jaeger_traces(traces) if traces else None

    def jaeger_traces(self, trace_ids: set[str]) -> dict[str, Any] | None:
        """TracesData of these traces as Jaeger's gateway writes it (one resourceSpans per span)."""
        found = []
        for _, resource, span in self._resource_spans():
            if span.trace_id.hex() not in trace_ids:
                continue
            data = json_format.MessageToDict(span, use_integers_for_enums=True)
            for key in ("traceId", "spanId", "parentSpanId"):
                if key in data:
                    data[key] = base64.b64decode(data[key]).hex()
            for link in data.get("links", []):
                for key in ("traceId", "spanId"):
                    link[key] = base64.b64decode(link[key]).hex()
            found.append(
                {
                    "resource": json_format.MessageToDict(resource, use_integers_for_enums=True),
                    "scopeSpans": [{"scope": {}, "spans": [data]}],
                }
            )
        return {"resourceSpans": found} if found else None

    def metric_points(self) -> Iterator[tuple[str, str, dict[str, Any], Any]]:
        """(service.name, metric name, point attributes, point) of every exported data point."""
        with self._lock:
            requests = list(self.metrics)
        for request in requests:
            for resource_metrics in request.resource_metrics:
                service = str(_attributes(resource_metrics.resource.attributes).get("service.name"))
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        data = getattr(metric, metric.WhichOneof("data") or "sum")
                        for point in data.data_points:
                            yield service, metric.name, _attributes(point.attributes), point

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the receiver got {len(self.traces)} trace and {len(self.metrics)} metric exports")
            time.sleep(0.05)
