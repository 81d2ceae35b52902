"""A CLIENT span and the trace headers of every HTTP call to an upstream (docs/design.md §8).

HTTP tools (tool_svc/http.py), model servers (provider_svc/models/_http.py) and MCP servers over
streamable HTTP (tool_svc/mcp/connection.py) send their requests through `TracedTransport` (httpx) or
a transport built on `HttpClientSpan` (httpx2), so each request:

- carries `traceparent` (and `tracestate`) of its own CLIENT span, and `x-request-id`: the upstream's
  logs and spans join the same trace and request as ours. Only these: no baggage, never the caller's
  identity token, nothing else of the incoming call;
- has a CLIENT span following the OTel HTTP semantic conventions: named after the method (`POST`),
  with `http.request.method`, `server.address`, `server.port` (an int), `url.full` (without user info or
  query: a GET tool's query carries the model's arguments), `url.scheme`, `network.protocol.name`; then
  `http.response.status_code` and `network.protocol.version`; a status of 400 or more, or a transport
  failure, sets `error.type` (the status code as text, or the exception's class name) and the ERROR
  status. The span ends when the response's headers arrive (a streamed body is read afterwards).

The core imports no grpc: the tracer is handed in by the service (its TracerProvider's).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import httpx
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentmesh import callctx
from agentmesh.redacted import redact_free_text
from agentmesh.semconv import ERROR_TYPE
from agentmesh.telemetry import current_request_id

__all__ = ["ERROR_TYPE", "HttpClientSpan", "TracedTransport", "safe_url", "set_error_type"]


_W3C = TraceContextTextMapPropagator()
_DEFAULT_PORTS = {"http": 80, "https": 443}


def safe_url(url: str) -> str:
    """`url` without user info, query or fragment (what a span and an error may show)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def set_error_type(span: trace.Span, error_type: str, description: str = "") -> None:
    """Marks `span` failed: `error.type` and the ERROR status, its description masked (it may quote an
    upstream's answer) and then clipped to 200 characters."""
    span.set_attribute(ERROR_TYPE, error_type)
    shown = redact_free_text(description)[:200] if description else error_type
    span.set_status(trace.Status(trace.StatusCode.ERROR, shown))


class HttpClientSpan:
    """The CLIENT span of one outgoing HTTP request (see the module doc)."""

    def __init__(
        self,
        tracer: trace.Tracer,
        method: str,
        url: str,
        *,
        parent: otel_context.Context | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        parts = urlsplit(url)
        method = method.upper()
        base: dict[str, Any] = {
            "http.request.method": method,
            "url.full": safe_url(url),
            "url.scheme": parts.scheme,
            "server.address": parts.hostname or "",
            "network.protocol.name": "http",
        }
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
        if port is not None:
            base["server.port"] = port
        base.update(attributes or {})
        self.span = tracer.start_span(method, context=parent, kind=trace.SpanKind.CLIENT, attributes=base)
        self._ended = False

    def headers(self, request_id: str | None = None) -> dict[str, str]:
        """`traceparent`/`tracestate` of this span, and `x-request-id` (the current call's unless given)."""
        carrier: dict[str, str] = {}
        _W3C.inject(carrier, context=trace.set_span_in_context(self.span))
        rid = request_id or current_request_id()
        if rid:
            carrier[callctx.REQUEST_ID_HEADER] = rid
        return carrier

    def inject(self, headers: MutableMapping[str, str], request_id: str | None = None) -> None:
        """Sets this span's trace headers and the request id on `headers`."""
        for name, value in self.headers(request_id).items():
            headers[name] = value

    def answered(self, status_code: int, http_version: str | bytes | None = None) -> None:
        """The response's headers arrived: its status (400 or more fails the span); ends the span."""
        if self._ended:
            return
        self.span.set_attribute("http.response.status_code", status_code)
        version = http_version.decode("ascii", "replace") if isinstance(http_version, bytes) else http_version
        if version:
            self.span.set_attribute("network.protocol.version", version.upper().removeprefix("HTTP/"))
        if status_code >= 400:
            set_error_type(self.span, str(status_code), f"HTTP {status_code}")
        self._end()

    def failed(self, exc: BaseException) -> None:
        """No response: `error.type` is the exception's class name; ends the span."""
        if self._ended:
            return
        kind = type(exc)
        set_error_type(self.span, f"{kind.__module__}.{kind.__qualname__}", str(exc) or kind.__name__)
        self._end()

    def _end(self) -> None:
        self._ended = True
        self.span.end()


class TracedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends every request through `inner` inside its CLIENT span, with the trace
    headers and the request id set (httpx's public transport API: clients and adapters are unchanged)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, tracer: trace.Tracer | None) -> None:
        self.inner = inner
        self.tracer = tracer or trace.NoOpTracer()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        span = HttpClientSpan(self.tracer, request.method, str(request.url))
        span.inject(request.headers)
        try:
            response = await self.inner.handle_async_request(request)
        except BaseException as exc:
            span.failed(exc)
            raise
        span.answered(response.status_code, response.extensions.get("http_version"))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
