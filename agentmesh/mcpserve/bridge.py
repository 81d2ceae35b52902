"""MCP `tools/list` and `tools/call` as tool_svc's ListTools and ExecuteTool, made with the caller's own
token; a call's idempotency key is derived from the token and the request's key basis (docs/design.md §16)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
import grpc.aio
import mcp_types as types
from mcp import MCPError

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.mcpserve.results import error_result, mcp_tool, output_result, pending_result
from agentmesh.rpc.status import from_detail, from_rpc_error
from agentmesh.v1 import common_pb2, tool_pb2

# How long a repeat waits, in total, for a call another request is still running.
_IN_PROGRESS_WAIT_S = 30.0

T = tool_pb2


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


class ToolBridge:
    """MCP `tools/list` and `tools/call` over tool_svc's gRPC API, as the calling token."""

    def __init__(self, stub: Any, *, timeout_s: float, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.stub = stub
        self.timeout_s = timeout_s
        self.sleep = sleep

    @staticmethod
    def _metadata(token: str) -> tuple[tuple[str, str], ...]:
        return ((IDENTITY_HEADER, token),)

    async def list_tools(self, token: str) -> types.ListToolsResult:
        try:
            reply = await self.stub.ListTools(
                T.ListToolsRequest(permitted_only=True), metadata=self._metadata(token), timeout=self.timeout_s
            )
        except grpc.RpcError as exc:
            err = from_rpc_error(exc)
            raise MCPError(types.INVALID_REQUEST if _callers_fault(err) else types.INTERNAL_ERROR, str(err)) from None
        return types.ListToolsResult(tools=[mcp_tool(t) for t in reply.tools if not t.unavailable_reason])

    async def _key_of_approval(self, token: str, approval_id: str, name: str) -> str:
        """The idempotency key of the call an approval was opened for (its plan's call id)."""
        reply = await self.stub.GetApproval(
            T.GetApprovalRequest(approval_id=approval_id), metadata=self._metadata(token), timeout=self.timeout_s
        )
        plan = reply.approval.request.plan
        if plan.name != name or not plan.id.startswith("mcp-"):
            raise AgentmeshError(
                ErrorCode.INVALID_REQUEST,
                f"approval {approval_id} was not opened for a call of {name} through MCP; repeat the call "
                "that asked for it",
            )
        return str(plan.id)

    async def call_tool(
        self, token: str, name: str, arguments: Mapping[str, Any], *, key_basis: str, approval_id: str = ""
    ) -> types.CallToolResult:
        try:
            if approval_id:
                key = await self._key_of_approval(token, approval_id, name)
            else:
                key = "mcp-" + _digest(token, key_basis)[:40]
            return await self._execute(token, name, arguments, key)
        except AgentmeshError as err:
            return error_result(err)
        except grpc.RpcError as exc:
            return error_result(from_rpc_error(exc))

    async def _execute(self, token: str, name: str, arguments: Mapping[str, Any], key: str) -> types.CallToolResult:
        request = T.ExecuteToolRequest(
            call=common_pb2.ToolCall(id=key, name=name, arguments_json=json.dumps(dict(arguments))),
            # One payload scope per identity: a later call (read_payload) reads what an earlier one stored.
            session_id="mcp-" + _digest(token)[:32],
            idempotency_key=key,
        )
        waited = 0.0
        while True:
            try:
                reply = await self.stub.ExecuteTool(request, metadata=self._metadata(token), timeout=self.timeout_s)
                break
            except grpc.RpcError as exc:
                err = from_rpc_error(exc)
                if err.metadata.get("reason") != "in_progress" or waited >= _IN_PROGRESS_WAIT_S:
                    raise
                # The same call is running (an approved run, a re-sent request): its outcome is coming.
                pause = min(err.retry_after or 0.5, 2.0)
                await self.sleep(pause)
                waited += pause
        result = reply.result
        kind = result.WhichOneof("outcome")
        if kind == "output":
            return output_result(result)
        if kind == "pending_approval":
            return pending_result(result.pending_approval)
        return error_result(from_detail(result.error))


def _callers_fault(err: AgentmeshError) -> bool:
    return err.code in (ErrorCode.UNAUTHENTICATED, ErrorCode.PERMISSION_DENIED, ErrorCode.INVALID_REQUEST)
