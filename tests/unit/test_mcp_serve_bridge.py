"""`agentmesh mcp serve`'s bridge without processes (docs/design.md §16): a fake ToolService stub
answers, the bridge maps each outcome and each failure to what an MCP client reads."""

from __future__ import annotations

import json
from typing import Any

import grpc
import grpc.aio
import mcp_types as types
import pytest
from mcp import MCPError

from agentmesh.errors import AgentmeshError, ErrorCode, PermissionDeniedError
from agentmesh.mcpserve.bridge import ToolBridge
from agentmesh.mcpserve.results import mcp_tool
from agentmesh.mcpserve.transports import bearer_token
from agentmesh.rpc.status import GRPC_STATUS, to_detail, to_rpc_status
from agentmesh.v1 import common_pb2, tool_pb2

C = common_pb2


def rpc_error(err: AgentmeshError) -> grpc.aio.AioRpcError:
    """The error as tool_svc's edge sends it (a rich status in the trailer)."""
    trailer = grpc.aio.Metadata(("grpc-status-details-bin", to_rpc_status(err).SerializeToString()))
    return grpc.aio.AioRpcError(GRPC_STATUS[err.code], grpc.aio.Metadata(), trailer, err.message, None)


class FakeStub:
    """Answers ExecuteTool (and GetApproval, ListTools: named as the RPCs) from a list of replies (or errors),
    records what it was sent."""

    def __init__(self, *replies: Any, approval: common_pb2.Approval | None = None) -> None:
        self.replies = list(replies)
        self.approval = approval
        self.sent: list[Any] = []

    async def ExecuteTool(self, request: Any, **kw: Any) -> Any:
        self.sent.append((request, kw["metadata"]))
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return tool_pb2.ExecuteToolResponse(result=reply)

    async def GetApproval(self, request: Any, **kw: Any) -> Any:
        if self.approval is None:
            raise rpc_error(AgentmeshError(ErrorCode.NOT_FOUND, f"no approval {request.approval_id}"))
        return tool_pb2.GetApprovalResponse(approval=self.approval)

    async def ListTools(self, request: Any, **kw: Any) -> Any:
        if isinstance(self.replies[0], BaseException):
            raise self.replies.pop(0)
        assert request.permitted_only
        return tool_pb2.ListToolsResponse(tools=self.replies.pop(0))


async def _no_sleep(_: float) -> None:
    return None


def bridge(stub: FakeStub) -> ToolBridge:
    return ToolBridge(stub, timeout_s=5, sleep=_no_sleep)


def _text(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def test_outputs_become_text_and_structured_content() -> None:
    structured = C.ToolResult(output=C.ToolOutput(inline='{"a":1}', result_type=C.RESULT_TYPE_STRUCTURED))
    text = C.ToolResult(output=C.ToolOutput(inline="hello", result_type=C.RESULT_TYPE_TEXT))
    ref = C.ToolResult(
        output=C.ToolOutput(
            ref=C.PayloadRef(ref_id="pl_" + "a" * 64, size_bytes=9000, media_type="text/plain"), digest="9000 bytes"
        )
    )
    stub = FakeStub(structured, text, ref)
    first = await bridge(stub).call_tool("tok", "t", {"x": 1}, key_basis="s\n1")
    assert first.structured_content == {"a": 1} and not first.is_error
    assert _text(await bridge(stub).call_tool("tok", "t", {}, key_basis="s\n2")) == "hello"
    offloaded = await bridge(stub).call_tool("tok", "t", {}, key_basis="s\n3")
    assert "read_payload" in _text(offloaded) and offloaded.meta is not None
    assert offloaded.meta["agentmesh/payload"]["ref_id"] == "pl_" + "a" * 64
    # The token goes as x-agentmesh-identity; the key is derived from the token, session and request id.
    request, metadata = stub.sent[0]
    assert metadata == (("x-agentmesh-identity", "tok"),)
    assert request.idempotency_key == request.call.id and request.idempotency_key.startswith("mcp-")
    assert json.loads(request.call.arguments_json) == {"x": 1}
    keys = {r.idempotency_key for r, _ in stub.sent}
    assert len(keys) == 3  # three requests, three keys


async def test_the_same_request_gets_the_same_key_and_another_token_another() -> None:
    ok = C.ToolResult(output=C.ToolOutput(inline="x"))
    stub = FakeStub(ok, ok, ok)
    for token in ("tok", "tok", "other"):
        await bridge(stub).call_tool(token, "t", {}, key_basis="stdio\nsession\n7")
    keys = [r.idempotency_key for r, _ in stub.sent]
    assert keys[0] == keys[1] != keys[2]


async def test_errors_and_approvals_are_tool_errors_with_clear_text() -> None:
    denied = PermissionDeniedError(missing_permission="dev:builtin.code:read", message="agent may not use run_python")
    pending = C.PendingApproval(
        approval_id="apr_1", plan=C.ToolCall(id="mcp-k", name="drop"), arguments_sha256="abc", impact="drops a table"
    )
    stub = FakeStub(C.ToolResult(error=to_detail(denied)), C.ToolResult(pending_approval=pending))
    refused = await bridge(stub).call_tool("tok", "run_python", {}, key_basis="k1")
    assert refused.is_error and "PERMISSION_DENIED" in _text(refused)
    assert refused.meta == {
        "agentmesh/error_code": "PERMISSION_DENIED",
        "agentmesh/error_class": "ENGINEERING",
        "agentmesh/missing_permission": "dev:builtin.code:read",
    }
    waiting = await bridge(stub).call_tool("tok", "drop", {}, key_basis="k2")
    assert waiting.is_error and "apr_1" in _text(waiting) and "drops a table" in _text(waiting)
    assert waiting.meta is not None and waiting.meta["agentmesh/approval_id"] == "apr_1"


async def test_a_repeat_with_the_approval_id_uses_the_approved_calls_key_and_waits_while_it_runs() -> None:
    plan = C.ToolCall(id="mcp-" + "1" * 40, name="drop", arguments_json="{}")
    approval = C.Approval(request=C.PendingApproval(approval_id="apr_1", plan=plan))
    in_progress = rpc_error(
        AgentmeshError(ErrorCode.UNAVAILABLE, "in progress", retry_after=0.2, metadata={"reason": "in_progress"})
    )
    stub = FakeStub(in_progress, C.ToolResult(output=C.ToolOutput(inline="dropped")), approval=approval)
    done = await bridge(stub).call_tool("tok", "drop", {}, key_basis="ignored", approval_id="apr_1")
    assert _text(done) == "dropped"
    assert [r.idempotency_key for r, _ in stub.sent] == [plan.id, plan.id]
    # The approval of another tool, or an unknown approval: refused, nothing sent.
    other = FakeStub(approval=approval)
    wrong = await bridge(other).call_tool("tok", "read", {}, key_basis="k", approval_id="apr_1")
    assert wrong.is_error and "not opened for a call of read" in _text(wrong) and not other.sent
    unknown = await bridge(FakeStub()).call_tool("tok", "drop", {}, key_basis="k", approval_id="apr_9")
    assert unknown.is_error and "NOT_FOUND" in _text(unknown)


async def test_a_grpc_failure_is_a_tool_error_or_a_protocol_error_for_the_listing() -> None:
    down = rpc_error(AgentmeshError(ErrorCode.UNAVAILABLE, "tool_svc is draining"))
    result = await bridge(FakeStub(down)).call_tool("tok", "t", {}, key_basis="k")
    assert result.is_error and "UNAVAILABLE" in _text(result)
    bad_token = rpc_error(AgentmeshError(ErrorCode.UNAUTHENTICATED, "token expired"))
    with pytest.raises(MCPError) as raised:
        await bridge(FakeStub(bad_token)).list_tools("tok")
    assert raised.value.code == types.INVALID_REQUEST and "token expired" in raised.value.message


async def test_the_listing_hides_unavailable_tools_and_states_the_gateways_policy() -> None:
    read = C.ToolSpec(
        name="get", input_schema_json='{"type": "object"}', permission=C.ToolPermission(access=C.ACCESS_MODE_READ)
    )
    write = C.ToolSpec(
        name="drop",
        input_schema_json='{"type": "object"}',
        requires_approval=True,
        permission=C.ToolPermission(access=C.ACCESS_MODE_WRITE),
    )
    down = C.ToolSpec(name="gone", input_schema_json="{}", unavailable_reason="MCP server x is down")
    listing = await bridge(FakeStub([read, write, down])).list_tools("tok")
    assert [t.name for t in listing.tools] == ["get", "drop"]
    hints = mcp_tool(write).annotations
    assert hints is not None and (hints.read_only_hint, hints.destructive_hint) == (False, True)


def test_bearer_tokens_are_read_from_the_authorization_header() -> None:
    assert bearer_token({"authorization": "Bearer abc.def"}) == "abc.def"
    assert bearer_token({"authorization": "bearer   tok "}) == "tok"
    assert bearer_token({"authorization": "Basic dXNlcg=="}) == ""
    assert bearer_token({}) == bearer_token(None) == ""
