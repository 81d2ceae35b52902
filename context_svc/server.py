"""context_svc's gRPC surface: maps protobuf to the context domain (engine.py) and back.

With codec.py (the protobuf mappings of the domain's values) and server_memory.py (the memory RPCs),
the only modules of context_svc that touch grpc or protobuf: it turns requests into domain calls and
domain results into responses; the AgentmeshErrors it raises become rich statuses at the RPC edge
(docs/design.md §11). It also implements the summarizer's `SummaryModel` over gRPC to
provider_svc (an outgoing mapping of the same kind).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
from opentelemetry import trace

from agentmesh.callctx import remaining_time
from agentmesh.chat import DEFAULT_MAX_JSON_DEPTH, Role
from agentmesh.config import ConfigError
from agentmesh.errors import InvalidRequestError
from agentmesh.rpc import codec
from agentmesh.rpc.channels import ServiceClients
from agentmesh.rpc.host import ServiceHost, ServiceSpec
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import common_pb2, context_pb2, context_pb2_grpc, provider_pb2
from context_svc.codec import (
    MessageCache,
    brief_domain,
    hop_pb,
    message_domain,
    range_domain,
    session_pb,
    summary_pb,
    tool_outcome_domain,
    tool_outcome_pb,
    view_pb,
)
from context_svc.engine import BudgetRequest, ContextEngine
from context_svc.model import Appended, Message
from context_svc.server_memory import MemoryRpcs, caller
from context_svc.tokens import UnknownEncodingError

__all__ = ["SERVICE_NAME", "SPEC", "ContextServicer", "ProviderSummaryModel"]

log = logging.getLogger("context_svc")

SERVICE_NAME = context_pb2.DESCRIPTOR.services_by_name["ContextService"].full_name


def _result_pb(appended: Appended) -> context_pb2.AppendToolResultResponse:
    """Where a tool result landed (AppendToolResult's answer, and each of AppendMessage's `results`)."""
    response = context_pb2.AppendToolResultResponse(
        index=appended.index, token_count=appended.token_count, already_appended=appended.already
    )
    if appended.ref is not None:
        response.ref.CopyFrom(codec.payload_ref_to_pb(appended.ref))
    return response


def _build_budget(
    request: context_pb2.AppendMessageRequest | context_pb2.AppendToolResultRequest | context_pb2.CreateSessionRequest,
) -> int | None:
    """An append's `build_budget_tokens` (None: no view asked for), checked before anything is appended."""
    if not request.HasField("build_budget_tokens"):
        return None
    if request.build_budget_tokens < 0:
        got = request.build_budget_tokens
        raise InvalidRequestError("build_budget_tokens", f"must be >= 0 (0: the session's budget), got {got}")
    return request.build_budget_tokens


class ContextServicer(MemoryRpcs, context_pb2_grpc.ContextServiceServicer):
    """The ContextService servicer: one domain call per RPC (the memory RPCs in server_memory.py)."""

    engine: ContextEngine

    def __init__(
        self,
        engine: ContextEngine,
        *,
        max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
        message_cache_entries: int = 50_000,
    ) -> None:
        self.engine = engine
        self.max_json_depth = max_json_depth
        # Bounded (context.message_cache_entries): one per servicer, never a process-wide global.
        self.messages = MessageCache(message_cache_entries)

    async def CreateSession(
        self, request: context_pb2.CreateSessionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.CreateSessionResponse:
        budget = None
        if request.HasField("budget"):
            b = request.budget
            budget = BudgetRequest(
                max_context_tokens=b.max_context_tokens,
                reserve_system_prompt_tokens=b.reserve_system_prompt_tokens,
                summary_trigger_tokens=b.summary_trigger_tokens,
                keep_recent_messages=b.keep_recent_messages,
                encoding=b.encoding,
            )
        build = _build_budget(request)
        if build is not None and not request.goal_message_id:
            raise InvalidRequestError(
                "build_budget_tokens", "needs goal_message_id: the view follows the goal's append"
            )
        session, appended, view = await self.engine.open_session(
            caller(),
            view=build is not None,
            view_tokens=build or None,
            goal_message_id=request.goal_message_id,
            session_id=request.session_id,
            agent_id=request.agent_id,
            goal=request.goal,
            sub_goals=list(request.sub_goals),
            system_prompt=request.system_prompt,
            budget=budget,
        )
        response = context_pb2.CreateSessionResponse(session=session_pb(session))
        if appended is not None:
            goal = response.goal_message
            goal.index, goal.token_count, goal.already_appended = appended.index, appended.token_count, appended.already
            if view is not None:
                goal.view.CopyFrom(view_pb(view, self.messages))
        return response

    async def GetSession(
        self, request: context_pb2.GetSessionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.GetSessionResponse:
        session, entities = await self.engine.get_session(caller(), request.session_id)
        return context_pb2.GetSessionResponse(session=session_pb(session), entities=entities)

    async def AppendMessage(
        self, request: context_pb2.AppendMessageRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.AppendMessageResponse:
        if not request.HasField("message"):
            raise InvalidRequestError("message", "required")
        message = message_domain(request.message, max_json_depth=self.max_json_depth)
        build = _build_budget(request)
        view = None
        if request.following_results:
            return await self._append_with_results(request, message, build)
        if build is None:
            appended = await self.engine.append_message_once(
                caller(), request.session_id, message, client_message_id=request.client_message_id
            )
        else:
            appended, view = await self.engine.append_message_viewed(
                caller(), request.session_id, message, client_message_id=request.client_message_id,
                budget_tokens=build or None,
            )  # fmt: skip
        response = context_pb2.AppendMessageResponse(
            index=appended.index, token_count=appended.token_count, already_appended=appended.already
        )
        if view is not None:
            response.view.CopyFrom(view_pb(view, self.messages))
        return response

    async def _append_with_results(
        self, request: context_pb2.AppendMessageRequest, message: Message, build: int | None
    ) -> context_pb2.AppendMessageResponse:
        """AppendMessage with `following_results`: the message, then its calls' results (issue 45)."""
        appended, results, view = await self.engine.append_message_with_results(
            caller(),
            request.session_id,
            message,
            [tool_outcome_domain(result) for result in request.following_results],
            client_message_id=request.client_message_id,
            build=build,
        )
        response = context_pb2.AppendMessageResponse(
            index=appended.index, token_count=appended.token_count, already_appended=appended.already
        )
        response.results.extend(_result_pb(result) for result in results)
        if view is not None:
            response.view.CopyFrom(view_pb(view, self.messages))
        return response

    async def AppendToolResult(
        self, request: context_pb2.AppendToolResultRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.AppendToolResultResponse:
        if not request.HasField("result"):
            raise InvalidRequestError("result", "required")
        build = _build_budget(request)
        outcome, view = tool_outcome_domain(request.result), None
        if build is None:
            appended = await self.engine.append_tool_result_once(caller(), request.session_id, outcome)
        else:
            appended, view = await self.engine.append_tool_result_viewed(
                caller(), request.session_id, outcome, budget_tokens=build or None
            )
        response = _result_pb(appended)
        if view is not None:
            # BuildContext's view (0: the session's budget), built right after the append, so the
            # caller's next step needs no BuildContext call of its own (issue 45).
            response.view.CopyFrom(view_pb(view, self.messages))
        return response

    async def GetToolResult(
        self, request: context_pb2.GetToolResultRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.GetToolResultResponse:
        outcome, existing = await self.engine.tool_result(caller(), request.session_id, request.tool_call_id)
        return context_pb2.GetToolResultResponse(
            result=tool_outcome_pb(outcome), index=existing.index, token_count=existing.message.token_count
        )

    async def BuildContext(
        self, request: context_pb2.BuildContextRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.BuildContextResponse:
        view = await self.engine.build_context(
            caller(),
            request.session_id,
            budget_tokens=request.budget_tokens if request.HasField("budget_tokens") else None,
            debug=request.debug,
        )
        return context_pb2.BuildContextResponse(view=view_pb(view, self.messages))

    async def GetPayload(
        self, request: context_pb2.GetPayloadRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.GetPayloadResponse:
        selector = request.WhichOneof("selector")
        ref, content, partial = await self.engine.get_payload(
            caller(),
            request.session_id,
            request.ref_id,
            json_path=request.json_path if selector == "json_path" else None,
            line_range=range_domain(request.line_range) if selector == "line_range" else None,
            byte_range=range_domain(request.byte_range) if selector == "byte_range" else None,
        )
        return context_pb2.GetPayloadResponse(ref=codec.payload_ref_to_pb(ref), content=content, partial=partial)

    async def Compact(
        self, request: context_pb2.CompactRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.CompactResponse:
        count, summary = await self.engine.compact(caller(), request.session_id)
        response = context_pb2.CompactResponse(summarized_messages=count)
        if summary is not None:
            response.summary.CopyFrom(summary_pb(summary))
        return response

    async def AttachTask(
        self, request: context_pb2.AttachTaskRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.AttachTaskResponse:
        attached = await self.engine.attach_task(
            caller(),
            request.session_id,
            request.task_id,
            request.agent_id,
            expected_task_id=request.expected_task_id,
            expected_generation=request.expected_generation,
        )
        return context_pb2.AttachTaskResponse(
            attached=attached.attached,
            newest_task_id=attached.newest_task_id,
            generation=attached.generation,
            newest_age=codec.duration(attached.newest_age_s),
        )

    async def BuildHandoff(
        self, request: context_pb2.BuildHandoffRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.BuildHandoffResponse:
        if not request.HasField("brief"):
            raise InvalidRequestError("brief", "required")
        hop = await self.engine.handoffs.build(
            caller(),
            request.session_id,
            brief_domain(request.brief),
            child_session_id=request.child_session_id,
            max_tokens=request.max_tokens if request.HasField("max_tokens") else None,
        )
        # The check's outcome on the RPC's span: a trace shows what each hop confirmed and demoted.
        trace.get_current_span().set_attributes(
            {
                "agentmesh.handoff.confirmed": hop.confirmed,
                "agentmesh.handoff.inferred": hop.inferred,
                "agentmesh.handoff.demoted": hop.demoted,
                "agentmesh.handoff.tokens": hop.token_count,
                "agentmesh.handoff.omitted": hop.omitted,
            }
        )
        return hop_pb(hop, request)

    async def DeleteSession(
        self, request: context_pb2.DeleteSessionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.DeleteSessionResponse:
        deleted = await self.engine.delete_session(caller(), request.session_id)
        return context_pb2.DeleteSessionResponse(deleted=deleted)


class ProviderSummaryModel:
    """The LLM summarizer's model: Generate on provider_svc (the caller's identity is forwarded)."""

    def __init__(self, clients: ServiceClients) -> None:
        self.clients = clients

    async def complete(self, *, model: str, system: str, user: str, agent_id: str, timeout_s: float) -> str:
        request = provider_pb2.GenerateRequest(
            model=model,
            task_tag="summarize",
            messages=[
                common_pb2.Message(role=codec.role_to_pb(Role.SYSTEM), content=system),
                common_pb2.Message(role=codec.role_to_pb(Role.USER), content=user),
            ],
            sampling=provider_pb2.SamplingParams(temperature=0.0),
            agent_id=agent_id,
        )
        remaining = remaining_time()
        if remaining is not None:
            # Leave the caller half of its time: a slow model must not make BuildContext itself late
            # (on a timeout the extractive summary is used and the build still answers).
            timeout_s = max(0.05, min(timeout_s, remaining / 2))
        try:
            response = await self.clients.provider().Generate(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) from exc
        content: str = response.message.content
        return content


async def setup(host: ServiceHost) -> Callable[[], Awaitable[None]] | None:
    """Registers ContextService on the host; an unusable `context:` configuration stops start-up."""
    if host.store is None:
        raise ConfigError("context_svc needs a Redis store")
    clients = ServiceClients(host.settings, telemetry=host.telemetry)
    try:
        engine = ContextEngine(host.settings.context, host.store, summary_model=ProviderSummaryModel(clients))
    except UnknownEncodingError as exc:
        await clients.close()
        raise ConfigError(f"context.encoding: {exc}") from exc
    servicer = ContextServicer(
        engine,
        max_json_depth=host.settings.server.max_json_depth,
        message_cache_entries=host.settings.context.message_cache_entries,
    )
    host.add_servicer(SERVICE_NAME, context_pb2_grpc.add_ContextServiceServicer_to_server, servicer)

    async def cleanup() -> None:
        await clients.close()

    return cleanup


SPEC = ServiceSpec(name="context", setup=setup)
