"""Unit tests of agentmesh.telemetry: JSONL span export, request-id processor, JSON log lines."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentmesh import callctx
from agentmesh import telemetry as telemetry_module
from agentmesh.config import ConfigError, Settings
from agentmesh.semconv import ATTR_REQUEST_ID, BAGGAGE_REQUEST_ID
from agentmesh.telemetry import JsonFormatter, Telemetry, configure_logging, setup_telemetry


@pytest.fixture(autouse=True)
def _no_otlp(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


def _settings(**telemetry: object) -> Settings:
    return Settings(auth={"mode": "disabled"}, telemetry=telemetry)


@pytest.fixture
def telemetry(tmp_path: Path) -> Iterator[Telemetry]:
    tel = setup_telemetry("svc-unit", _settings(), span_file=tmp_path / "spans" / "s.jsonl", configure_logs=False)
    yield tel
    tel.shutdown()


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_jsonl_exporter_writes_one_valid_object_per_span(telemetry: Telemetry) -> None:
    tracer = telemetry.tracer("test")
    with tracer.start_as_current_span("parent", kind=trace.SpanKind.SERVER) as parent:
        parent.set_attribute("tags", ("a", "b"))
        with tracer.start_as_current_span("child") as child:
            child.add_event("checkpoint", {"step": 1})
            child.set_status(trace.Status(trace.StatusCode.ERROR, "boom"))

    assert telemetry.exporter == "jsonl"
    assert telemetry.span_file is not None
    assert telemetry.force_flush()
    lines = telemetry.span_file.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    child_rec, parent_rec = (json.loads(line) for line in lines)  # children end first
    for rec in (child_rec, parent_rec):
        assert set(rec) >= {
            "trace_id",
            "span_id",
            "parent_span_id",
            "name",
            "kind",
            "service",
            "start_time_unix_nano",
            "end_time_unix_nano",
            "status",
            "attributes",
            "events",
            "links",
        }
        assert rec["service"] == "svc-unit"
        assert len(rec["trace_id"]) == 32
        assert len(rec["span_id"]) == 16
        assert rec["end_time_unix_nano"] >= rec["start_time_unix_nano"]
    assert parent_rec["parent_span_id"] is None
    assert parent_rec["kind"] == "SERVER"
    assert parent_rec["attributes"]["tags"] == ["a", "b"]
    assert child_rec["parent_span_id"] == parent_rec["span_id"]
    assert child_rec["trace_id"] == parent_rec["trace_id"]
    assert child_rec["status"] == {"code": "ERROR", "description": "boom"}
    assert child_rec["events"][0]["name"] == "checkpoint"
    assert child_rec["events"][0]["attributes"] == {"step": 1}


def test_jsonl_exporter_appends_across_providers(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    tels = [setup_telemetry(name, _settings(), span_file=path, configure_logs=False) for name in ("a", "b")]
    try:
        for tel in tels:
            with tel.tracer().start_as_current_span("op"):
                pass
    finally:
        for tel in tels:
            tel.shutdown()
    assert [rec["service"] for rec in _read(path)] == ["a", "b"]


def test_processor_sets_request_id_on_child_spans(telemetry: Telemetry) -> None:
    tracer = telemetry.tracer("test")
    token = callctx.request_id_var.set("req-123")
    try:
        with tracer.start_as_current_span("server"), tracer.start_as_current_span("child"):
            pass
    finally:
        callctx.request_id_var.reset(token)
    assert telemetry.span_file is not None
    assert telemetry.force_flush()
    records = _read(telemetry.span_file)
    assert [r["attributes"][ATTR_REQUEST_ID] for r in records] == ["req-123", "req-123"]


def test_processor_falls_back_to_baggage(telemetry: Telemetry) -> None:
    token = otel_context.attach(baggage.set_baggage(BAGGAGE_REQUEST_ID, "from-baggage"))
    try:
        with telemetry.tracer().start_as_current_span("op"):
            pass
    finally:
        otel_context.detach(token)
    with telemetry.tracer().start_as_current_span("no-id"):
        pass
    assert telemetry.span_file is not None
    assert telemetry.force_flush()
    first, second = _read(telemetry.span_file)
    assert first["attributes"][ATTR_REQUEST_ID] == "from-baggage"
    assert ATTR_REQUEST_ID not in second["attributes"]


def test_log_formatter_emits_json_with_ids(telemetry: Telemetry) -> None:
    formatter = JsonFormatter("svc-unit")
    logger = logging.getLogger("agentmesh.test")
    token = callctx.request_id_var.set("req-log")
    try:
        with telemetry.tracer().start_as_current_span("op") as span:
            record = logger.makeRecord(
                logger.name, logging.INFO, __file__, 1, "hello %s", ("world",), None, extra={"tool": "x"}
            )
            line = formatter.format(record)
            ctx = span.get_span_context()
    finally:
        callctx.request_id_var.reset(token)
    assert "\n" not in line
    payload = json.loads(line)
    assert payload["message"] == "hello world"
    assert payload["level"] == "INFO"
    assert payload["service"] == "svc-unit"
    assert payload["logger"] == "agentmesh.test"
    assert payload["request_id"] == "req-log"
    assert payload["trace_id"] == format(ctx.trace_id, "032x")
    assert payload["span_id"] == format(ctx.span_id, "016x")
    assert payload["tool"] == "x"
    assert payload["time"].endswith("Z")


def test_log_formatter_includes_exception_text() -> None:
    formatter = JsonFormatter("svc-unit")
    try:
        raise ValueError("bad value")
    except ValueError:
        record = logging.getLogger("t").makeRecord("t", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    payload = json.loads(formatter.format(record))
    assert "ValueError: bad value" in payload["exc_info"]
    assert payload["request_id"] is None
    assert payload["trace_id"] is None


@pytest.mark.usefixtures("restore_root_logger")
def test_configure_logging_is_idempotent_and_writes_the_log_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_file = tmp_path / "logs" / "svc.log"
    settings = _settings(log_file=str(log_file))
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    root = logging.getLogger()
    # Earlier tests in the run may have installed ours already: those are replaced, not added to.
    foreign = [h for h in root.handlers if not getattr(h, telemetry_module._HANDLER_MARK, False)]
    configure_logging("svc-log", settings)
    configure_logging("svc-log", settings)
    ours = [h for h in root.handlers if getattr(h, telemetry_module._HANDLER_MARK, False)]
    assert len(ours) == 2  # stderr + file, once
    assert [h for h in root.handlers if h not in ours] == foreign
    logging.getLogger("agentmesh.test").warning("once", extra={"n": 1})
    for handler in root.handlers:
        handler.flush()
    file_lines = log_file.read_text(encoding="utf-8").splitlines()
    assert len(file_lines) == 1
    assert json.loads(file_lines[0])["message"] == "once"
    assert json.loads(file_lines[0])["n"] == 1
    assert json.loads(stderr.getvalue().splitlines()[-1])["service"] == "svc-log"


# --- batched export (the OTel SDK's BatchSpanProcessor) -------------------------------------------


class _Recording(InMemorySpanExporter):
    """Counts export calls (batches), so a test can tell one write of three spans from three."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.batches.append(len(spans))
        return super().export(spans)


def test_spans_leave_in_batches_off_the_calls_path_and_force_flush_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "batched.jsonl"
    tel = setup_telemetry("svc-batch", _settings(), span_file=path, configure_logs=False)
    try:
        tracer = tel.tracer_provider.get_tracer("t")
        for name in ("a", "b", "c"):
            tracer.start_span(name).end()
        assert tel.force_flush()
        assert sorted(r["name"] for r in _read(path)) == ["a", "b", "c"]
    finally:
        tel.shutdown()


async def test_a_span_reaches_the_file_without_a_flush(tmp_path: Path) -> None:
    # The demo and `agentmesh trace` read the file a moment after a call: the batch is written by
    # the processor's own schedule, not only on flush (polled, no wall-clock assertion).
    path = tmp_path / "scheduled.jsonl"
    tel = setup_telemetry("svc-scheduled", _settings(), span_file=path, configure_logs=False)
    try:
        tel.tracer_provider.get_tracer("t").start_span("later").end()
        for _ in range(500):
            if path.exists() and _read(path):
                break
            await asyncio.sleep(0.02)
        assert [r["name"] for r in _read(path)] == ["later"]
    finally:
        tel.shutdown()


def test_an_otlp_endpoint_uses_the_exporter_the_edge_hands_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    with pytest.raises(ConfigError, match="OTLP"):
        setup_telemetry("svc-no-exporter", _settings(), configure_logs=False)
    exporter = _Recording()

    class Exporters:
        made = 0

        def span_exporter(self) -> _Recording:
            Exporters.made += 1
            return exporter

        def metric_exporter(self) -> Any:
            raise AssertionError("metrics go over OTLP only when OTEL_METRICS_EXPORTER or its endpoint says so")

    tel = setup_telemetry("svc-otlp", _settings(), configure_logs=False, otlp=Exporters())
    try:
        assert tel.exporter == "otlp" and Exporters.made == 1 and tel.endpoint == "http://127.0.0.1:1"
        tel.tracer_provider.get_tracer("t").start_span("exported").end()
        assert tel.force_flush()
        assert [s.name for s in exporter.get_finished_spans()] == ["exported"]
    finally:
        tel.shutdown()


def test_the_standard_sampler_variables_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # README: a busy deployment samples with OTEL_TRACES_SAMPLER; a parent's decision is kept.
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    path = tmp_path / "s.jsonl"
    tel = setup_telemetry("svc-sampled", _settings(), span_file=path, configure_logs=False)
    try:
        tracer = tel.tracer_provider.get_tracer("t")
        with tracer.start_as_current_span("root") as root:
            assert not root.is_recording()
            tracer.start_span("child").end()
        tel.tracer_provider.force_flush()
        assert not path.exists() or _read(path) == []
    finally:
        tel.shutdown()


# --- the standard OTEL_* variables ------------------------------------------------------------------


def test_otel_service_name_and_resource_attributes_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "tools-eu-west")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=ignored,deployment.environment.name=staging")
    path = tmp_path / "s.jsonl"
    tel = setup_telemetry("tool_svc", _settings(), span_file=path, configure_logs=False)
    try:
        assert tel.service_name == "tools-eu-west"
        resource = tel.tracer_provider.resource.attributes
        assert resource["service.name"] == "tools-eu-west"
        assert resource["deployment.environment.name"] == "staging"
        assert resource["service.version"]
        tel.tracer("t").start_span("named").end()
        tel.force_flush()
        assert [r["service"] for r in _read(path)] == ["tools-eu-west"]
    finally:
        tel.shutdown()
    monkeypatch.delenv("OTEL_SERVICE_NAME")
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES")
    plain = setup_telemetry("tool_svc", _settings(), span_file=path, configure_logs=False)
    assert plain.service_name == "tool_svc"
    plain.shutdown()


def test_otel_traces_exporter_none_exports_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    path = tmp_path / "s.jsonl"
    tel = setup_telemetry("svc", _settings(), span_file=path, configure_logs=False)
    try:
        assert tel.exporter == "none" and tel.span_file is None
        tel.tracer("t").start_span("dropped").end()
        tel.force_flush()
        assert not path.exists()
    finally:
        tel.shutdown()


def test_otel_traces_exporter_otlp_needs_no_endpoint_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_TRACES_EXPORTER=otlp alone: the exporter's default endpoint (localhost:4317 or :4318)."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp,console")
    exporter = _Recording()

    class Exporters:
        def span_exporter(self) -> _Recording:
            return exporter

        def metric_exporter(self) -> Any:
            raise AssertionError("not asked for")

    tel = setup_telemetry("svc", _settings(), configure_logs=False, otlp=Exporters())
    try:
        assert tel.exporter == "console+otlp" and tel.endpoint is None
    finally:
        tel.shutdown()


@pytest.mark.parametrize("value", ["jaeger", "otlp,zipkin"])
def test_an_unknown_traces_exporter_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", value)
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER"):
        setup_telemetry("svc", _settings(), configure_logs=False)


async def test_otel_bsp_schedule_delay_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our 200 ms default applies only when the operator set no OTEL_BSP_SCHEDULE_DELAY."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    path = tmp_path / "s.jsonl"
    tel = setup_telemetry("svc", _settings(), span_file=path, configure_logs=False)
    try:
        tel.tracer("t").start_span("held").end()
        await asyncio.sleep(4 * telemetry_module.SPAN_BATCH_DELAY_S)
        assert not path.exists(), "exported on our default schedule, not the operator's"
        tel.force_flush()
        assert [r["name"] for r in _read(path)] == ["held"]
    finally:
        tel.shutdown()


def test_the_cli_writes_spans_only_to_a_file_that_exists(tmp_path: Path) -> None:
    path = tmp_path / "var" / "spans.jsonl"
    for exists in (False, True):
        if exists:
            path.parent.mkdir()
            path.write_text("", encoding="utf-8")
        tel = setup_telemetry(
            "agentmesh-cli", _settings(), span_file=path, configure_logs=False, create_span_file=False
        )
        try:
            tel.tracer("t").start_span(f"cli-{exists}").end()
            tel.force_flush()
        finally:
            tel.shutdown()
        assert path.exists() == exists and path.parent.exists() == exists
    assert [r["name"] for r in _read(path)] == ["cli-True"]
