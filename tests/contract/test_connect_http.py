"""The Connect protocol on the services' HTTP listeners (agentmesh/rpc/connect.py): HTTP/JSON as curl
sends it, enveloped Connect streams and gRPC-Web, through the same edge as the gRPC port.

The four real services run in-process (tests/contract/stack.py) with their HTTP listeners on free ports;
httpx (and one real curl) is the client.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import importlib
import json
import logging
import shutil
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from connectrpc.errors import ConnectError
from cryptography import x509
from google.protobuf import descriptor_pool
from google.rpc import status_pb2  # type: ignore[import-untyped]

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.rpc import http as http_listener
from agentmesh.rpc.connect import ConnectServicer, served_methods
from agentmesh.rpc.ratelog import RateLimitedLog
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc
from agentmesh.v1.dispatcher_connect import DispatcherServiceClient
from tests.certs import make_ca, swap_leaf, write_leaf
from tests.conftest import RunningService
from tests.contract.stack import AGENT, Stack
from tool_svc.server import SPEC as TOOL_SPEC

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
DISPATCHER = "/agentmesh.v1.DispatcherService"


@pytest.fixture
async def stack(redis_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    overrides = getattr(request, "param", None) or {}
    async with Stack(redis_url, tmp_path, overrides, http=True) as running:
        yield running


def base_url(stack: Stack, service: str = "dispatcher") -> str:
    return f"http://127.0.0.1:{stack.hosts[service][0].http_port}"


def token(stack: Stack, roles: tuple[str, ...] = ("operator",), subject: str = "operator") -> str:
    return Authenticator(stack.hosts["dispatcher"][0].settings.auth, "dev").mint(subject=subject, roles=roles)


def bearer(stack: Stack) -> dict[str, str]:
    return {"authorization": f"Bearer {token(stack)}"}


def envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", flags, len(data)) + data


def frames(body: bytes) -> list[tuple[int, bytes]]:
    """The (flags, data) frames of an enveloped body (Connect streams and gRPC-Web alike)."""
    out, at = [], 0
    while at < len(body):
        flags, size = struct.unpack(">BI", body[at : at + 5])
        out.append((flags, body[at + 5 : at + 5 + size]))
        at += 5 + size
    assert at == len(body), "a truncated frame"
    return out


def web_trailers(frame: bytes) -> dict[str, str]:
    """The headers of a gRPC-Web trailer frame ("key: value" lines)."""
    pairs = (line.split(":", 1) for line in frame.decode().splitlines() if line.strip())
    return {key.strip().lower(): value.strip() for key, value in pairs}


def error_detail(error: dict[str, Any]) -> common_pb2.ErrorDetail:
    """The agentmesh.v1.ErrorDetail among a Connect error's details."""
    values = [d["value"] for d in error.get("details", []) if d["type"] == "agentmesh.v1.ErrorDetail"]
    assert len(values) == 1, error
    return common_pb2.ErrorDetail.FromString(base64.b64decode(values[0] + "=" * (-len(values[0]) % 4)))


async def until_done(http: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    """GetTask until the task has ended; its last answer."""
    for _ in range(600):
        got = await http.post(f"{DISPATCHER}/GetTask", json={"taskId": task_id})
        assert got.status_code == 200, got.text
        assert got.headers["content-type"] == "application/json" and got.headers["x-request-id"]
        task: dict[str, Any] = got.json()["task"]
        if task["status"] not in ("TASK_STATUS_PENDING", "TASK_STATUS_RUNNING"):
            return task
        await asyncio.sleep(0.05)
    raise AssertionError(f"task {task_id} did not end")


async def test_curl_json_starts_a_task_and_gets_it(stack: Stack) -> None:
    curl = shutil.which("curl")
    assert curl, "curl is part of the base image"
    url = f"{base_url(stack)}{DISPATCHER}/StartTask"
    proc = await asyncio.create_subprocess_exec(
        curl, "-sS", "--fail-with-body", "-H", "Content-Type: application/json",
        "-H", f"Authorization: Bearer {token(stack)}", "-d", json.dumps({"agentId": AGENT, "goal": "compute 6*7"}),
        url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, (out, err)
    task = json.loads(out)["task"]
    assert task["agentId"] == AGENT and task["taskId"]
    async with httpx.AsyncClient(base_url=base_url(stack), headers=bearer(stack)) as http:
        ended = await until_done(http, task["taskId"])
        assert ended["status"] == "TASK_STATUS_SUCCEEDED", ended
        # A read-only RPC may also be a Connect GET.
        query = {"encoding": "json", "message": json.dumps({"taskId": task["taskId"]})}
        by_get = await http.get(f"{DISPATCHER}/GetTask", params=query)
        assert by_get.status_code == 200 and by_get.json()["task"]["taskId"] == task["taskId"]
        # Counted in the RPC metrics as Connect calls, on the same listener's /metrics.
        scrape = (await http.get("/metrics")).text
    assert 'rpc_method="StartTask"' in scrape and 'rpc_system="connect_rpc"' in scrape


async def test_an_unknown_agent_is_connect_error_json_with_the_grpc_error_detail(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=base_url(stack), headers=bearer(stack)) as http:
        reply = await http.post(f"{DISPATCHER}/StartTask", json={"agentId": "no-such-agent", "goal": "x"})
    assert reply.headers["content-type"] == "application/json"
    error = reply.json()
    detail = error_detail(error)
    assert {d["type"] for d in error["details"]} >= {"google.rpc.ErrorInfo", "agentmesh.v1.ErrorDetail"}
    # The same answer as on the gRPC port: code, class, message.
    assert stack.channel is not None
    stub = dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel)  # type: ignore[no-untyped-call]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.StartTask(
            dispatcher_pb2.StartTaskRequest(agent_id="no-such-agent", goal="x"),
            metadata=((IDENTITY_HEADER, token(stack)),),
        )
    over_grpc = from_rpc_error(caught.value)
    assert error["code"] == caught.value.code().name.lower()
    assert reply.status_code == {"not_found": 404, "invalid_argument": 400, "failed_precondition": 400}[error["code"]]
    assert common_pb2.ErrorCode.Name(detail.code) == f"ERROR_CODE_{over_grpc.code.name}"
    assert detail.message == over_grpc.message == error["message"]
    assert detail.error_class == common_pb2.ErrorClass.Value(f"ERROR_CLASS_{over_grpc.error_class.name}")


async def test_run_task_streams_enveloped_connect_json_to_the_end(stack: Stack) -> None:
    headers = {**bearer(stack), "content-type": "application/connect+json", "connect-protocol-version": "1"}
    body = envelope({"start": {"agentId": AGENT, "goal": "compute 2+3"}})
    async with (
        httpx.AsyncClient(base_url=base_url(stack), timeout=60) as http,
        http.stream("POST", f"{DISPATCHER}/RunTask", content=body, headers=headers) as reply,
    ):
        assert reply.status_code == 200
        assert reply.headers["content-type"] == "application/connect+json"
        raw = b"".join([chunk async for chunk in reply.aiter_raw()])
    received = frames(raw)
    *messages, (end_flags, end) = received
    assert end_flags == 0x02 and json.loads(end) == {}, end  # end-of-stream, no error
    events = [json.loads(data)["event"] for flags, data in messages if flags == 0]
    assert events[-1]["status"] == "TASK_STATUS_SUCCEEDED"
    assert any("5" in json.dumps(e) for e in events), events[-1]
    # WatchTask replays the ended task's events over the same protocol, then ends the stream.
    watch = envelope({"taskId": events[-1]["taskId"]})
    async with httpx.AsyncClient(base_url=base_url(stack), timeout=60) as http:
        watched = await http.post(f"{DISPATCHER}/WatchTask", content=watch, headers=headers)
    *replayed, (flags, end) = frames(watched.content)
    assert flags == 0x02 and json.loads(end) == {}
    sequences = [json.loads(data)["event"].get("sequence") for _, data in replayed]
    assert [n for n in sequences if n] == [e["sequence"] for e in events if e.get("sequence")]  # no heartbeats


async def test_run_task_over_grpc_web_ends_with_its_status_in_the_trailer_frame(stack: Stack) -> None:
    request = dispatcher_pb2.RunTaskRequest(start=dispatcher_pb2.StartTaskRequest(agent_id=AGENT, goal="compute 1+1"))
    data = request.SerializeToString()
    headers = {**bearer(stack), "content-type": "application/grpc-web+proto", "x-grpc-web": "1"}
    async with httpx.AsyncClient(base_url=base_url(stack), timeout=60) as http:
        reply = await http.post(
            f"{DISPATCHER}/RunTask", content=struct.pack(">BI", 0, len(data)) + data, headers=headers
        )
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/grpc-web+proto"
    *messages, (flags, trailer) = frames(reply.content)
    assert flags == 0x80 and web_trailers(trailer)["grpc-status"] == "0"
    last = dispatcher_pb2.RunTaskResponse.FromString(messages[-1][1])
    assert last.event.status == dispatcher_pb2.TASK_STATUS_SUCCEEDED
    # An error ends the stream with a trailer frame: grpc-status and the google.rpc.Status with our ErrorDetail.
    bad = dispatcher_pb2.RunTaskRequest(start=dispatcher_pb2.StartTaskRequest(agent_id="nope", goal="x"))
    data = bad.SerializeToString()
    async with httpx.AsyncClient(base_url=base_url(stack), timeout=60) as http:
        refused = await http.post(
            f"{DISPATCHER}/RunTask", content=struct.pack(">BI", 0, len(data)) + data, headers=headers
        )
    (flags, trailer_frame), = frames(refused.content)  # fmt: skip
    trailers = web_trailers(trailer_frame)
    assert flags == 0x80 and trailers["grpc-status"] == str(grpc.StatusCode.NOT_FOUND.value[0]), trailers
    raw = trailers["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(base64.b64decode(raw + "=" * (-len(raw) % 4)))
    packed = [d for d in status.details if d.type_url.endswith("/agentmesh.v1.ErrorDetail")]
    assert common_pb2.ErrorDetail.FromString(packed[0].value).code == common_pb2.ERROR_CODE_NOT_FOUND


async def test_no_token_and_a_bad_token_are_unauthenticated_before_the_body_is_read(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=base_url(stack)) as http:
        # Not even valid JSON: authentication comes first.
        none = await http.post(
            f"{DISPATCHER}/StartTask", content=b"{not json", headers={"content-type": "application/json"}
        )
        bad = await http.post(
            f"{DISPATCHER}/GetTask", json={"taskId": "t"}, headers={"authorization": "Bearer not-a-token"}
        )
        scheme = await http.post(f"{DISPATCHER}/GetTask", json={"taskId": "t"}, headers={"authorization": "Basic eDp5"})
        stream = await http.post(
            f"{DISPATCHER}/RunTask", content=envelope({"start": {"agentId": AGENT}}),
            headers={"content-type": "application/connect+json"},
        )  # fmt: skip
    for reply in (none, bad, scheme):
        assert reply.status_code == 401, reply.text
        assert reply.json()["code"] == "unauthenticated"
        assert error_detail(reply.json()).code == common_pb2.ERROR_CODE_UNAUTHENTICATED
        assert reply.headers["x-request-id"]
    (flags, end), = frames(stream.content)  # fmt: skip
    assert flags == 0x02 and json.loads(end)["error"]["code"] == "unauthenticated"


async def test_a_missing_role_is_permission_denied_as_on_grpc(stack: Stack) -> None:
    agent = token(stack, roles=("agent",), subject="some-agent")
    async with httpx.AsyncClient(base_url=base_url(stack)) as http:
        reply = await http.post(
            f"{DISPATCHER}/ResolveApproval",
            json={"taskId": "t-1", "approvalId": "a-1"},
            headers={"authorization": f"Bearer {agent}"},
        )
    assert reply.status_code == 403 and reply.json()["code"] == "permission_denied", reply.text
    detail = error_detail(reply.json())
    assert detail.code == common_pb2.ERROR_CODE_PERMISSION_DENIED and detail.missing_permission


async def test_a_traceparent_sent_over_http_continues_in_the_services_spans(stack: Stack, tmp_path: Path) -> None:
    headers = {**bearer(stack), "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "x-request-id": "req-http-1"}
    async with httpx.AsyncClient(base_url=base_url(stack), headers=headers) as http:
        reply = await http.post(f"{DISPATCHER}/StartTask", json={"agentId": AGENT, "goal": "compute 3*3"})
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-request-id"] == "req-http-1"
        # The task runs after StartTask answered; its calls to the other services carry its trace.
        await until_done(http, reply.json()["task"]["taskId"])
    for host, _ in stack.hosts.values():
        host.telemetry.force_flush()
    spans = [json.loads(line) for line in (tmp_path / "spans.jsonl").read_text().splitlines()]
    server = [
        s for s in spans if s["name"] == "agentmesh.v1.DispatcherService/StartTask" and s["kind"] == "SERVER"
    ]  # fmt: skip
    assert len(server) == 1
    assert (server[0]["trace_id"], server[0]["parent_span_id"]) == (TRACE_ID, PARENT_ID)
    assert server[0]["attributes"]["rpc.system"] == "connect_rpc"
    assert server[0]["attributes"]["agentmesh.request_id"] == "req-http-1"
    # The dispatcher's own calls to the other services stay in the caller's trace.
    downstream = [s for s in spans if s["kind"] == "SERVER" and not s["name"].startswith("agentmesh.v1.Dispatcher")]
    assert downstream and all(s["trace_id"] == TRACE_ID for s in downstream)


async def test_connect_timeout_ms_is_the_calls_deadline(stack: Stack) -> None:
    headers = {**bearer(stack), "content-type": "application/connect+json", "connect-timeout-ms": "1"}
    async with httpx.AsyncClient(base_url=base_url(stack), timeout=60) as http:
        reply = await http.post(
            f"{DISPATCHER}/RunTask",
            content=envelope({"start": {"agentId": AGENT, "goal": "compute 9*9"}}),
            headers=headers,
        )
        unary = await http.post(
            f"{DISPATCHER}/ListAgents", json={}, headers={**bearer(stack), "connect-timeout-ms": "not-a-number"}
        )
    *messages, (flags, end) = frames(reply.content)
    assert flags == 0x02
    ended = json.loads(end)
    if "error" in ended:  # the stream outlived its deadline
        assert ended["error"]["code"] == "deadline_exceeded", ended
        assert error_detail(ended["error"]).code == common_pb2.ERROR_CODE_DEADLINE_EXCEEDED
    else:  # or the task ended first: its run never inherits the deadline of the call that queued it (issue 49)
        events = [json.loads(data)["event"] for _, data in messages]
        assert events[-1]["status"] == "TASK_STATUS_SUCCEEDED", events[-1]
    assert unary.status_code == 400 and unary.json()["code"] == "invalid_argument"


SLOW_MODEL = {
    "providers": {
        "backends": [
            {
                "name": "scripted",
                "type": "scripted",
                "models": [{"name": "smoke", "policy": "tests.contract.stack:policy", "latency_ms": 1500}],
            }
        ]
    }
}


@pytest.mark.parametrize("stack", [SLOW_MODEL], indirect=True)
async def test_connect_timeout_ms_cuts_a_stream_that_outlives_it_while_the_task_goes_on(stack: Stack) -> None:
    """Each model reply takes 1.5 s: a 400 ms deadline ends the stream typed, not the task."""
    headers = {**bearer(stack), "content-type": "application/connect+json", "connect-timeout-ms": "400"}
    async with httpx.AsyncClient(base_url=base_url(stack), headers=bearer(stack), timeout=60) as http:
        reply = await http.post(
            f"{DISPATCHER}/RunTask",
            content=envelope({"start": {"agentId": AGENT, "goal": "compute 9*9"}}),
            headers=headers,
        )
        *messages, (flags, end) = frames(reply.content)
        assert flags == 0x02
        ended = json.loads(end)
        assert ended["error"]["code"] == "deadline_exceeded", ended
        assert error_detail(ended["error"]).code == common_pb2.ERROR_CODE_DEADLINE_EXCEEDED
        events = [json.loads(data)["event"] for _, data in messages]
        assert events and events[-1]["status"] != "TASK_STATUS_SUCCEEDED", events
        task = await until_done(http, events[0]["taskId"])
    assert task["status"] == "TASK_STATUS_SUCCEEDED", task


async def test_an_overloaded_server_sheds_http_calls_as_grpc_ones(stack: Stack) -> None:
    limiter = stack.hosts["dispatcher"][0].http_limiter
    limiter.in_flight = limiter.limit  # every HTTP slot taken (gRPC has its own count)
    try:
        async with httpx.AsyncClient(base_url=base_url(stack), headers=bearer(stack)) as http:
            reply = await http.post(f"{DISPATCHER}/ListAgents", json={})
    finally:
        limiter.in_flight = 0
    assert reply.status_code == 429 and reply.json()["code"] == "resource_exhausted"
    detail = error_detail(reply.json())
    assert detail.code == common_pb2.ERROR_CODE_OVERLOADED and detail.HasField("retry_after")
    assert "google.rpc.RetryInfo" in {d["type"] for d in reply.json()["details"]}


@pytest.mark.parametrize("stack", [{"server": {"max_message_bytes": 4096}}], indirect=True)
async def test_bad_requests_are_typed_errors_never_a_500(stack: Stack) -> None:
    url = f"{DISPATCHER}/StartTask"
    async with httpx.AsyncClient(base_url=base_url(stack), headers=bearer(stack)) as http:
        malformed = await http.post(url, content=b'{"agentId": ', headers={"content-type": "application/json"})
        wrong_field_type = await http.post(url, json={"agentId": 5, "goal": ["x"]})
        missing = await http.post(url, json={"goal": "x"})
        form = await http.post(url, content=b"agentId=x", headers={"content-type": "application/x-www-form-urlencoded"})
        grpc_proper = await http.post(url, content=b"\0\0\0\0\0", headers={"content-type": "application/grpc"})
        oversized = await http.post(url, json={"agentId": AGENT, "goal": "x" * 10_000})
        unknown = await http.post(f"{DISPATCHER}/NoSuchMethod", json={})
        # A Connect GET is for NO_SIDE_EFFECTS RPCs only.
        get_start = await http.get(url, params={"encoding": "json", "message": json.dumps({"agentId": AGENT})})
    for reply in (malformed, wrong_field_type, missing):
        assert reply.status_code == 400 and reply.json()["code"] == "invalid_argument", reply.text
        assert error_detail(reply.json()).code == common_pb2.ERROR_CODE_INVALID_REQUEST
    assert "agent_id" in missing.json()["message"]
    for reply in (form, grpc_proper):
        assert reply.status_code == 415 and reply.json()["code"] == "invalid_argument", reply.text
        assert error_detail(reply.json()).code == common_pb2.ERROR_CODE_INVALID_REQUEST
    assert "gRPC port" in grpc_proper.json()["message"]
    assert oversized.status_code == 429 and oversized.json()["code"] == "resource_exhausted"
    assert error_detail(oversized.json()).code == common_pb2.ERROR_CODE_PAYLOAD_TOO_LARGE
    assert unknown.status_code == 404
    assert get_start.status_code == 405, get_start.text


async def test_the_other_services_serve_their_read_only_rpcs_only(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=base_url(stack, "tool"), headers=bearer(stack)) as http:
        tools = await http.post("/agentmesh.v1.ToolService/ListTools", json={})
        execute = await http.post("/agentmesh.v1.ToolService/ExecuteTool", json={"toolName": "calculator"})
    assert tools.status_code == 200 and "calculator" in {t["name"] for t in tools.json()["tools"]}
    assert execute.json()["code"] == "unimplemented" and "over gRPC" in execute.json()["message"]


@pytest.mark.parametrize("stack", [{"server": {"cors_allowed_origins": ["http://console.test"]}}], indirect=True)
async def test_cors_admits_the_configured_origins_only(stack: Stack) -> None:
    preflight = {
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization,content-type",
    }
    async with httpx.AsyncClient(base_url=base_url(stack)) as http:
        allowed = await http.options(f"{DISPATCHER}/RunTask", headers={"origin": "http://console.test", **preflight})
        refused = await http.options(f"{DISPATCHER}/RunTask", headers={"origin": "http://evil.test", **preflight})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "http://console.test"
    assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers


async def test_every_http_call_leaves_the_http_concurrency_count_even_a_dropped_stream(stack: Stack) -> None:
    limiter = stack.hosts["dispatcher"][0].http_limiter
    headers = {**bearer(stack), "content-type": "application/connect+json"}
    body = envelope({"start": {"agentId": AGENT, "goal": "compute 8*8"}})
    async with httpx.AsyncClient(base_url=base_url(stack), timeout=60) as http:
        async with http.stream("POST", f"{DISPATCHER}/RunTask", content=body, headers=headers) as reply:
            async for _ in reply.aiter_raw():
                assert limiter.in_flight == 1
                break  # the client goes away mid-stream
        await http.post(f"{DISPATCHER}/GetTask", json={"taskId": "t-none"}, headers=bearer(stack))
        await http.post(f"{DISPATCHER}/GetTask", json={"taskId": "t"})  # refused: no token
    for _ in range(200):
        if limiter.in_flight == 0:
            break
        await asyncio.sleep(0.02)
    assert limiter.in_flight == 0


async def test_with_tls_the_http_listener_is_https_and_wants_a_client_certificate(
    start_service: Callable[..., Awaitable[RunningService]], tmp_path: Path
) -> None:
    ca = make_ca()
    server, client = write_leaf(ca, "tool-svc", tmp_path / "server"), write_leaf(ca, "cli", tmp_path / "client")
    svc = await start_service(TOOL_SPEC, {"tls": server}, http=True)
    url = f"https://localhost:{svc.host.http_port}/agentmesh.v1.ToolService/ListTools"
    headers = {"authorization": f"Bearer {svc.token(('operator',))}"}
    with_cert = ssl.create_default_context(cafile=client["ca_file"])
    with_cert.load_cert_chain(client["cert_file"], client["key_file"])
    async with httpx.AsyncClient(verify=with_cert) as http:
        ok = await http.post(url, json={}, headers=headers)
    assert ok.status_code == 200 and ok.json()["tools"]
    without = ssl.create_default_context(cafile=client["ca_file"])
    async with httpx.AsyncClient(verify=without) as http:
        with pytest.raises(httpx.TransportError):
            await http.post(url, json={}, headers=headers)
    async with httpx.AsyncClient() as http:
        with pytest.raises(httpx.TransportError):
            await http.post(url.replace("https:", "http:"), json={}, headers=headers)


async def test_the_generated_python_connect_client_reads_the_same_errors(stack: Stack) -> None:
    client = DispatcherServiceClient(base_url(stack))
    headers = {"authorization": f"Bearer {token(stack)}"}
    agents = await client.list_agents(dispatcher_pb2.ListAgentsRequest(), headers=headers)
    assert AGENT in {agent.agent_id for agent in agents.agents}
    with pytest.raises(ConnectError) as caught:
        await client.start_task(dispatcher_pb2.StartTaskRequest(agent_id="nope", goal="x"), headers=headers)
    details = {d.type_name: d for d in caught.value.details}
    detail = common_pb2.ErrorDetail.FromString(details["agentmesh.v1.ErrorDetail"].message_bytes)
    assert caught.value.code.value == "not_found" and detail.code == common_pb2.ERROR_CODE_NOT_FOUND


def served_serial(port: int, client: dict[str, Any]) -> int:
    """The serial of the certificate the HTTP listener presents to a new connection (no SNI: an IP)."""
    context = ssl.create_default_context(cafile=client["ca_file"])
    context.check_hostname = False
    context.load_cert_chain(client["cert_file"], client["key_file"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


async def test_the_https_listener_takes_replaced_certificate_files_without_a_restart(
    start_service: Callable[..., Awaitable[RunningService]], tmp_path: Path
) -> None:
    ca = make_ca()
    server, client = write_leaf(ca, "tool-svc", tmp_path / "server"), write_leaf(ca, "cli", tmp_path / "client")
    svc = await start_service(TOOL_SPEC, {"tls": server}, http=True)
    before = await asyncio.to_thread(served_serial, svc.host.http_port, client)
    renewed = swap_leaf(ca, "tool-svc", Path(server["cert_file"]), Path(server["key_file"]))
    after = await asyncio.to_thread(served_serial, svc.host.http_port, client)
    assert after == renewed != before


def test_the_served_rpcs_come_from_the_descriptors() -> None:
    """Every RPC of the contracts has its generated Connect method, matched by name (a new RPC needs no
    adapter change); the dispatcher serves all of them, the others their NO_SIDE_EFFECTS ones."""
    pool = descriptor_pool.Default()
    for stem, name in [("dispatcher", "DispatcherService"), ("tool", "ToolService"), ("context", "ContextService"),
                       ("provider", "ProviderService")]:  # fmt: skip
        service = pool.FindServiceByName(f"agentmesh.v1.{name}")
        protocol = getattr(importlib.import_module(f"agentmesh.v1.{stem}_connect"), name)
        generated = {attr for attr in vars(protocol) if not attr.startswith("_")}
        servicer = ConnectServicer(service, {}, RateLimitedLog(logging.getLogger("test")))
        for attr in generated:
            assert callable(getattr(servicer, attr)), attr
        assert len(generated) == len(service.methods)
    assert served_methods(pool.FindServiceByName("agentmesh.v1.ToolService")) == {
        "ListTools", "DiscoverTools", "GetApproval"
    }  # fmt: skip
    dispatcher = pool.FindServiceByName("agentmesh.v1.DispatcherService")
    assert served_methods(dispatcher) == {m.name for m in dispatcher.methods}


def test_the_listeners_socket_says_tcp_so_asyncio_sets_nodelay_on_its_connections() -> None:
    """A keep-alive call must not wait ~40 ms for the client's delayed ACK (Nagle on the last write)."""
    sock = http_listener._bind("127.0.0.1:0")
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()


async def test_hostile_bodies_get_typed_errors_never_unknown_or_internal(stack: Stack) -> None:
    bomb = gzip.compress(b"{" * 5_000_000)  # 5 MB of JSON nesting in a few KB
    cases: list[tuple[str, bytes, dict[str, str]]] = [
        ("StartTask", b"\xff\xfe\x00garbage", {"content-type": "application/proto"}),
        ("StartTask", b"[1, 2, 3]", {"content-type": "application/json"}),
        ("StartTask", b'{"agentId": "' + b"\xc3\x28" + b'"}', {"content-type": "application/json"}),
        ("StartTask", b"{" * 10_000, {"content-type": "application/json"}),
        ("StartTask", bomb, {"content-type": "application/json", "content-encoding": "gzip"}),
        ("StartTask", b"{}", {"content-type": "application/json", "content-encoding": "br-unknown"}),
        ("StartTask", b"", {"content-type": "application/json"}),
        ("RunTask", b"\x00\x00\x00\x10\x00{}", {"content-type": "application/connect+json"}),  # length lies
        ("RunTask", b"\x00\x7f\xff\xff\xff{}", {"content-type": "application/connect+json"}),  # 2 GiB claimed
        ("RunTask", b"", {"content-type": "application/connect+json"}),
        ("RunTask", b"\x00\x00\x00\x00\x05hello", {"content-type": "application/grpc-web+proto"}),
    ]
    async with httpx.AsyncClient(base_url=base_url(stack), headers=bearer(stack), timeout=30) as http:
        for method, body, headers in cases:
            reply = await http.post(f"{DISPATCHER}/{method}", content=body, headers=headers)
            answer = f"{method} {body[:20]!r} {headers}: {reply.status_code} {reply.text[:300]}"
            # (An unknown content-encoding is `unimplemented`, HTTP 501, as the Connect protocol says.)
            assert reply.status_code < 500 or reply.json()["code"] == "unimplemented", answer
            text = reply.text + json.dumps(dict(reply.headers))
            assert '"unknown"' not in text and '"internal"' not in text, answer
            if headers["content-type"].startswith("application/grpc-web"):
                status = web_trailers(frames(reply.content)[-1][1]) if reply.content else dict(reply.headers)
                assert status["grpc-status"] not in ("2", "13"), answer


async def test_an_unexpected_failure_is_internal_with_the_request_id_never_the_exception_text(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    host = stack.hosts["dispatcher"][0]
    servicer = host.methods.handlers[f"{DISPATCHER}/ListAgents"].unary_unary.__self__

    def broken(**_: Any) -> None:
        raise LookupError("secret internals")

    monkeypatch.setattr(servicer.dispatcher, "list_agents", broken)
    async with httpx.AsyncClient(base_url=base_url(stack), headers=bearer(stack)) as http:
        reply = await http.post(f"{DISPATCHER}/ListAgents", json={}, headers={"x-request-id": "req-boom"})
    assert reply.status_code == 500 and reply.json()["code"] == "internal"
    assert "req-boom" in reply.json()["message"] and "secret" not in reply.text
    assert error_detail(reply.json()).code == common_pb2.ERROR_CODE_INTERNAL
    # Logged once with its traceback (masked: agentmesh.redacted), for the operator.
    logged = [r for r in caplog.records if "Traceback" in r.getMessage() and "req-boom" in r.getMessage()]
    assert len(logged) == 1 and "LookupError: secret internals" in logged[0].getMessage()
