"""provider_svc's gRPC surface: maps protobuf to the provider domain (`provider_svc.service`) and back.

RPC-level faults (bad request, unknown model, upstream failures after retries and fallbacks) end
the call with a rich status (docs/design.md §3): 429 -> RESOURCE_EXHAUSTED + RetryInfo, timeout ->
DEADLINE_EXCEEDED, 5xx/529 -> UNAVAILABLE, 400 -> INVALID_ARGUMENT, upstream 401/403 ->
FAILED_PRECONDITION. A failed call's attempts are summarized in the error's metadata["attempts"].

The agent a call is billed to is decided by `provider_svc.billing.billed_agent` from the verified
identity: an agent bills only itself, an operator no agent (its own subject), an admin any agent.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc
import grpc.aio

from agentmesh import callctx
from agentmesh.apikeys import ApiKeys
from agentmesh.audit import AuditLog
from agentmesh.chat import DEFAULT_MAX_JSON_DEPTH, Usage
from agentmesh.errors import AgentmeshError, InvalidRequestError, PermissionDeniedError
from agentmesh.identity_value import Identity, require_identity
from agentmesh.rpc import codec
from agentmesh.rpc.host import ServiceHost, ServiceSpec
from agentmesh.rpc.status import checked_from_detail, to_detail
from agentmesh.v1 import common_pb2, provider_pb2, provider_pb2_grpc
from provider_svc.alerts import SpendAlerts
from provider_svc.billing import billed_agent
from provider_svc.compat.routes import CompatApi
from provider_svc.embedding import Embeddings
from provider_svc.models.base import (
    Attempt,
    CallContext,
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    Sampling,
    TextDelta,
    ToolCallDelta,
    ToolChoice,
    ToolDef,
)
from provider_svc.recording import RequestRecorder
from provider_svc.server_spend import SCOPE_KINDS, budgets_pb, day_of, embedded_pb, group_pb, spend_filter
from provider_svc.service import Generation, Providers
from provider_svc.spend import SpendReports

__all__ = ["SERVICE_NAME", "SPEC", "ProviderServicer"]

log = logging.getLogger("provider_svc")

SERVICE_NAME = provider_pb2.DESCRIPTOR.services_by_name["ProviderService"].full_name

_CHOICES = {
    provider_pb2.TOOL_CHOICE_MODE_AUTO: "auto",
    provider_pb2.TOOL_CHOICE_MODE_NONE: "none",
    provider_pb2.TOOL_CHOICE_MODE_REQUIRED: "required",
    provider_pb2.TOOL_CHOICE_MODE_TOOL: "tool",
}
_FINISH = {
    FinishReason.UNSPECIFIED: provider_pb2.FINISH_REASON_UNSPECIFIED,
    FinishReason.STOP: provider_pb2.FINISH_REASON_STOP,
    FinishReason.LENGTH: provider_pb2.FINISH_REASON_LENGTH,
    FinishReason.TOOL_CALLS: provider_pb2.FINISH_REASON_TOOL_CALLS,
    FinishReason.CONTENT_FILTER: provider_pb2.FINISH_REASON_CONTENT_FILTER,
}
_MAX_ATTEMPTS_TEXT = 600


# --- protobuf -> domain ----------------------------------------------------------------------------


def _json_object(text: str, field: str, max_depth: int) -> dict[str, Any]:
    value = codec.json_value(text, field, max_depth=max_depth)
    if not isinstance(value, dict):
        raise InvalidRequestError(field, "must be a JSON object")
    return value


def to_request(pb: provider_pb2.GenerateRequest, *, max_json_depth: int = DEFAULT_MAX_JSON_DEPTH) -> ModelRequest:
    """The domain request of a GenerateRequest; InvalidRequestError naming the bad field.

    JSON texts deeper than `max_json_depth` (`server.max_json_depth`) are refused before parsing."""
    messages = []
    for i, m in enumerate(pb.messages):
        messages.append(
            Message(
                role=codec.role_from_pb(m.role, f"messages[{i}].role"),
                content=m.content,
                tool_calls=tuple(codec.tool_call_from_pb(c) for c in m.tool_calls),
                tool_call_id=m.tool_call_id,
                name=m.name,
                tool_error=checked_from_detail(m.tool_error, f"messages[{i}].tool_error")
                if m.HasField("tool_error")
                else None,
                correction=codec.correction_from_pb(m.correction, f"messages[{i}].correction"),
            )
        )
    tools = tuple(
        ToolDef(
            name=t.name,
            description=t.description,
            input_schema=_json_object(t.input_schema_json, f"tools[{i}].input_schema_json", max_json_depth)
            if t.input_schema_json
            else {"type": "object", "properties": {}},
        )
        for i, t in enumerate(pb.tools)
    )
    choice = None
    if pb.HasField("tool_choice") and pb.tool_choice.mode != provider_pb2.TOOL_CHOICE_MODE_UNSPECIFIED:
        mode = _CHOICES.get(pb.tool_choice.mode)
        if mode is None:
            raise InvalidRequestError("tool_choice.mode", f"unknown mode {pb.tool_choice.mode}")
        choice = ToolChoice(mode=mode, tool_name=pb.tool_choice.tool_name)  # type: ignore[arg-type]
    s = pb.sampling
    sampling = Sampling(
        temperature=s.temperature if s.HasField("temperature") else None,
        top_p=s.top_p if s.HasField("top_p") else None,
        max_tokens=s.max_tokens if s.HasField("max_tokens") else None,
        stop=tuple(s.stop),
        seed=s.seed if s.HasField("seed") else None,
    )
    schema = (
        _json_object(pb.response_schema_json, "response_schema_json", max_json_depth)
        if pb.response_schema_json
        else None
    )
    return ModelRequest(
        messages=tuple(messages), tools=tools, tool_choice=choice, sampling=sampling, response_schema=schema
    )


def accounted_agent(identity: Identity, requested: str) -> str:
    """The agent an agent token's request names: its own; a request may only repeat it (GetUsage)."""
    if identity.agent_id:
        if requested and requested != identity.agent_id:
            raise PermissionDeniedError(
                "operator",
                f"agent_id {requested[:64]!r} does not match the caller's identity ({identity.agent_id})",
            )
        return identity.agent_id
    return requested or identity.subject


def call_context(agent_id: str, identity: Identity | None = None) -> CallContext:
    """A domain call context carrying the incoming call's deadline, and who calls: the subject (its
    tenant), the API key (its quotas and the models it may use)."""
    ctx = CallContext(deadline=callctx.deadline_var.get(), agent_id=agent_id)
    if identity is not None:
        ctx.subject = identity.subject
        ctx.key_id = identity.api_key_id
        ctx.metric_agent = identity.agent_id
        ctx.model_patterns = identity.model_patterns
    return ctx


# --- domain -> protobuf ----------------------------------------------------------------------------


def _message_pb(m: Message) -> common_pb2.Message:
    return common_pb2.Message(
        role=codec.role_to_pb(m.role),
        content=m.content,
        tool_calls=[codec.tool_call_to_pb(c) for c in m.tool_calls],
        tool_call_id=m.tool_call_id,
        name=m.name,
    )


def _attempt_pb(a: Attempt) -> provider_pb2.Attempt:
    pb = provider_pb2.Attempt(model=a.model, http_status=a.http_status, duration=codec.duration(max(a.duration_s, 0.0)))
    if a.error is not None:
        pb.error.CopyFrom(to_detail(a.error))
    return pb


def _response_pb(response: ModelResponse) -> provider_pb2.GenerateResponse:
    return provider_pb2.GenerateResponse(
        message=_message_pb(response.message),
        finish_reason=_FINISH[response.finish_reason],
        usage=codec.usage_to_pb(response.usage),
        model=response.model,
        latency=codec.duration(max(response.latency_s, 0.0)),
    )


def generation_pb(generation: Generation) -> provider_pb2.GenerateResponse:
    pb = _response_pb(generation.response)
    pb.cost_usd = generation.cost_usd
    pb.attempts.extend(_attempt_pb(a) for a in generation.attempts)
    return pb


def attempts_text(attempts: Sequence[Attempt]) -> str:
    """ "openai/gpt-4o: UPSTREAM_UNAVAILABLE (503); anthropic/...: ok" for an error's metadata."""
    parts = []
    for a in attempts:
        outcome = "ok" if a.error is None else a.error.code.name
        parts.append(f"{a.model}: {outcome}" + (f" ({a.http_status})" if a.http_status else ""))
    text = "; ".join(parts)
    return text if len(text) <= _MAX_ATTEMPTS_TEXT else text[: _MAX_ATTEMPTS_TEXT - 3] + "..."


def _with_attempts(err: AgentmeshError, attempts: Sequence[Attempt]) -> AgentmeshError:
    if attempts:
        err.metadata.setdefault("attempts", attempts_text(attempts))
        err.metadata.setdefault("attempt_count", str(len(attempts)))
    return err


class ProviderServicer(provider_pb2_grpc.ProviderServiceServicer):
    """The ProviderService servicer."""

    def __init__(
        self,
        providers: Providers,
        *,
        max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
        recorder: RequestRecorder | None = None,
        spend: SpendReports | None = None,
        embeddings: Embeddings | None = None,
    ) -> None:
        self.providers = providers
        self.embeddings = embeddings or Embeddings(providers)
        self.max_json_depth = max_json_depth
        self.recorder = recorder or RequestRecorder()
        self.spend = spend or SpendReports(providers.ledger, providers.quotas, None, providers.gateway, None)

    async def _response(self, generation: Generation, include_request: bool) -> provider_pb2.GenerateResponse:
        pb = generation_pb(generation)
        sent = generation.response.sent
        if include_request and sent is not None:
            recorded = await self.recorder.record(sent)
            pb.request_json = recorded.body_json
            pb.request_format = recorded.format
            pb.request_redacted = recorded.redacted
        return pb

    async def Generate(
        self, request: provider_pb2.GenerateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> provider_pb2.GenerateResponse:
        identity = require_identity()
        agent = billed_agent(identity, request.agent_id)
        domain = to_request(request, max_json_depth=self.max_json_depth)
        ctx = call_context(agent, identity)
        try:
            generation = await self.providers.generate(domain, ctx, model=request.model, task_tag=request.task_tag)
        except AgentmeshError as exc:
            raise _with_attempts(exc, ctx.attempts) from None
        return await self._response(generation, request.include_request)

    async def GenerateStream(
        self, request: provider_pb2.GenerateStreamRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[provider_pb2.GenerateStreamResponse]:
        inner = request.request
        identity = require_identity()
        agent = billed_agent(identity, inner.agent_id)
        domain = to_request(inner, max_json_depth=self.max_json_depth)
        ctx = call_context(agent, identity)
        try:
            async for event in self.providers.generate_stream(domain, ctx, model=inner.model, task_tag=inner.task_tag):
                if isinstance(event, TextDelta):
                    yield provider_pb2.GenerateStreamResponse(text_delta=event.text)
                elif isinstance(event, ToolCallDelta):
                    yield provider_pb2.GenerateStreamResponse(
                        tool_call_delta=provider_pb2.ToolCallDelta(
                            index=event.index, id=event.id, name=event.name, arguments_delta=event.arguments_delta
                        )
                    )
                elif isinstance(event, Generation):
                    final = await self._response(event, inner.include_request)
                    yield provider_pb2.GenerateStreamResponse(final=final)
        except AgentmeshError as exc:
            raise _with_attempts(exc, ctx.attempts) from None

    async def ListModels(
        self, request: provider_pb2.ListModelsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> provider_pb2.ListModelsResponse:
        return provider_pb2.ListModelsResponse(
            models=[
                provider_pb2.ModelInfo(
                    name=m.name,
                    provider=m.provider,
                    provider_type=m.provider_type,
                    aliases=list(m.aliases),
                    input_price_per_mtok=m.input_price_per_mtok,
                    output_price_per_mtok=m.output_price_per_mtok,
                    unavailable=not m.available,
                    unavailable_reason=m.unavailable_reason,
                    tags=list(m.tags),
                )
                for m in self.providers.list_models()
            ],
            routes=self.providers.routes(),
        )

    async def GetUsage(
        self, request: provider_pb2.GetUsageRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> provider_pb2.GetUsageResponse:
        identity = require_identity()
        agent = request.agent_id
        if not identity.has_role("operator"):
            # An agent sees its own usage only.
            if not identity.agent_id:
                raise PermissionDeniedError("operator", "usage of other agents needs the operator role")
            agent = accounted_agent(identity, agent)
        start = day_of(request.start_time, "start_time") if request.HasField("start_time") else None
        end = day_of(request.end_time, "end_time") if request.HasField("end_time") else None
        if start is not None and end is not None and start > end:
            raise InvalidRequestError("start_time", "must not be after end_time")
        rows = await self.providers.usage(agent, start, end)
        return provider_pb2.GetUsageResponse(
            rows=[
                provider_pb2.UsageRow(
                    agent_id=r.agent_id,
                    provider=r.provider,
                    model=r.model,
                    day=r.day,
                    calls=r.calls,
                    usage=codec.usage_to_pb(Usage(r.input_tokens, r.output_tokens)),
                    cost_usd=r.cost_usd,
                    total_latency=codec.duration(max(r.total_latency_s, 0.0)),
                    task_tag=r.task_tag,
                    api_key_id=r.api_key_id,
                )
                for r in rows
            ]
        )

    async def GetSpendSummary(
        self, request: provider_pb2.GetSpendSummaryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> provider_pb2.GetSpendSummaryResponse:
        summary = await self.spend.summary(
            require_identity(), spend_filter(request), request.page_size, request.page_token
        )
        return provider_pb2.GetSpendSummaryResponse(
            rows=[group_pb(g) for g in summary.rows],
            total=group_pb(summary.total),
            next_page_token=summary.next_page_token,
            total_groups=summary.total_groups,
        )

    async def ListBudgets(
        self, request: provider_pb2.ListBudgetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> provider_pb2.ListBudgetsResponse:
        kind = SCOPE_KINDS.get(request.kind)
        if kind is None:
            raise InvalidRequestError("kind", f"unknown scope kind {request.kind}")
        page = await self.spend.budgets(require_identity(), kind, request.page_size, request.page_token)
        return budgets_pb(page)

    async def Embed(
        self, request: provider_pb2.EmbedRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> provider_pb2.EmbedResponse:
        identity = require_identity()
        ctx = call_context(billed_agent(identity, request.agent_id), identity)
        embedded = await self.embeddings.embed(list(request.inputs), ctx, model=request.model)
        return embedded_pb(embedded)


async def setup(host: ServiceHost) -> Callable[[], Awaitable[None]] | None:
    """Builds every configured model, registers ProviderService on the host and, with
    `gateway.compat_endpoints`, the OpenAI- and Anthropic-compatible routes on its HTTP listener."""
    settings = host.settings
    alerts = SpendAlerts(
        AuditLog(host.store, settings.audit) if host.store is not None else None, settings.gateway.alerts
    )
    providers = Providers(
        settings.providers,
        store=host.store,
        tracer=host.telemetry.tracer("provider_svc"),
        metrics=host.metrics,
        gateway=settings.gateway,
        on_alert=alerts,
    )
    for listing in providers.list_models():
        if not listing.available:
            log.warning("model %s unavailable: %s", listing.name, listing.unavailable_reason)
    host.add_servicer(
        SERVICE_NAME,
        provider_pb2_grpc.add_ProviderServiceServicer_to_server,
        ProviderServicer(
            providers,
            max_json_depth=host.settings.server.max_json_depth,
            recorder=RequestRecorder(
                max_entries=host.settings.providers.request_cache_entries,
                max_chars=host.settings.providers.request_cache_chars,
            ),
            spend=SpendReports(
                providers.ledger,
                providers.quotas,
                ApiKeys(host.store) if host.store is not None else None,
                settings.gateway,
                settings.auth.key.get_secret_value() if settings.auth.key is not None else None,
            ),
        ),
    )
    if settings.gateway.compat_endpoints:
        api = CompatApi(providers, host.http_edge(), max_request_bytes=settings.gateway.max_request_bytes)
        host.add_http_routes(api.routes())

    async def close() -> None:
        await providers.aclose()
        await alerts.aclose()

    return close


SPEC = ServiceSpec(name="provider", setup=setup)
