"""The console's server-side pieces without a server: reading spans back (agentmesh/spans.py, the
dispatcher's TraceReader), the console's settings, and what /console answers (agentmesh/rpc/console.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentmesh.config import ConfigError, load_settings
from agentmesh.errors import ErrorCode, FailedPreconditionError
from agentmesh.rpc.console import console_config, security_headers, tool_url
from agentmesh.spans import read_spans
from dispatcher_svc.traces import TraceReader

KEY = "k" * 40


def span(trace: str, sid: str, start: int, **attrs: str) -> str:
    record: dict[str, Any] = {
        "trace_id": trace, "span_id": sid, "parent_span_id": None, "name": sid, "kind": "INTERNAL", "service": "svc",
        "start_time_unix_nano": start, "end_time_unix_nano": start + 5, "status": {"code": "UNSET"},
        "attributes": attrs, "links": [],
    }  # fmt: skip
    return json.dumps(record)


@pytest.fixture
def span_file(tmp_path: Path) -> Path:
    lines = [
        span("t1", "a", 10, **{"agentmesh.request_id": "req-1"}),
        span("t1", "b", 20),  # no attribute: in the trace all the same
        span("t2", "c", 5, **{"agentmesh.task_id": "task-1", "agentmesh.request_id": "req-9"}),  # a resumed run
        span("t3", "d", 1, **{"agentmesh.request_id": "req-other"}),
        "{torn",
        "\u202e not json",
        json.dumps({"trace_id": "t9"}),  # no span id
    ]
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


async def test_a_task_trace_is_the_traces_of_its_request_and_of_its_task_id(span_file: Path) -> None:
    trace = await TraceReader(span_file).read("req-1", "task-1")
    assert [s.span_id for s in trace.spans] == ["c", "a", "b"]  # by start time, t3 left out
    assert not trace.truncated


def prepend(path: Path, line: str) -> int:
    """Puts `line` first in the file; the file's size before."""
    size = path.stat().st_size
    path.write_text(line + "\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    return size


async def test_only_the_newest_part_of_a_large_file_is_read(span_file: Path) -> None:
    size = prepend(span_file, span("t0", "z", 0, **{"agentmesh.request_id": "req-1"}))
    trace = await TraceReader(span_file, read_max_bytes=size).read("req-1", "task-1")
    assert "z" not in [s.span_id for s in trace.spans] and trace.truncated
    capped = await TraceReader(span_file, max_spans=2).read("req-1", "task-1")
    assert len(capped.spans) == 2 and capped.truncated


async def test_no_file_yet_is_no_spans_and_no_file_at_all_says_where_spans_go(tmp_path: Path) -> None:
    assert (await TraceReader(tmp_path / "absent.jsonl").read("r", "t")).spans == []
    with pytest.raises(FailedPreconditionError) as refused:
        await TraceReader(None, "spans are exported over OTLP to http://collector:4317").read("req-7", "t")
    assert refused.value.code == ErrorCode.FAILED_PRECONDITION
    assert "OTLP to http://collector:4317" in str(refused.value) and "agentmesh.request_id=req-7" in str(refused.value)


def test_read_spans_filters_raw_lines_before_parsing(span_file: Path) -> None:
    assert [s.span_id for s in read_spans(span_file, keep=lambda line: b"req-other" in line)] == ["d"]


IDP = "{issuer: https://idp.example/, audience: agentmesh, jwks_url: https://idp.example/jwks}"
OIDC_AUTH = f"auth: {{key: {KEY}, oidc: [{IDP}]}}\n"
ENDPOINTS = "authorization_endpoint: https://idp.example/a"


def settings(tmp_path: Path, text: str, auth: str = f"auth: {{key: {KEY}}}\n") -> Any:
    path = tmp_path / "agentmesh.yaml"
    path.write_text(auth + text, encoding="utf-8")
    return load_settings(path)


def test_console_settings_are_checked(tmp_path: Path) -> None:
    untrusted = "console: {oidc: {issuer: https://other.example/, client_id: c, %s, token_endpoint: https://o/t}}"
    with pytest.raises(ConfigError, match=r"console.oidc.issuer 'https://other.example/' is not one of auth.oidc"):
        settings(tmp_path, untrusted % ENDPOINTS)
    console = "console: {oidc: {issuer: https://idp.example/, client_id: c, %s, token_endpoint: %s}}"
    with pytest.raises(ConfigError, match="token_endpoint"):  # http only on a loopback host
        settings(tmp_path, console % (ENDPOINTS, "http://idp.example/t"), OIDC_AUTH)
    assert settings(tmp_path, console % (ENDPOINTS, "http://127.0.0.1:9/t"), OIDC_AUTH).console.oidc
    for bad in ("javascript:alert(1)", "http://user:pw@jaeger:16686", "http://jaeger:16686/?x=1", "ftp://jaeger"):
        with pytest.raises(ConfigError, match="jaeger_url"):
            settings(tmp_path, f"console: {{jaeger_url: '{bad}'}}")


def test_config_json_and_the_policy_name_only_public_values(tmp_path: Path) -> None:
    path = tmp_path / "agentmesh.yaml"
    path.write_text(
        OIDC_AUTH + "services: {tool: {port: 50053, http_port: 50063}}\n"
        "console: {jaeger_url: 'http://jaeger:16686/', oidc: {issuer: https://idp.example/, client_id: console, "
        "authorization_endpoint: https://idp.example/authorize, token_endpoint: https://login.idp.example/token}}\n",
        encoding="utf-8",
    )
    loaded = load_settings(path)
    scope = {"headers": [(b"host", b"agents.example.com:50061")]}
    config = console_config(loaded, scope)
    assert config["tool_url"] == "http://agents.example.com:50063" and config["jaeger_url"] == "http://jaeger:16686"
    assert config["oidc"]["client_id"] == "console" and KEY not in json.dumps(config)
    policy = dict(security_headers(loaded, scope))[b"content-security-policy"].decode()
    assert "connect-src 'self' http://agents.example.com:50063 https://login.idp.example;" in policy
    # IPv6 literals keep their brackets; a Host that is not a host name is left out.
    assert tool_url(loaded, {"headers": [(b"host", b"[::1]:50061")]}) == "http://[::1]:50063"
    assert tool_url(loaded, {"headers": [(b"host", b"a b")]}) == ""
    assert tool_url(loaded, {"headers": []}) == ""
    # provider_svc's edge (the Spend page) the same way: explicit, else the page's host on its http_port.
    path.write_text(
        OIDC_AUTH + "services: {provider: {port: 50054, http_port: 50064}}\n"
        "console: {tool_url: 'https://tools.example.com'}\n",
        encoding="utf-8",
    )
    spend = load_settings(path)
    assert console_config(spend, scope)["provider_url"] == "http://agents.example.com:50064"
    policy = dict(security_headers(spend, scope))[b"content-security-policy"].decode()
    assert "connect-src 'self' https://tools.example.com http://agents.example.com:50064;" in policy
    path.write_text(OIDC_AUTH + "console: {provider_url: 'https://gateway.example.com/'}\n", encoding="utf-8")
    assert console_config(load_settings(path), scope)["provider_url"] == "https://gateway.example.com"
