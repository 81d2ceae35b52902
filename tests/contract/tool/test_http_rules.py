"""Issue 21: what HTTP tools send (header allowlist, method) and which registrations need a second admin."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

import grpc
import pytest

from agentmesh.errors import ErrorCode
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import common_pb2, tool_pb2
from tests.contract.tool.conftest import Client, error_name, output_json
from tests.contract.tool.fakes import FakeUpstream, LocalHttpServer
from tool_svc.model import arguments_sha256


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


class RecordingUpstream(LocalHttpServer):
    """A local HTTP server that answers 200 to every method and records what it received."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _record(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urllib.parse.urlsplit(self.path)
                recorder.seen.append(
                    Seen(
                        self.command,
                        parts.path,
                        urllib.parse.parse_qs(parts.query),
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                    )
                )
                out = json.dumps({"ok": True}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(out)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _record

        super().__init__(Handler)


@pytest.fixture
def recorder() -> Iterator[RecordingUpstream]:
    server = RecordingUpstream()
    with server.running():
        yield server


def _tool(name: str, recorder: RecordingUpstream, path: str, **fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "description": f"Use when testing {name}",
        "input_schema": {"type": "object", "additionalProperties": True},
        "executor": "http",
        "endpoint_url": recorder.url(path),
        "permission": {"group": "test", "access": "read"},
        "timeout_s": 2.0,
    }
    entry.update(fields)
    return entry


def _overrides(upstream: FakeUpstream, recorder: RecordingUpstream) -> dict[str, Any]:
    return {
        "tools": {
            "http_allowlist": [upstream.url("/"), recorder.url("/")],
            "registry": [
                {
                    "name": "http_request_auth",
                    "executor": "builtin",
                    "builtin": "http_request",
                    "description": "Use when reading the authenticated test API",
                    "headers_allowed": ["Authorization"],
                },
                _tool("get_item", recorder, "/items", method="GET"),
                _tool("post_item", recorder, "/items"),
                _tool("put_item", recorder, "/items", method="PUT", permission={"group": "test", "access": "write"},
                      requires_approval=False),
                _tool("patch_item", recorder, "/items", method="PATCH", permission={"group": "test", "access": "write"},
                      requires_approval=False),
                _tool("delete_item", recorder, "/items", method="DELETE",
                      permission={"group": "test", "access": "write"}, requires_approval=False),
                # An approval-gated write tool: its endpoint and everything under it is guarded.
                _tool("drop_table", recorder, "/admin/db", method="DELETE",
                      permission={"group": "test", "access": "write"}, impact="Drops a table"),
            ],
        }
    }  # fmt: skip


FORBIDDEN = {
    "Authorization": "Bearer secret-token",
    "Cookie": "session=abc",
    "Proxy-Authorization": "Basic eDp5",
    "X-HTTP-Method-Override": "DELETE",
    "X-Method-Override": "DELETE",
    "X-Forwarded-Host": "evil.example.com",
    "X-Forwarded-For": "10.0.0.1",
    "Forwarded": "for=10.0.0.1",
    "Host": "evil.example.com",
    "X-Custom": "1",
}


async def test_http_request_drops_forbidden_headers(
    tool_service: Any, upstream: FakeUpstream, recorder: RecordingUpstream
) -> None:
    c = Client(await tool_service(_overrides(upstream, recorder)))
    headers = {"Accept": "application/json", "Range": "bytes=0-99", **FORBIDDEN}
    value = output_json(await c.execute("http_request", {"url": recorder.url("/admin/db"), "headers": headers}))
    assert value["status"] == 200 and sorted(value["headers_dropped"]) == sorted(FORBIDDEN)
    seen = recorder.seen[-1].headers
    assert seen["accept"] == "application/json" and seen["range"] == "bytes=0-99"
    for name in FORBIDDEN:
        if name == "Host":
            assert seen["host"] == f"127.0.0.1:{recorder.port}"
        else:
            assert name.lower() not in seen, name
    # A tool whose configuration names a header sends that one, and still no other.
    value = output_json(await c.execute("http_request_auth", {"url": recorder.url("/items"), "headers": headers}))
    assert "Authorization" not in value["headers_dropped"] and "Cookie" in value["headers_dropped"]
    seen = recorder.seen[-1].headers
    assert seen["authorization"] == "Bearer secret-token" and "cookie" not in seen
    assert "x-http-method-override" not in seen and recorder.seen[-1].method == "GET"
    # Nothing dropped: the result says nothing about headers.
    plain = output_json(await c.execute("http_request", {"url": recorder.url("/items"), "headers": {"Accept": "*/*"}}))
    assert "headers_dropped" not in plain


async def test_the_method_is_honoured(tool_service: Any, upstream: FakeUpstream, recorder: RecordingUpstream) -> None:
    c = Client(await tool_service(_overrides(upstream, recorder)))
    arguments = {"sku": "A-1", "n": 2}
    for tool, method in (
        ("get_item", "GET"),
        ("post_item", "POST"),
        ("put_item", "PUT"),
        ("patch_item", "PATCH"),
        ("delete_item", "DELETE"),
    ):
        assert output_json(await c.execute(tool, arguments)) == {"ok": True}, tool
        seen = recorder.seen[-1]
        assert seen.method == method and seen.path == "/items", tool
        if method in ("GET", "DELETE"):
            assert seen.query == {"sku": ["A-1"], "n": ["2"]} and seen.body == b"", tool
        else:
            assert json.loads(seen.body) == arguments and seen.query == {}, tool
    listed = await c.stub.ListTools(tool_pb2.ListToolsRequest(group="test"), metadata=c.meta(), timeout=5)
    methods = {t.name: t.http_method for t in listed.tools}
    assert methods["get_item"] == "GET" and methods["post_item"] == "POST" and methods["put_item"] == "PUT"


def _spec(recorder: RecordingUpstream, name: str, path: str, method: str, access: Any) -> common_pb2.ToolSpec:
    return common_pb2.ToolSpec(
        name=name,
        description=f"Use when testing {name}",
        input_schema_json=json.dumps({"type": "object"}),
        permission=common_pb2.ToolPermission(group="test", access=access),
        executor="http",
        endpoint_url=recorder.url(path),
        http_method=method,
    )


async def _register(c: Client, spec: common_pb2.ToolSpec, admin: str) -> tool_pb2.RegisterToolResponse:
    reply: tool_pb2.RegisterToolResponse = await c.stub.RegisterTool(
        tool_pb2.RegisterToolRequest(tool=spec), metadata=c.meta(roles=("admin",), agent_id=admin), timeout=5
    )
    return reply


async def _resolve(c: Client, pending: common_pb2.PendingApproval, who: str, role: str = "admin") -> Any:
    return await c.stub.ResolveApproval(
        tool_pb2.ResolveApprovalRequest(
            approval_id=pending.approval_id, approve=True, reason="reviewed", arguments_sha256=pending.arguments_sha256
        ),
        metadata=c.meta(roles=(role,), agent_id=who),
        timeout=10,
    )


async def _names(c: Client) -> set[str]:
    listed = await c.stub.ListTools(tool_pb2.ListToolsRequest(), metadata=c.meta(), timeout=5)
    return {t.name for t in listed.tools}


async def _wait_for_second_admin(c: Client, reply: tool_pb2.RegisterToolResponse, name: str) -> None:
    """The registration is pending: not listed, not executable, not resolvable by its admin or an operator;
    another admin approves it."""
    assert reply.HasField("pending_approval"), reply
    pending = reply.pending_approval
    assert pending.plan.name == name and pending.requested_by == "admin-1"
    assert pending.arguments_sha256 == arguments_sha256(json.loads(pending.plan.arguments_json))
    assert name not in await _names(c)
    assert error_name(await c.execute(name, {"q": "x"})) == "UNKNOWN_TOOL"
    for who, role in (("admin-1", "admin"), ("operator-1", "operator")):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _resolve(c, pending, who, role)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, who
        assert from_rpc_error(refused.value).code == ErrorCode.PERMISSION_DENIED
    assert name not in await _names(c)
    approved = await _resolve(c, pending, "admin-2")
    assert approved.approval.state == common_pb2.APPROVAL_STATE_APPROVED and approved.approval.resolved_by == "admin-2"
    assert output_json(approved.result) == {"registered": name, "replaced": False}
    assert name in await _names(c)


async def test_a_non_get_endpoint_cannot_be_registered_as_read_without_a_second_admin(
    tool_service: Any, upstream: FakeUpstream, recorder: RecordingUpstream
) -> None:
    c = Client(await tool_service(_overrides(upstream, recorder)))
    read = common_pb2.ACCESS_MODE_READ
    for method in ("POST", "PUT", "DELETE"):
        name = f"lookup_{method.lower()}"
        reply = await _register(c, _spec(recorder, name, "/lookup", method, read), "admin-1")
        assert method in reply.pending_approval.impact and "access read" in reply.pending_approval.impact
        before = len(recorder.seen)
        await _wait_for_second_admin(c, reply, name)
        assert len(recorder.seen) == before  # nothing was called while it waited
        assert output_json(await c.execute(name, {"q": "x"})) == {"ok": True}
        assert recorder.seen[-1].method == method and recorder.seen[-1].path == "/lookup"
    # An empty method is POST, declared read: pending too. A GET read tool is stored at once.
    assert (await _register(c, _spec(recorder, "lookup_default", "/lookup", "", read), "admin-1")).HasField(
        "pending_approval"
    )
    direct = await _register(c, _spec(recorder, "lookup_get", "/lookup", "GET", read), "admin-1")
    assert not direct.HasField("pending_approval") and "lookup_get" in await _names(c)
    bad = _spec(recorder, "lookup_trace", "/lookup", "TRACE", read)
    with pytest.raises(grpc.aio.AioRpcError) as invalid:
        await _register(c, bad, "admin-1")
    assert from_rpc_error(invalid.value).violations[0].path == "tool.http_method"


async def test_an_endpoint_under_an_approval_gated_tool_needs_a_second_admin(
    tool_service: Any, upstream: FakeUpstream, recorder: RecordingUpstream
) -> None:
    c = Client(await tool_service(_overrides(upstream, recorder)))
    read = common_pb2.ACCESS_MODE_READ
    for name, path in (("peek_db", "/admin/db"), ("peek_tables", "/admin/db/tables"), ("peek_case", "/Admin//DB/x")):
        reply = await _register(c, _spec(recorder, name, path, "GET", read), "admin-1")
        assert "drop_table" in reply.pending_approval.impact, name
        await _wait_for_second_admin(c, reply, name)
    assert output_json(await c.execute("peek_tables", {"q": "x"})) == {"ok": True}
    assert recorder.seen[-1].method == "GET" and recorder.seen[-1].path == "/admin/db/tables"
    # A sibling path is not under the gated endpoint.
    sibling = await _register(c, _spec(recorder, "peek_dbx", "/admin/dbx", "GET", read), "admin-1")
    assert not sibling.HasField("pending_approval")
    # A denied registration stays unregistered.
    reply = await _register(c, _spec(recorder, "peek_more", "/admin/db/more", "GET", read), "admin-1")
    denied = await c.stub.ResolveApproval(
        tool_pb2.ResolveApprovalRequest(
            approval_id=reply.pending_approval.approval_id,
            approve=False,
            reason="no",
            arguments_sha256=reply.pending_approval.arguments_sha256,
        ),
        metadata=c.meta(roles=("admin",), agent_id="admin-2"),
        timeout=10,
    )
    assert denied.approval.state == common_pb2.APPROVAL_STATE_DENIED and error_name(denied.result) == "APPROVAL_DENIED"
    assert "peek_more" not in await _names(c)
