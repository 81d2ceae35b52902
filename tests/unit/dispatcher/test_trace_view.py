"""`agentmesh trace`: the waterfall drawn from a JSONL span file."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from agentmesh.cli.trace_view import jaeger_hint, read_spans, render_trace, spans_of_request, trace_command

MS = 1_000_000


def span(
    trace: str, sid: str, parent: str | None, name: str, service: str, start: int, end: int, **attrs: str
) -> dict[str, object]:
    return {
        "trace_id": trace,
        "span_id": sid,
        "parent_span_id": parent,
        "name": name,
        "kind": "SERVER" if name.startswith("/") else "INTERNAL",
        "service": service,
        "start_time_unix_nano": start * MS,
        "end_time_unix_nano": end * MS,
        "status": {"code": "ERROR" if "fail" in name else "UNSET", "description": "boom" if "fail" in name else None},
        "attributes": attrs,
        "links": [],
    }


@pytest.fixture
def span_file(tmp_path: Path) -> Path:
    rid = {"agentmesh.request_id": "req-1"}
    lines = [
        span("t1", "c", "b", "/agentmesh.v1.ToolService/ExecuteTool", "tool_svc", 50, 90, **rid),
        span("t1", "a", None, "/agentmesh.v1.DispatcherService/RunTask", "dispatcher_svc", 0, 100, **rid),
        span("t1", "b", "a", "invoke_agent ops", "dispatcher_svc", 10, 95),  # no attribute: same trace
        span("t1", "d", "b", "fail step", "dispatcher_svc", 91, 94, **rid),
        span("t2", "x", None, "/other", "tool_svc", 0, 5, **{"agentmesh.request_id": "req-2"}),
    ]
    resumed = span("t3", "r", None, "invoke_agent ops", "dispatcher_svc", 200, 260, **rid)
    resumed["links"] = [{"trace_id": "t1", "span_id": "b", "attributes": {}}]
    path = tmp_path / "spans.jsonl"
    text = "\n".join(json.dumps(s) for s in [*lines, resumed]) + "\n{torn line"
    path.write_text(text, encoding="utf-8")
    return path


def test_waterfall_orders_parents_before_children(span_file: Path) -> None:
    traces = spans_of_request(read_spans(span_file), "req-1")
    assert list(traces) == ["t1", "t3"]
    assert len(traces["t1"]) == 4  # the span without the attribute belongs to the trace
    lines = render_trace("t1", traces["t1"], width=20)
    assert lines[0].startswith("trace t1  4 spans  100.0 ms")
    body = lines[2:]
    assert len(body) == 4
    assert "DispatcherService/RunTask [dispatcher_svc SERVER]" in body[0]
    assert "  invoke_agent ops" in body[1]
    assert "    ToolService/ExecuteTool [tool_svc SERVER]" in body[2]
    assert "✗ boom" in body[3]
    # Bars sit on one time axis (columns 23..42): the tool call runs from 50 to 90 of 100 ms.
    assert body[0][23:43] == "█" * 20
    assert body[2][23:43] == " " * 10 + "█" * 8 + " " * 2


def test_trace_command_prints_every_trace_of_the_request(span_file: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert trace_command(span_file, "req-1", out=out, err=err) == 0
    text = out.getvalue()
    assert "trace t1" in text and "trace t3" in text and "linked to trace t1" in text
    assert "/other" not in text and "other" not in text.split("trace t3")[0].split("services")[0]
    assert trace_command(span_file, "nope", out=out, err=err) == 1
    assert "no spans with agentmesh.request_id=nope" in err.getvalue()
    assert trace_command(span_file.with_name("missing.jsonl"), "req-1", out=out, err=err) == 1


def test_otlp_points_to_jaeger(span_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://jaeger:4317")
    out = io.StringIO()
    assert trace_command(span_file.with_name("missing.jsonl"), "req-9", out=out) == 0
    assert "http://jaeger:16686/search?service=dispatcher_svc&tags=" in out.getvalue()
    assert "%22agentmesh.request_id%22%3A%22req-9%22" in jaeger_hint("jaeger:4317", "req-9")


def test_a_task_id_finds_the_traces_of_its_request(tmp_path: Path) -> None:
    """`agentmesh trace <task id>`: with no span of that request id, the task's request is drawn."""
    rid = {"agentmesh.request_id": "req-9"}
    lines = [
        span("t9", "a", None, "agentmesh run", "agentmesh-cli", 0, 100, **rid),
        span("t9", "b", "a", "invoke_agent assistant", "dispatcher_svc", 5, 90, **rid, **{"agentmesh.task_id": "c-1"}),
        span("t8", "z", None, "/other", "tool_svc", 0, 5, **{"agentmesh.request_id": "req-8"}),
    ]
    assert list(spans_of_request([], "c-1")) == []
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(json.dumps(s) for s in lines) + "\n", encoding="utf-8")
    assert list(spans_of_request(read_spans(path), "c-1")) == ["t9"]
    assert list(spans_of_request(read_spans(path), "req-9")) == ["t9"]
    out, err = io.StringIO(), io.StringIO()
    assert trace_command(path, "c-1", out=out, err=err) == 0
    assert "invoke_agent assistant" in out.getvalue()
    assert trace_command(path, "c-2", out=out, err=err) == 1
