"""A task's trace for GetTaskTrace: its spans, read back from the span file (docs/design.md §8).

The services append their spans to `telemetry.span_file` when spans are not exported over OTLP (one
file on one machine: `agentmesh up`, the tests); this reads the newest part of it (at most
`READ_MAX_BYTES`, in a worker thread) and keeps the traces of the task: those holding a span of the
task's request id, or of its task id (a resumed run, started by another request). Two passes, each
parsing only the lines that contain what it looks for: the trace ids of the task's spans, then those
traces' spans. With spans going to OTLP only there is no file: FAILED_PRECONDITION, naming where they go.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from agentmesh.errors import FailedPreconditionError
from agentmesh.semconv import ATTR_REQUEST_ID, ATTR_TASK_ID
from agentmesh.spans import Span, read_spans

__all__ = ["MAX_SPANS", "READ_MAX_BYTES", "TaskTrace", "TraceReader"]

READ_MAX_BYTES = 64 * 1024 * 1024
"""The newest part of the span file read per call: a long-lived file is not read whole every time."""
MAX_SPANS = 5000
"""At most this many spans are returned (the earliest), a waterfall's worth."""


@dataclass(frozen=True)
class TaskTrace:
    """The spans of a task's traces, by start time."""

    spans: list[Span]
    truncated: bool
    """True when spans were left out (the file's older part not read, or more than MAX_SPANS)."""


def _of_task(span: Span, request_id: str, task_id: str) -> bool:
    attributes = span.attributes
    return (bool(request_id) and attributes.get(ATTR_REQUEST_ID) == request_id) or attributes.get(
        ATTR_TASK_ID
    ) == task_id


def select(path: Path, request_id: str, task_id: str, *, max_bytes: int | None) -> list[Span]:
    """The spans of every trace holding a span of `request_id` or of `task_id` in the file's last
    `max_bytes`, by start time."""
    needles = [n.encode() for n in (request_id, task_id) if n]
    marked = read_spans(path, max_bytes=max_bytes, keep=lambda line: any(n in line for n in needles))
    wanted = {span.trace_id for span in marked if _of_task(span, request_id, task_id)}
    if not wanted:
        return []
    ids = [t.encode() for t in wanted]
    spans = read_spans(path, max_bytes=max_bytes, keep=lambda line: any(t in line for t in ids))
    chosen = [s for s in spans if s.trace_id in wanted]
    return sorted(chosen, key=lambda s: (s.start, s.end, s.span_id))


class TraceReader:
    """Reads tasks' traces from `span_file`; `span_file` None: spans go elsewhere (`where` says where)."""

    def __init__(
        self,
        span_file: Path | None,
        where: str = "",
        *,
        read_max_bytes: int = READ_MAX_BYTES,
        max_spans: int = MAX_SPANS,
    ) -> None:
        self.span_file = span_file
        self.where = where
        self.read_max_bytes = read_max_bytes
        self.max_spans = max_spans

    async def read(self, request_id: str, task_id: str) -> TaskTrace:
        """The task's trace; FAILED_PRECONDITION when this dispatcher writes no span file."""
        if self.span_file is None:
            raise FailedPreconditionError(
                f"this dispatcher writes no span file ({self.where or 'spans are not recorded'}): "
                f"look for agentmesh.request_id={request_id or task_id} in Jaeger"
            )
        return await asyncio.to_thread(self._read, self.span_file, request_id, task_id)

    def _read(self, path: Path, request_id: str, task_id: str) -> TaskTrace:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return TaskTrace([], False)  # no span recorded yet
        chosen = select(path, request_id, task_id, max_bytes=self.read_max_bytes)
        truncated = size > self.read_max_bytes or len(chosen) > self.max_spans
        return TaskTrace(chosen[: self.max_spans], truncated)
