"""Fake ToolService, ContextService and ProviderService gRPC servers for dispatcher contract tests.

They speak the real agentmesh.v1 protocol (written directly on the protobuf messages, not with
the dispatcher's own converters), verify the identity token the dispatcher sends, and keep what
they saw so tests can assert on it.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh import callctx
from agentmesh.authenticator import Authenticator
from agentmesh.config import AuthSettings
from agentmesh.errors import (
    AgentmeshError,
    ErrorCode,
    FailedPreconditionError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
    UnavailableError,
    model_text,
)
from agentmesh.identity_value import Identity
from agentmesh.rpc.status import abort, from_detail, to_detail
from agentmesh.tokens import TokenError
from agentmesh.v1 import (
    common_pb2,
    context_pb2,
    context_pb2_grpc,
    provider_pb2,
    provider_pb2_grpc,
    tool_pb2,
    tool_pb2_grpc,
)
from dispatcher_svc.server import SPEC
from tests.conftest import TEST_AUTH_KEY, RunningService

Ctx = grpc.aio.ServicerContext[Any, Any]


def authenticator() -> Authenticator:
    return Authenticator(AuthSettings(key=TEST_AUTH_KEY), "dev")


async def identity(context: Ctx) -> Identity:
    token = callctx.metadata_value(context.invocation_metadata(), callctx.IDENTITY_HEADER)
    try:
        return authenticator().verify(token or "")
    except TokenError as exc:
        await abort(context, UnauthenticatedError(exc.reason))
        raise


def tokens(text: str) -> int:
    return len(text) // 4 + 1


@dataclass
class FakeContextService(context_pb2_grpc.ContextServiceServicer):
    sessions: dict[str, context_pb2.Session] = field(default_factory=dict)
    logs: dict[str, list[common_pb2.Message]] = field(default_factory=dict)
    request_ids: list[str] = field(default_factory=list)
    newest: dict[str, tuple[str, int]] = field(default_factory=dict)
    attachers: list[Identity] = field(default_factory=list)
    handoffs: list[context_pb2.BuildHandoffRequest] = field(default_factory=list)
    results: dict[tuple[str, str], tuple[int, common_pb2.ToolResult]] = field(default_factory=dict)
    """(session, tool_call_id) -> (index, result as appended, stats cleared): context_svc's dedupe."""

    async def CreateSession(self, request: context_pb2.CreateSessionRequest, context: Ctx) -> Any:
        await identity(context)
        if request.session_id in self.sessions:
            await abort(context, FailedPreconditionError(f"session {request.session_id} exists"))
        session = context_pb2.Session(
            session_id=request.session_id,
            agent_id=request.agent_id,
            goal=request.goal,
            system_prompt=request.system_prompt,
        )
        self.sessions[request.session_id] = session
        self.logs[request.session_id] = []
        return context_pb2.CreateSessionResponse(session=session)

    async def _session(self, session_id: str, context: Ctx) -> context_pb2.Session:
        if session_id not in self.sessions:
            await abort(context, NotFoundError(f"no session {session_id}"))
        session = self.sessions[session_id]
        log = self.logs[session_id]
        session.message_count = len(log)
        session.total_tokens = sum(m.token_count for m in log)
        return session

    async def GetSession(self, request: context_pb2.GetSessionRequest, context: Ctx) -> Any:
        await identity(context)
        return context_pb2.GetSessionResponse(session=await self._session(request.session_id, context))

    async def AppendMessage(self, request: context_pb2.AppendMessageRequest, context: Ctx) -> Any:
        await identity(context)
        await self._session(request.session_id, context)
        message = common_pb2.Message()
        message.CopyFrom(request.message)
        message.token_count = tokens(message.content)
        self.logs[request.session_id].append(message)
        return context_pb2.AppendMessageResponse(
            index=len(self.logs[request.session_id]) - 1, token_count=message.token_count
        )

    async def AppendToolResult(self, request: context_pb2.AppendToolResultRequest, context: Ctx) -> Any:
        await identity(context)
        await self._session(request.session_id, context)
        result = common_pb2.ToolResult()
        result.CopyFrom(request.result)
        result.ClearField("stats")  # execution stats do not count: a replay is a repeat
        key = (request.session_id, result.tool_call_id)
        if key in self.results:
            # Once per tool_call_id, as context_svc: a repeat is answered, other content refused.
            index, stored = self.results[key]
            if stored != result:
                why = f"tool call {key[1]} was already appended at position {index} with other content"
                await abort(context, FailedPreconditionError(why))
            token_count = self.logs[request.session_id][index].token_count
            return context_pb2.AppendToolResultResponse(index=index, token_count=token_count, already_appended=True)
        self.results[key] = (len(self.logs[request.session_id]), result)
        which = result.WhichOneof("outcome")
        if which == "error":
            e = result.error
            detail = common_pb2.ErrorDetail(
                code=e.code,
                message=e.message,
                violations=e.violations,
                fallback_tool=e.fallback_tool,
                metadata=e.metadata,
            )
            text = model_text(from_detail(detail))
        elif which == "output":
            out = result.output
            text = out.inline if out.WhichOneof("content") == "inline" else f"ref {out.ref.ref_id}\n{out.digest}"
        else:
            text = f"pending {result.pending_approval.approval_id}"
        message = common_pb2.Message(
            role=common_pb2.ROLE_TOOL,
            content=text,
            tool_call_id=result.tool_call_id,
            name=result.tool_name,
            token_count=tokens(text),
        )
        self.logs[request.session_id].append(message)
        return context_pb2.AppendToolResultResponse(
            index=len(self.logs[request.session_id]) - 1, token_count=message.token_count
        )

    async def GetToolResult(self, request: context_pb2.GetToolResultRequest, context: Ctx) -> Any:
        await identity(context)
        await self._session(request.session_id, context)
        found = self.results.get((request.session_id, request.tool_call_id))
        if found is None:
            await abort(context, NotFoundError(f"no result appended for tool call {request.tool_call_id}"))
        index, result = found
        token_count = self.logs[request.session_id][index].token_count
        return context_pb2.GetToolResultResponse(result=result, index=index, token_count=token_count)

    async def AttachTask(self, request: context_pb2.AttachTaskRequest, context: Ctx) -> Any:
        """The compare-and-set on the session's newest task (the owner rule is context_svc's own test's)."""
        self.attachers.append(await identity(context))
        await self._session(request.session_id, context)
        newest, generation = self.newest.get(request.session_id, (request.session_id, 0))
        expected = request.expected_task_id and (request.expected_task_id, request.expected_generation) == (
            newest,
            generation,
        )
        if newest != request.task_id and not expected:
            return context_pb2.AttachTaskResponse(attached=False, newest_task_id=newest, generation=generation)
        self.newest[request.session_id] = (request.task_id, generation + 1)
        return context_pb2.AttachTaskResponse(attached=True, newest_task_id=request.task_id, generation=generation + 1)

    async def BuildContext(self, request: context_pb2.BuildContextRequest, context: Ctx) -> Any:
        await identity(context)
        self.request_ids.append(callctx.metadata_value(context.invocation_metadata(), callctx.REQUEST_ID_HEADER) or "")
        session = await self._session(request.session_id, context)
        system = common_pb2.Message(role=common_pb2.ROLE_SYSTEM, content=session.system_prompt)
        messages = [system, *self.logs[request.session_id]]
        total = sum(tokens(m.content) for m in messages)
        view = context_pb2.ContextView(
            messages=messages,
            total_tokens=total,
            budget_tokens=request.budget_tokens or 12000,
            blocks=[
                context_pb2.ContextBlock(kind=context_pb2.CONTEXT_BLOCK_KIND_SYSTEM, tokens=tokens(system.content))
            ],
        )
        return context_pb2.BuildContextResponse(view=view)

    async def BuildHandoff(self, request: context_pb2.BuildHandoffRequest, context: Ctx) -> Any:
        """A hop summary without the check (context_svc's own tests have it): every cited fact confirmed."""
        await identity(context)
        await self._session(request.session_id, context)
        self.handoffs.append(request)
        brief = request.brief
        lines = [f"Handoff: {brief.summary}"]
        confirmed = 0
        for fact in brief.facts:
            kind = "confirmed" if fact.WhichOneof("support") == "citation" else "inferred"
            confirmed += kind == "confirmed"
            lines.append(f"- [{kind}] {fact.statement}" + (f" ({fact.value})" if fact.value else ""))
        lines += [f"- open: {q}" for q in brief.open_questions]
        text = "\n".join(lines)
        return context_pb2.BuildHandoffResponse(
            text=text,
            token_count=tokens(text),
            confirmed_count=confirmed,
            inferred_count=len(brief.facts) - confirmed,
            record_ref_id="pl_" + "0" * 64,
        )


Handler = Callable[[dict[str, Any]], "str | AgentmeshError"]


@dataclass
class FakeToolService(tool_pb2_grpc.ToolServiceServicer):
    handlers: dict[str, Handler] = field(default_factory=dict)
    needs_approval: set[str] = field(default_factory=set)
    runs: Counter[str] = field(default_factory=Counter)
    callers: list[Identity] = field(default_factory=list)
    keys: dict[str, common_pb2.ToolResult] = field(default_factory=dict)
    approvals: dict[str, tuple[common_pb2.PendingApproval, int, str]] = field(default_factory=dict)
    resolvers: list[Identity] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def spec(self, name: str) -> common_pb2.ToolSpec:
        return common_pb2.ToolSpec(
            name=name,
            description=f"use when you need {name}",
            input_schema_json='{"type": "object"}',
            permission=common_pb2.ToolPermission(environment="dev", group="test", access=common_pb2.ACCESS_MODE_READ),
        )

    async def ListTools(self, request: tool_pb2.ListToolsRequest, context: Ctx) -> Any:
        await identity(context)
        return tool_pb2.ListToolsResponse(tools=[self.spec(n) for n in sorted(self.handlers)])

    async def DiscoverTools(self, request: tool_pb2.DiscoverToolsRequest, context: Ctx) -> Any:
        await identity(context)
        scored = [tool_pb2.ScoredTool(tool=self.spec(n), score=1.0) for n in sorted(self.handlers)]
        return tool_pb2.DiscoverToolsResponse(tools=scored[: request.k or 5])

    def _run(self, call: common_pb2.ToolCall) -> common_pb2.ToolResult:
        result = common_pb2.ToolResult(tool_call_id=call.id, tool_name=call.name)
        self.runs[call.name] += 1
        out = self.handlers[call.name](json.loads(call.arguments_json))
        if isinstance(out, AgentmeshError):
            d = to_detail(out)
            result.error.CopyFrom(
                common_pb2.ErrorDetail(
                    code=d.code,
                    error_class=d.error_class,
                    message=d.message,
                    violations=d.violations,
                    fallback_tool=d.fallback_tool,
                    metadata=d.metadata,
                )
            )
        else:
            result.output.inline = out
            result.output.result_type = common_pb2.RESULT_TYPE_TEXT
        result.stats.attempts = 1
        return result

    async def ExecuteTool(self, request: tool_pb2.ExecuteToolRequest, context: Ctx) -> Any:
        caller = await identity(context)
        self.callers.append(caller)
        call = request.call
        if call.name not in self.handlers:
            err = AgentmeshError(ErrorCode.UNKNOWN_TOOL, f"no tool {call.name}")
            d = to_detail(err)
            result = common_pb2.ToolResult(tool_call_id=call.id, tool_name=call.name)
            result.error.CopyFrom(common_pb2.ErrorDetail(code=d.code, error_class=d.error_class, message=d.message))
            return tool_pb2.ExecuteToolResponse(result=result)
        if request.idempotency_key in self.keys:
            replay = common_pb2.ToolResult()
            replay.CopyFrom(self.keys[request.idempotency_key])
            replay.stats.replayed = True
            return tool_pb2.ExecuteToolResponse(result=replay)
        if call.name in self.needs_approval:
            approval_id = f"ap-{next(self._ids)}"
            pending = common_pb2.PendingApproval(
                approval_id=approval_id,
                plan=call,
                impact=f"{call.name}: brief outage",
                arguments_sha256="sha-" + call.arguments_json,
                requested_by=caller.subject,
            )
            self.approvals[approval_id] = (pending, common_pb2.APPROVAL_STATE_PENDING, caller.subject)
            result = common_pb2.ToolResult(tool_call_id=call.id, tool_name=call.name, pending_approval=pending)
            return tool_pb2.ExecuteToolResponse(result=result)
        result = self._run(call)
        self.keys[request.idempotency_key] = result
        return tool_pb2.ExecuteToolResponse(result=result)

    async def ResolveApproval(self, request: tool_pb2.ResolveApprovalRequest, context: Ctx) -> Any:
        caller = await identity(context)
        if not caller.has_role("operator"):
            await abort(context, PermissionDeniedError("role:operator"))
        self.resolvers.append(caller)
        if request.approval_id not in self.approvals:
            await abort(context, NotFoundError(f"no approval {request.approval_id}"))
        pending, state, requester = self.approvals[request.approval_id]
        if state != common_pb2.APPROVAL_STATE_PENDING:
            await abort(context, FailedPreconditionError("already resolved"))
        if caller.subject == requester:
            await abort(context, PermissionDeniedError("approver", "the requester cannot approve"))
        new_state = common_pb2.APPROVAL_STATE_APPROVED if request.approve else common_pb2.APPROVAL_STATE_DENIED
        self.approvals[request.approval_id] = (pending, new_state, requester)
        approval = common_pb2.Approval(
            request=pending, state=new_state, resolved_by=caller.subject, reason=request.reason
        )
        if request.approve:
            result = self._run(pending.plan)
        else:
            d = to_detail(AgentmeshError(ErrorCode.APPROVAL_DENIED, "denied"))
            result = common_pb2.ToolResult(tool_call_id=pending.plan.id, tool_name=pending.plan.name)
            result.error.CopyFrom(common_pb2.ErrorDetail(code=d.code, error_class=d.error_class, message=d.message))
        return tool_pb2.ResolveApprovalResponse(approval=approval, result=result)

    async def GetApproval(self, request: tool_pb2.GetApprovalRequest, context: Ctx) -> Any:
        await identity(context)
        pending, state, _ = self.approvals[request.approval_id]
        return tool_pb2.GetApprovalResponse(approval=common_pb2.Approval(request=pending, state=state))  # type: ignore[arg-type]


Policy = Callable[[list[common_pb2.Message], list[str]], common_pb2.Message]


@dataclass
class FakeProviderService(provider_pb2_grpc.ProviderServiceServicer):
    policy: Policy
    calls: int = 0
    agents: list[str] = field(default_factory=list)
    models: list[provider_pb2.ModelInfo] = field(
        default_factory=lambda: [provider_pb2.ModelInfo(name="fake/m", provider="fake", provider_type="scripted")]
    )
    """What ListModels answers (capability routing reads it)."""
    down_for: set[str] = field(default_factory=set)
    """Agents whose Generate calls answer UNAVAILABLE (their tasks FAIL once the retries are spent)."""

    async def ListModels(self, request: provider_pb2.ListModelsRequest, context: Ctx) -> Any:
        return provider_pb2.ListModelsResponse(models=self.models)

    async def Generate(self, request: provider_pb2.GenerateRequest, context: Ctx) -> Any:
        caller = await identity(context)
        self.agents.append(f"{request.agent_id}/{caller.agent_id}/{request.model}")
        if request.agent_id in self.down_for:
            await abort(context, UnavailableError("fake provider: down for this agent"))
        self.calls += 1
        message = self.policy(list(request.messages), [t.name for t in request.tools])
        message.role = common_pb2.ROLE_ASSISTANT
        usage = common_pb2.TokenUsage(input_tokens=100, output_tokens=10, total_tokens=110)
        return provider_pb2.GenerateResponse(message=message, usage=usage, model="fake/m")


def tool_call(name: str, args: dict[str, Any], call_id: str) -> common_pb2.Message:
    return common_pb2.Message(tool_calls=[common_pb2.ToolCall(id=call_id, name=name, arguments_json=json.dumps(args))])


def answer(text: str) -> common_pb2.Message:
    return common_pb2.Message(content=text)


@dataclass
class Mesh:
    dispatcher: RunningService
    tools: FakeToolService
    context: FakeContextService
    provider: FakeProviderService
    servers: dict[str, grpc.aio.Server]

    def md(self, roles: tuple[str, ...] = ("operator",), subject: str = "alice") -> tuple[tuple[str, str], ...]:
        return self.dispatcher.metadata(roles, subject=subject)


MakeMesh = Callable[..., Awaitable[Mesh]]


@pytest.fixture
async def make_mesh(start_service: Callable[..., Awaitable[RunningService]]) -> AsyncIterator[MakeMesh]:
    servers: list[grpc.aio.Server] = []

    async def make(
        policy: Policy,
        handlers: dict[str, Handler] | None = None,
        *,
        needs_approval: set[str] | None = None,
        dispatcher: dict[str, Any] | None = None,
        agents: list[dict[str, Any]] | None = None,
        config: dict[str, Any] | None = None,
    ) -> Mesh:
        tools = FakeToolService(handlers=handlers or {}, needs_approval=needs_approval or set())
        context = FakeContextService()
        provider = FakeProviderService(policy)
        ports: dict[str, int] = {}
        started: dict[str, grpc.aio.Server] = {}
        for name, servicer, add in (
            ("tool", tools, tool_pb2_grpc.add_ToolServiceServicer_to_server),
            ("context", context, context_pb2_grpc.add_ContextServiceServicer_to_server),
            ("provider", provider, provider_pb2_grpc.add_ProviderServiceServicer_to_server),
        ):
            server = grpc.aio.server()
            add(servicer, server)  # type: ignore[no-untyped-call]
            ports[name] = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            servers.append(server)
            started[name] = server
        overrides = {
            "services": {name: {"port": port} for name, port in ports.items()},
            "agents": agents
            or [
                {"id": "ops", "model": "fake/m", "system_prompt": "be careful", "permissions": ["dev:test:read"]},
            ],
            "dispatcher": {
                "claim_idle_s": 1.0,
                "claim_interval_s": 0.2,
                "heartbeat_interval_s": 0.2,
                "service_retry_backoff_s": 0.01,
                # Fail once the quick retries are spent, as these tests of failing and resuming expect; the
                # outage waits (dispatcher.outage_budget_s) have tests of their own (test_outage.py).
                "outage_budget_s": 0,
                **(dispatcher or {}),
            },
            **(config or {}),
        }
        svc = await start_service(SPEC, overrides)
        return Mesh(svc, tools, context, provider, started)

    yield make
    for server in servers:
        await server.stop(None)
