"""Fixtures for context_svc contract tests: the real service in-process, its stub, call metadata."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import common_pb2, context_pb2, context_pb2_grpc
from context_svc.server import SPEC
from tests.conftest import RunningService
from tests.unit.context.ops_session import Step

AGENT = "ops-agent"
TASK = "t-ctx"
"""The task whose token (as the dispatcher mints it) creates and uses the sessions of these tests."""


@dataclass
class Ctx:
    """A running context_svc with a stub and the metadata of a task's token and an operator."""

    svc: RunningService
    stub: context_pb2_grpc.ContextServiceStub
    agent_md: tuple[tuple[str, str], ...]
    operator_md: tuple[tuple[str, str], ...]

    async def create(self, session_id: str = "s1", goal: str = "fix the checkout incident", **kwargs: Any) -> Any:
        request = context_pb2.CreateSessionRequest(session_id=session_id, goal=goal, **kwargs)
        return (await self.stub.CreateSession(request, metadata=self.agent_md)).session

    async def say(self, session_id: str, role: Any, content: str, **kwargs: Any) -> Any:
        message = common_pb2.Message(role=role, content=content, **kwargs)
        request = context_pb2.AppendMessageRequest(session_id=session_id, message=message)
        return await self.stub.AppendMessage(request, metadata=self.agent_md)

    async def tool(self, session_id: str, call_id: str, name: str, output: str, *, structured: bool = False) -> Any:
        result = common_pb2.ToolResult(
            tool_call_id=call_id,
            tool_name=name,
            output=common_pb2.ToolOutput(
                inline=output,
                result_type=common_pb2.RESULT_TYPE_STRUCTURED if structured else common_pb2.RESULT_TYPE_TEXT,
            ),
        )
        request = context_pb2.AppendToolResultRequest(session_id=session_id, result=result)
        return await self.stub.AppendToolResult(request, metadata=self.agent_md)

    async def call(self, session_id: str, call_id: str, name: str, arguments: dict[str, Any]) -> Any:
        call = common_pb2.ToolCall(id=call_id, name=name, arguments_json=json.dumps(arguments, ensure_ascii=False))
        return await self.say(session_id, common_pb2.ROLE_ASSISTANT, "", tool_calls=[call])

    async def play(self, session_id: str, steps: list[Step]) -> None:
        """Appends generated steps as a dispatcher would (call, then its result)."""
        for step in steps:
            if step.kind == "user":
                await self.say(session_id, common_pb2.ROLE_USER, step.text)
            elif step.kind == "assistant":
                await self.say(session_id, common_pb2.ROLE_ASSISTANT, step.text)
            else:
                await self.call(session_id, step.call_id, step.tool, step.arguments)
                await self.tool(session_id, step.call_id, step.tool, step.output, structured=step.structured)

    async def build(self, session_id: str = "s1", budget: int | None = None, debug: bool = False) -> Any:
        request = context_pb2.BuildContextRequest(session_id=session_id, budget_tokens=budget, debug=debug)
        return (await self.stub.BuildContext(request, metadata=self.agent_md)).view


async def expect_error(awaitable: Awaitable[Any], status: grpc.StatusCode) -> Any:
    """Awaits a call that must fail with `status`; returns the decoded AgentmeshError."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await awaitable
    assert info.value.code() == status, info.value.details()
    return from_rpc_error(info.value)


@pytest.fixture
def start_context(start_service: Callable[..., Awaitable[RunningService]]) -> Callable[..., Awaitable[Ctx]]:
    async def start(overrides: dict[str, Any] | None = None) -> Ctx:
        svc = await start_service(SPEC, overrides)
        stub = context_pb2_grpc.ContextServiceStub(svc.channel)  # type: ignore[no-untyped-call]
        return Ctx(
            svc=svc,
            stub=stub,
            agent_md=svc.metadata(("agent",), agent_id=AGENT, subject=AGENT, task_id=TASK, creator="alice"),
            operator_md=svc.metadata(("operator",), subject="oncall"),
        )

    return start


@pytest.fixture
async def ctx(start_context: Callable[..., Awaitable[Ctx]]) -> Ctx:
    return await start_context()
