"""The console's server side without a browser: `/console` on the dispatcher's HTTP listener (files,
config.json, security headers, refusals), and the RPCs the console added, over the Connect edges
as the console calls them: GetTaskTrace (spans from the span file, GetTask's visibility rule, FAILED_
PRECONDITION without a span file), ListTools' breaker states, and the Spend page's GetSpendSummary and
ListBudgets on provider_svc's edge (CORS for the console's origin, visibility, typed errors)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import grpc.aio
import httpx
import pytest

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.rpc.console import ASSETS_DIR, ConsoleApp
from agentmesh.v1 import common_pb2, dispatcher_pb2, tool_pb2, tool_pb2_grpc
from tests.console.scenario import console_stack
from tests.contract.stack import Stack

DISPATCHER = "/agentmesh.v1.DispatcherService"


@pytest.fixture
async def stack(redis_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    port = dead.getsockname()[1]
    extra = {
        "console": {"jaeger_url": "http://localhost:16686/"},
        "tools": {
            "builtins": ["calculator", "read_payload", "query_logs"],
            "logs_dir": str(tmp_path / "logs"),
            "http_allowlist": [f"http://127.0.0.1:{port}/"],
            "breaker": {"failure_threshold": 2, "open_s": 300},
            "registry": [
                {"name": "calculator", "executor": "builtin", "timeout_s": 60},
                {
                    "name": "flaky_lookup",
                    "description": "Use when a lookup is needed (its upstream is down).",
                    "endpoint_url": f"http://127.0.0.1:{port}/lookup",
                    "method": "GET",
                    "input_schema": {"type": "object", "additionalProperties": False},
                    "idempotent": True,
                    "retry": {"max_attempts": 1},
                    "timeout_s": 2,
                },
            ],
        },
    }
    running, _ = console_stack(redis_url, tmp_path, extra)
    try:
        async with running:
            yield running
    finally:
        dead.close()


def base(stack: Stack) -> str:
    return f"http://127.0.0.1:{stack.hosts['dispatcher'][0].http_port}"


def bearer(stack: Stack, subject: str = "operator", roles: tuple[str, ...] = ("operator",)) -> dict[str, str]:
    minted = Authenticator(stack.hosts["dispatcher"][0].settings.auth, "dev").mint(subject=subject, roles=roles)
    return {"authorization": f"Bearer {minted}"}


async def test_the_console_is_served_with_a_strict_policy(stack: Stack) -> None:
    tool_port = stack.hosts["tool"][0].http_port
    provider_port = stack.hosts["provider"][0].http_port
    async with httpx.AsyncClient(base_url=base(stack)) as http:
        redirect = await http.get("/console")
        assert redirect.status_code == 308 and redirect.headers["location"] == "/console/"
        page = await http.get("/console/")
        assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
        assert page.content == (ASSETS_DIR / "index.html").read_bytes()
        csp = page.headers["content-security-policy"]
        assert "script-src 'self';" in csp and "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "base-uri 'none'" in csp
        # The browser may call this origin, tool_svc's and provider_svc's edges (on the host it used), nothing else.
        assert f"connect-src 'self' http://127.0.0.1:{tool_port} http://127.0.0.1:{provider_port};" in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "no-referrer"
        assert page.headers["x-frame-options"] == "DENY"
        assert '<script src="console.js" defer></script>' in page.text and "<script>" not in page.text

        script = await http.get("/console/console.js")
        assert script.headers["content-type"] == "text/javascript; charset=utf-8"
        again = await http.get("/console/console.js", headers={"if-none-match": script.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        head = await http.head("/console/console.css")
        assert head.status_code == 200 and head.content == b"" and int(head.headers["content-length"]) > 1000

        config = (await http.get("/console/config.json")).json()
        assert config["tool_url"] == f"http://127.0.0.1:{tool_port}"
        assert config["jaeger_url"] == "http://localhost:16686" and config["oidc"] is None
        assert "key" not in json.dumps(config).lower()
        # Another name for this host: the tool URL and the policy follow it; a hostile Host header does not.
        other = (await http.get("/console/config.json", headers={"host": "localhost:1"})).json()
        assert other["tool_url"] == f"http://localhost:{tool_port}"
        assert other["provider_url"] == f"http://localhost:{provider_port}"
        hostile = await http.get("/console/", headers={"host": "evil.example; script-src *"})
        assert "evil" not in hostile.headers["content-security-policy"]

        for path in ("/console/../agentmesh.yaml", "/console/%2e%2e/agentmesh.yaml", "/console/index.html/x",
                     "/console/.env", "/console/console.js.map", "/console/gen/agentmesh/v1/tool_pb.ts"):  # fmt: skip
            answer = await http.get(path)
            assert answer.status_code == 404, path  # (a path with ".." is normalised out of /console first)
            assert answer.text in ("not found", "Not Found"), path
        posted = await http.post("/console/", content=b"x")
        assert posted.status_code == 405


async def test_an_unbuilt_console_says_how_to_build_it(tmp_path: Path, stack: Stack) -> None:
    app = ConsoleApp(stack.hosts["dispatcher"][0].settings, tmp_path / "nothing")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as http:
        answer = await http.get("/console/")
    assert answer.status_code == 503 and "scripts/build-console.sh" in answer.text


async def test_get_task_trace_over_connect_follows_get_tasks_rule(stack: Stack) -> None:
    events = await stack.run("compute 6*7")
    task_id = events[-1].task_id
    assert events[-1].status == dispatcher_pb2.TASK_STATUS_SUCCEEDED
    url = f"{DISPATCHER}/GetTaskTrace"
    async with httpx.AsyncClient(base_url=base(stack)) as http:
        everyone = {"dispatcher_svc", "tool_svc", "provider_svc", "context_svc"}
        for _ in range(100):  # a span reaches the file ~0.2 s after it ends (each service's batch processor)
            answer = await http.post(url, json={"taskId": task_id}, headers=bearer(stack))
            assert answer.status_code == 200, answer.text
            spans = answer.json().get("spans", [])  # proto3 JSON leaves an empty list out: none flushed yet
            names = {s["name"] for s in spans}
            if "agentmesh.v1.DispatcherService/RunTask" in names and {s["service"] for s in spans} >= everyone:
                break
            await asyncio.sleep(0.1)
        assert "agentmesh.v1.DispatcherService/RunTask" in names and "agentmesh.v1.ToolService/ExecuteTool" in names
        assert {s["service"] for s in spans} >= everyone
        starts = [s["startTime"] for s in spans]
        assert starts == sorted(starts)
        assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in spans)
        run = next(s for s in spans if s["name"] == "agentmesh.v1.DispatcherService/RunTask")
        assert run["kind"] == "TRACE_SPAN_KIND_SERVER" and run["attributes"]["rpc.method"] == "RunTask"
        # Not its creator ("operator" started it through stack.run), not an operator: refused, like GetTask.
        other = bearer(stack, "mallory", ("agent",))
        refused = await http.post(url, json={"taskId": task_id}, headers=other)
        assert refused.status_code == 403, refused.text
        assert (await http.post(url, json={"taskId": task_id})).status_code == 401
        missing = await http.post(url, json={"taskId": "t-nope"}, headers=bearer(stack))
        assert missing.status_code == 404
        bad = await http.post(url, json={"taskId": "../../etc/passwd"}, headers=bearer(stack))
        assert bad.status_code == 400


async def test_without_a_span_file_the_trace_is_a_failed_precondition(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")  # spans go nowhere: there is no file to read
    async with Stack(redis_url, tmp_path, http=True) as plain:
        events = await plain.run("compute 1+1")
        async with httpx.AsyncClient(base_url=base(plain)) as http:
            answer = await http.post(
                f"{DISPATCHER}/GetTaskTrace", json={"taskId": events[-1].task_id}, headers=bearer(plain)
            )
    assert answer.status_code == 400 and answer.json()["code"] == "failed_precondition", answer.text
    assert "writes no span file (spans go to: none)" in answer.json()["message"]
    assert f"agentmesh.request_id={events[-1].task_id}" not in answer.json()["message"]  # it names the request


async def test_list_tools_reports_breakers_that_are_not_closed(stack: Stack) -> None:
    tool_http = f"http://127.0.0.1:{stack.hosts['tool'][0].http_port}"
    async with httpx.AsyncClient(base_url=tool_http) as http:
        listed = await http.post("/agentmesh.v1.ToolService/ListTools", json={}, headers=bearer(stack))
        assert listed.status_code == 200 and listed.json().get("breakers", []) == []
    # Two upstream failures (connection refused) open flaky_lookup's breaker (failure_threshold 2).
    tool = stack.hosts["tool"][0]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{tool.port}") as channel:
        stub = tool_pb2_grpc.ToolServiceStub(channel)  # type: ignore[no-untyped-call]
        agent = Authenticator(tool.settings.auth, "dev").mint(
            subject="smoke", roles=("agent",), agent_id="smoke", permissions=("*:*:*",)
        )
        metadata = ((IDENTITY_HEADER, agent),)
        codes = []
        for i in range(3):
            call = common_pb2.ToolCall(id=f"c{i}", name="flaky_lookup", arguments_json="{}")
            reply = await stub.ExecuteTool(
                tool_pb2.ExecuteToolRequest(call=call, session_id="s-breaker"), metadata=metadata, timeout=30
            )
            codes.append(common_pb2.ErrorCode.Name(reply.result.error.code))
    assert codes[-1] == "ERROR_CODE_CIRCUIT_OPEN", codes
    async with httpx.AsyncClient(base_url=tool_http) as http:
        listed = await http.post("/agentmesh.v1.ToolService/ListTools", json={}, headers=bearer(stack))
    assert listed.json()["breakers"] == [{"tool": "flaky_lookup", "state": "BREAKER_STATE_OPEN", "count": 1}]
    answer = tool_pb2.ListToolsResponse()
    assert answer.breakers == []  # the field is additive: an old server's answer reads as "all closed"


async def test_the_spend_page_reads_provider_svc_over_connect_with_cors(stack: Stack) -> None:
    """What the Spend page calls: provider_svc's edge (config.json's provider_url), allowed to the console's
    origin by CORS, with the caller's token; an operator sees every agent's spend, an agent its own."""
    await stack.run("compute 6*7")  # spend of agent smoke (operator's task)
    dispatcher = base(stack)
    provider = f"http://127.0.0.1:{stack.hosts['provider'][0].http_port}"
    async with httpx.AsyncClient() as http:
        config = (await http.get(f"{dispatcher}/console/config.json")).json()
        assert config["provider_url"] == provider
        csp = (await http.get(f"{dispatcher}/console/")).headers["content-security-policy"]
        assert provider in csp
        url = f"{provider}/agentmesh.v1.ProviderService/GetSpendSummary"
        preflight = await http.options(
            url,
            headers={
                "origin": dispatcher,
                "access-control-request-method": "POST",
                "access-control-request-headers": "authorization,content-type,connect-protocol-version",
            },
        )
        assert preflight.headers.get("access-control-allow-origin") == dispatcher, preflight.headers
        summary = await http.post(url, json={"groupBy": "SPEND_GROUP_AGENT"}, headers=bearer(stack))
        assert summary.status_code == 200, summary.text
        body = summary.json()
        assert [r["key"] for r in body["rows"]] == ["smoke"] and int(body["total"]["calls"]) >= 2
        budgets = await http.post(
            f"{provider}/agentmesh.v1.ProviderService/ListBudgets", json={}, headers=bearer(stack)
        )
        assert budgets.status_code == 200 and budgets.json()["month"], budgets.text
        # An agent naming another agent is refused; a forged page token is a typed INVALID_ARGUMENT.
        agent = bearer(stack, "audit", ("agent",))
        agent["authorization"] = "Bearer " + Authenticator(stack.hosts["dispatcher"][0].settings.auth, "dev").mint(
            subject="audit", roles=("agent",), agent_id="audit"
        )
        refused = await http.post(url, json={"agentId": "smoke"}, headers=agent)
        assert refused.status_code == 403, refused.text
        forged = await http.post(url, json={"pageToken": "e30.e30"}, headers=bearer(stack))
        assert forged.status_code == 400 and "page_token" in forged.json()["message"]
        assert (await http.post(url, json={})).status_code == 401
