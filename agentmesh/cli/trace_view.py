"""`agentmesh trace <request_id>`: a request's spans as a terminal waterfall (or a task's, by its id).

With `telemetry.trace_query_url` set (a Jaeger v2 query service, agentmesh.cli.jaeger; the compose file
sets it), the spans come from its query API; when it has none of the request (or cannot be reached, said
on stderr) the span file is read. The JSONL span file is what every service appends to when no OTLP
endpoint is set (one JSON object per line: trace_id, span_id, parent_span_id, name, kind, service,
start/end_time_unix_nano, status, attributes incl. `agentmesh.request_id`, links). Every trace holding a
span of the request is drawn, parents above children, with each span's offset, duration and a bar on a
shared time axis. When spans go to OTLP and no query service is configured, it says where to look in Jaeger.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
from pathlib import Path
from typing import TextIO

from agentmesh.semconv import ATTR_REQUEST_ID
from agentmesh.spans import Span, read_spans, spans_of_request
from agentmesh.telemetry import otlp_endpoint

__all__ = ["Span", "jaeger_hint", "read_spans", "render_trace", "spans_of_request", "trace_command"]

JAEGER_UI_PORT = 16686


def _short(name: str) -> str:
    # "agentmesh.v1.ToolService/ExecuteTool" (or an older file's "/agentmesh.v1...") -> "ToolService/ExecuteTool"
    service, slash, method = name.lstrip("/").partition("/")
    if slash and "." in service:
        return f"{service.rsplit('.', 1)[-1]}/{method}"
    return name


def _tree(spans: list[Span]) -> list[tuple[int, Span]]:
    """Spans depth-first (children by start time) with their depth; orphans become roots."""
    by_id = {s.span_id: s for s in spans}
    for span in spans:
        span.children = []
    roots = []
    for span in sorted(spans, key=lambda s: (s.start, s.end)):
        parent = by_id.get(span.parent_span_id or "")
        if parent is not None and parent is not span:
            parent.children.append(span)
        else:
            roots.append(span)
    ordered: list[tuple[int, Span]] = []

    def walk(span: Span, depth: int) -> None:
        ordered.append((depth, span))
        for child in span.children:
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    return ordered


def render_trace(trace_id: str, spans: list[Span], *, width: int = 40) -> list[str]:
    """The waterfall lines of one trace."""
    t0 = min(s.start for s in spans)
    t1 = max(s.end for s in spans)
    total = max(1, t1 - t0)
    services = sorted({s.service for s in spans})
    lines = [
        f"trace {trace_id}  {len(spans)} spans  {total / 1e6:.1f} ms  services: {', '.join(services)}",
    ]
    linked = {link.get("trace_id") for s in spans for link in s.links} - {trace_id}
    for other in sorted(t for t in linked if t):
        lines.append(f"  linked to trace {other} (a resumed run continues the original task)")
    lines.append(f"  {'start ms':>9} {'dur ms':>9}  {'':<{width}}  span")
    for depth, span in _tree(spans):
        begin = int((span.start - t0) / total * width)
        length = max(1, round((span.end - span.start) / total * width))
        begin = min(begin, width - 1)
        length = min(length, width - begin)
        bar = " " * begin + "█" * length + " " * (width - begin - length)
        mark = "  ✗ " + (span.description or "error") if span.status == "ERROR" else ""
        label = f"{'  ' * depth}{_short(span.name)} [{span.service}{' ' + span.kind if span.kind else ''}]"
        lines.append(f"  {(span.start - t0) / 1e6:>9.1f} {span.duration_ms:>9.1f}  {bar}  {label}{mark}")
    return lines


def jaeger_hint(endpoint: str, request_id: str) -> str:
    """Where to find the request in the Jaeger UI next to an OTLP endpoint."""
    host = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}").hostname or "localhost"
    tags = urllib.parse.quote(json.dumps({ATTR_REQUEST_ID: request_id}, separators=(",", ":")))
    return (
        f"spans are exported over OTLP to {endpoint}; open Jaeger and search by tag {ATTR_REQUEST_ID}={request_id}:\n"
        f"  http://{host}:{JAEGER_UI_PORT}/search?service=dispatcher_svc&tags={tags}"
    )


def _from_query_service(url: str, request_id: str, err: TextIO) -> dict[str, list[Span]]:
    from agentmesh.cli.jaeger import JaegerError, JaegerQuery

    query = JaegerQuery(url)
    try:
        return spans_of_request(query.spans_of(request_id), request_id)
    except JaegerError as exc:
        err.write(f"trace query service: {exc}; reading the span file instead\n")
        return {}
    finally:
        query.close()


def _draw(traces: dict[str, list[Span]], out: TextIO, width: int) -> None:
    first = True
    for trace_id, spans in traces.items():
        if not first:
            out.write("\n")
        first = False
        out.write("\n".join(render_trace(trace_id, spans, width=width)) + "\n")


def trace_command(
    span_file: Path,
    request_id: str,
    *,
    width: int = 40,
    query_url: str = "",
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`agentmesh trace`: 0 when spans were drawn (or OTLP is in use), 1 when none were found."""
    out = out or sys.stdout
    err = err or sys.stderr
    if query_url:
        traces = _from_query_service(query_url, request_id, err)
        if traces:
            out.write(f"from {query_url}\n")
            _draw(traces, out, width)
            return 0
    endpoint = otlp_endpoint()
    if endpoint and not query_url:
        out.write(jaeger_hint(endpoint, request_id) + "\n")
        if not span_file.exists():
            return 0
    if not span_file.exists():
        err.write(f"no span file at {span_file} (telemetry.span_file); have the services run with spans on?\n")
        return 1
    traces = spans_of_request(read_spans(span_file), request_id)
    if not traces:
        if endpoint and not query_url:
            return 0
        where = f"{query_url} or {span_file}" if query_url else str(span_file)
        err.write(f"no spans with {ATTR_REQUEST_ID}={request_id} in {where}\n")
        return 1
    _draw(traces, out, width)
    return 0
