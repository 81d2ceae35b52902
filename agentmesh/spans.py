"""The JSONL span file read back: its spans, and the traces of one request or task (docs/design.md §8).

Every service appends one JSON object per span to `telemetry.span_file` when spans are not exported
over OTLP (agentmesh.telemetry.JsonlSpanExporter: trace_id, span_id, parent_span_id, name, kind,
service, start/end_time_unix_nano, status, attributes incl. `agentmesh.request_id`, links). `agentmesh
trace` draws them in a terminal and the dispatcher's GetTaskTrace returns them to the console; both
select with `spans_of_request`.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmesh.semconv import ATTR_REQUEST_ID, ATTR_TASK_ID

__all__ = ["Span", "read_spans", "spans_of_request"]


@dataclass
class Span:
    """One span as the file recorded it (times in Unix nanoseconds)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    service: str
    start: int
    end: int
    status: str
    description: str
    attributes: dict[str, Any]
    links: list[dict[str, Any]]
    children: list[Span] = field(default_factory=list)

    @property
    def duration_ms(self) -> float:
        return max(0, self.end - self.start) / 1e6

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Span:
        status = data.get("status") or {}
        return cls(
            trace_id=str(data.get("trace_id") or ""),
            span_id=str(data.get("span_id") or ""),
            parent_span_id=data.get("parent_span_id"),
            name=str(data.get("name") or "?"),
            kind=str(data.get("kind") or ""),
            service=str(data.get("service") or "?"),
            start=int(data.get("start_time_unix_nano") or 0),
            end=int(data.get("end_time_unix_nano") or data.get("start_time_unix_nano") or 0),
            status=str(status.get("code") or "UNSET"),
            description=str(status.get("description") or ""),
            attributes=dict(data.get("attributes") or {}),
            links=list(data.get("links") or []),
        )


def _lines(path: Path, max_bytes: int | None) -> Iterator[bytes]:
    with path.open("rb") as handle:
        if max_bytes is not None:
            size = os.fstat(handle.fileno()).st_size
            if size > max_bytes:
                handle.seek(size - max_bytes)
                handle.readline()  # the first line read is most likely cut: skipped
        yield from handle


def read_spans(
    path: Path, *, max_bytes: int | None = None, keep: Callable[[bytes], bool] | None = None
) -> Iterator[Span]:
    """Every well-formed span of the file (a torn last line, e.g. while a service writes, is skipped);
    with `max_bytes`, only of its last `max_bytes` bytes (the newest spans); with `keep`, only of the
    raw lines it accepts (a cheap filter before the JSON is parsed)."""
    for raw in _lines(path, max_bytes):
        line = raw.strip()
        if not line or (keep is not None and not keep(line)):
            continue
        try:
            data = json.loads(line)
        except ValueError:  # UnicodeDecodeError included
            continue
        if isinstance(data, dict) and data.get("trace_id") and data.get("span_id"):
            try:
                yield Span.from_json(data)
            except (TypeError, ValueError, AttributeError):  # a line of another writer's shape
                continue


def spans_of_request(spans: Iterable[Span], request_id: str) -> dict[str, list[Span]]:
    """The spans of every trace that has a span of `request_id`, by trace id (first seen first). With no
    span of that request id, `request_id` may be a task id: the traces of the task's request ids."""
    by_trace: dict[str, list[Span]] = defaultdict(list)
    wanted: list[str] = []
    of_task: list[str] = []
    for span in spans:
        by_trace[span.trace_id].append(span)
        if span.attributes.get(ATTR_REQUEST_ID) == request_id and span.trace_id not in wanted:
            wanted.append(span.trace_id)
        if span.attributes.get(ATTR_TASK_ID) == request_id and span.trace_id not in of_task:
            of_task.append(span.trace_id)
    if not wanted and of_task:
        requests = {s.attributes.get(ATTR_REQUEST_ID) for t in of_task for s in by_trace[t]} - {None}
        wanted = [
            trace
            for trace, group in by_trace.items()
            if any(s.attributes.get(ATTR_REQUEST_ID) in requests for s in group)
        ]
    ordered = sorted(wanted, key=lambda t: min(s.start for s in by_trace[t]))
    return {trace: by_trace[trace] for trace in ordered}
