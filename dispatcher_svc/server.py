"""dispatcher_svc's gRPC surface: maps protobuf to the dispatcher domain and back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc.aio
from google.protobuf import json_format, struct_pb2, timestamp_pb2
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentmesh.answers import canonical
from agentmesh.errors import InvalidRequestError
from agentmesh.identity_value import require_identity
from agentmesh.rpc import codec
from agentmesh.rpc.channels import ServiceClients
from agentmesh.rpc.host import ServiceHost, ServiceSpec
from agentmesh.rpc.status import to_detail
from agentmesh.spans import Span
from agentmesh.telemetry import current_request_id
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc
from dispatcher_svc import testhooks, workflow_server
from dispatcher_svc.adapters import grpc_ports
from dispatcher_svc.agents import AgentConfig
from dispatcher_svc.codec import SETTLEMENT_PB, pending_pb, tool_result_pb
from dispatcher_svc.listing import ApprovalFilter, TaskApproval, TaskFilter
from dispatcher_svc.model import ApprovalRecord, Task, TaskEvent, TaskStatus
from dispatcher_svc.prompts import StepPrompt
from dispatcher_svc.service import Dispatcher, StartRequest
from dispatcher_svc.traces import TraceReader

SERVICE_NAME = dispatcher_pb2.DESCRIPTOR.services_by_name["DispatcherService"].full_name

Context = grpc.aio.ServicerContext[Any, Any]


# --- protobuf <-> dispatcher domain ----------------------------------------------------------------


def start_request(pb: dispatcher_pb2.StartTaskRequest) -> StartRequest:
    return StartRequest(
        agent_id=pb.agent_id,
        goal=pb.goal,
        token_budget=pb.token_budget if pb.HasField("token_budget") else None,
        max_steps=pb.max_steps if pb.HasField("max_steps") else None,
        task_id=pb.task_id,
        session_id=pb.session_id,
        output_schema_json=pb.output_schema_json,
        capability=pb.capability,
    )


def _json_value(text: str) -> struct_pb2.Value:
    """A JSON text as a protobuf Value (Connect and other JSON clients read it as JSON, not a string)."""
    value = struct_pb2.Value()
    json_format.Parse(text, value)
    return value


def task_pb(task: Task) -> dispatcher_pb2.Task:
    pb = dispatcher_pb2.Task(
        task_id=task.task_id,
        agent_id=task.agent_id,
        goal=task.goal,
        status=int(task.status),  # type: ignore[arg-type]
        step=task.step,
        usage=codec.usage_to_pb(task.usage),
        answer=task.answer,
        session_id=task.session_id,
        request_id=task.request_id,
        last_sequence=task.last_sequence,
        created_by=task.created_by,
        output_json=task.output_json,
        output_schema_json=task.output_schema_json,
        parent_task_id=task.parent_task_id,
        root_task_id=task.root_task_id or task.task_id,
        child_task_id=task.child_task_id,
    )
    if task.output_json:
        pb.output.CopyFrom(_json_value(task.output_json))
    if task.error is not None:
        pb.error.CopyFrom(to_detail(task.error))
    if task.pending_approval is not None:
        pb.pending_approval.CopyFrom(pending_pb(task.pending_approval))
    if task.create_time_ms:
        pb.create_time.CopyFrom(codec.timestamp_ms(task.create_time_ms))
    if task.update_time_ms:
        pb.update_time.CopyFrom(codec.timestamp_ms(task.update_time_ms))
    return pb


def event_pb(event: TaskEvent) -> dispatcher_pb2.TaskEvent:
    pb = dispatcher_pb2.TaskEvent(
        task_id=event.task_id,
        sequence=event.sequence,
        kind=int(event.kind),  # type: ignore[arg-type]
        status=int(event.status),  # type: ignore[arg-type]
        step=event.step,
        message=event.message,
        attributes=event.attributes,
        output_json=event.output_json,
    )
    if event.output_json:
        pb.output.CopyFrom(_json_value(event.output_json))
    pb.time.CopyFrom(codec.timestamp_ms(event.time_ms))
    if event.tool_call is not None:
        pb.tool_call.CopyFrom(codec.tool_call_to_pb(event.tool_call))
    if event.tool_result is not None:
        pb.tool_result.CopyFrom(tool_result_pb(event.tool_result))
    if event.error is not None:
        pb.error.CopyFrom(to_detail(event.error))
    if event.pending_approval is not None:
        pb.pending_approval.CopyFrom(pending_pb(event.pending_approval))
    if event.usage is not None:
        pb.usage.CopyFrom(codec.usage_to_pb(event.usage))
    return pb


def step_prompt_pb(prompt: StepPrompt) -> dispatcher_pb2.StepPrompt:
    pb = dispatcher_pb2.StepPrompt(
        task_id=prompt.task_id,
        step=prompt.step,
        session_id=prompt.session_id,
        model=prompt.model,
        format=prompt.format,
        request_json=prompt.request_json,
        redacted=prompt.redacted,
    )
    if prompt.create_time_ms:
        pb.create_time.CopyFrom(codec.timestamp_ms(prompt.create_time_ms))
    return pb


_SPAN_KINDS = {
    "INTERNAL": dispatcher_pb2.TRACE_SPAN_KIND_INTERNAL,
    "SERVER": dispatcher_pb2.TRACE_SPAN_KIND_SERVER,
    "CLIENT": dispatcher_pb2.TRACE_SPAN_KIND_CLIENT,
    "PRODUCER": dispatcher_pb2.TRACE_SPAN_KIND_PRODUCER,
    "CONSUMER": dispatcher_pb2.TRACE_SPAN_KIND_CONSUMER,
}
_SPAN_STATUSES = {"OK": dispatcher_pb2.TRACE_SPAN_STATUS_OK, "ERROR": dispatcher_pb2.TRACE_SPAN_STATUS_ERROR}
_ATTRIBUTE_MAX_CHARS = 2000


def _attribute_text(value: Any) -> str:
    text = ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)
    return text if len(text) <= _ATTRIBUTE_MAX_CHARS else text[:_ATTRIBUTE_MAX_CHARS] + "…"


def _nanos_pb(unix_ns: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=unix_ns // 1_000_000_000, nanos=unix_ns % 1_000_000_000)


def trace_span_pb(span: Span) -> dispatcher_pb2.TraceSpan:
    return dispatcher_pb2.TraceSpan(
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_span_id=span.parent_span_id or "",
        name=span.name,
        kind=_SPAN_KINDS.get(span.kind, dispatcher_pb2.TRACE_SPAN_KIND_UNSPECIFIED),
        service=span.service,
        start_time=_nanos_pb(max(0, span.start)),
        end_time=_nanos_pb(max(0, span.end)),
        status=_SPAN_STATUSES.get(span.status, dispatcher_pb2.TRACE_SPAN_STATUS_UNSPECIFIED),
        status_message=span.description if span.status == "ERROR" else "",
        attributes={str(k): _attribute_text(v) for k, v in span.attributes.items()},
    )


def agent_pb(agent: AgentConfig) -> dispatcher_pb2.Agent:
    return dispatcher_pb2.Agent(
        agent_id=agent.id,
        description=agent.description,
        model=agent.model,
        tools=list(agent.tools),
        capabilities=list(agent.capabilities),
        token_budget=agent.token_budget,
        max_steps=agent.max_steps,
        output_schema_json=canonical(agent.output_schema) if agent.output_schema is not None else "",
    )


def approval_pb(record: ApprovalRecord) -> common_pb2.Approval:
    pb = common_pb2.Approval(
        state=f"APPROVAL_STATE_{record.state}",
        resolved_by=record.resolved_by,
        reason=record.reason,
        settlement=SETTLEMENT_PB.get(record.settlement, common_pb2.SETTLEMENT_OUTCOME_UNSPECIFIED),
    )
    if record.request is not None:
        pb.request.CopyFrom(pending_pb(record.request))
    if record.resolve_time_ms:
        pb.resolve_time.CopyFrom(codec.timestamp_ms(record.resolve_time_ms))
    return pb


def settlement_from_pb(value: int) -> str:
    """ "ran", "not_ran" or "" (unset); INVALID_REQUEST for a number this build does not know."""
    if value == common_pb2.SETTLEMENT_OUTCOME_UNSPECIFIED:
        return ""
    for name, number in SETTLEMENT_PB.items():
        if number == value:
            return name
    raise InvalidRequestError("settlement", f"unknown SettlementOutcome {value}")


def task_filter(pb: dispatcher_pb2.ListTasksRequest) -> TaskFilter:
    if pb.status not in TaskStatus._value2member_map_:
        raise InvalidRequestError("status", f"unknown TaskStatus {pb.status}")
    return TaskFilter(
        agent_id=pb.agent_id,
        status=TaskStatus(pb.status),
        created_by=pb.created_by,
        root_task_id=pb.root_task_id,
        created_after_ms=codec.millis(pb.created_after, "created_after") if pb.HasField("created_after") else None,
        created_before_ms=codec.millis(pb.created_before, "created_before") if pb.HasField("created_before") else None,
    )


_APPROVAL_KIND = {
    dispatcher_pb2.TASK_APPROVAL_KIND_UNSPECIFIED: "",
    dispatcher_pb2.TASK_APPROVAL_KIND_APPROVAL: "approval",
    dispatcher_pb2.TASK_APPROVAL_KIND_SETTLEMENT: "settlement",
}
_APPROVAL_KIND_PB = {name: number for number, name in _APPROVAL_KIND.items()}


def approval_filter(pb: dispatcher_pb2.ListApprovalsRequest) -> ApprovalFilter:
    if pb.kind not in _APPROVAL_KIND:
        raise InvalidRequestError("kind", f"unknown TaskApprovalKind {pb.kind}")
    return ApprovalFilter(agent_id=pb.agent_id, kind=_APPROVAL_KIND[pb.kind])


def task_approval_pb(waiting: TaskApproval) -> dispatcher_pb2.TaskApproval:
    pb = dispatcher_pb2.TaskApproval(
        task_id=waiting.task_id,
        agent_id=waiting.agent_id,
        kind=_APPROVAL_KIND_PB[waiting.kind],
        pending_approval=pending_pb(waiting.pending),
        created_by=waiting.created_by,
        goal=waiting.goal,
    )
    if waiting.wait_time_ms:
        pb.wait_time.CopyFrom(codec.timestamp_ms(waiting.wait_time_ms))
    return pb


def _traceparent() -> str:
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent", "")


class DispatcherServicer(dispatcher_pb2_grpc.DispatcherServiceServicer):
    """The DispatcherService servicer."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    async def StartTask(
        self, request: dispatcher_pb2.StartTaskRequest, context: Context
    ) -> dispatcher_pb2.StartTaskResponse:
        task = await self.dispatcher.start_task(
            start_request(request),
            caller=require_identity(),
            request_id=current_request_id() or "",
            traceparent=_traceparent(),
        )
        return dispatcher_pb2.StartTaskResponse(task=task_pb(task))

    async def RunTask(
        self, request: dispatcher_pb2.RunTaskRequest, context: Context
    ) -> AsyncIterator[dispatcher_pb2.RunTaskResponse]:
        _, events = await self.dispatcher.run_task(
            start_request(request.start),
            caller=require_identity(),
            request_id=current_request_id() or "",
            traceparent=_traceparent(),
        )
        async for event in events:
            yield dispatcher_pb2.RunTaskResponse(event=event_pb(event))

    async def GetTask(self, request: dispatcher_pb2.GetTaskRequest, context: Context) -> dispatcher_pb2.GetTaskResponse:
        task = await self.dispatcher.get_task(request.task_id, caller=require_identity())
        return dispatcher_pb2.GetTaskResponse(task=task_pb(task))

    async def WatchTask(
        self, request: dispatcher_pb2.WatchTaskRequest, context: Context
    ) -> AsyncIterator[dispatcher_pb2.WatchTaskResponse]:
        async for event in self.dispatcher.watch(request.task_id, request.after_sequence, caller=require_identity()):
            yield dispatcher_pb2.WatchTaskResponse(event=event_pb(event))

    async def CancelTask(
        self, request: dispatcher_pb2.CancelTaskRequest, context: Context
    ) -> dispatcher_pb2.CancelTaskResponse:
        task = await self.dispatcher.cancel(request.task_id, request.reason, caller=require_identity())
        return dispatcher_pb2.CancelTaskResponse(task=task_pb(task))

    async def ResolveApproval(
        self, request: dispatcher_pb2.DispatcherServiceResolveApprovalRequest, context: Context
    ) -> dispatcher_pb2.DispatcherServiceResolveApprovalResponse:
        approval, task = await self.dispatcher.resolve_approval(
            request.task_id,
            request.approval_id,
            approve=request.approve,
            reason=request.reason,
            arguments_sha256=request.arguments_sha256,
            caller=require_identity(),
            settlement=settlement_from_pb(request.settlement),
        )
        return dispatcher_pb2.DispatcherServiceResolveApprovalResponse(
            approval=approval_pb(approval), task=task_pb(task)
        )

    async def GetStepPrompt(
        self, request: dispatcher_pb2.GetStepPromptRequest, context: Context
    ) -> dispatcher_pb2.GetStepPromptResponse:
        prompt = await self.dispatcher.get_step_prompt(request.task_id, request.step, caller=require_identity())
        return dispatcher_pb2.GetStepPromptResponse(prompt=step_prompt_pb(prompt))

    async def ListAgents(
        self, request: dispatcher_pb2.ListAgentsRequest, context: Context
    ) -> dispatcher_pb2.ListAgentsResponse:
        agents = self.dispatcher.list_agents(caller=require_identity())
        return dispatcher_pb2.ListAgentsResponse(agents=[agent_pb(agent) for agent in agents])

    async def ListTasks(
        self, request: dispatcher_pb2.ListTasksRequest, context: Context
    ) -> dispatcher_pb2.ListTasksResponse:
        tasks, token = await self.dispatcher.listing.list_tasks(
            task_filter(request), request.page_size, request.page_token, caller=require_identity()
        )
        return dispatcher_pb2.ListTasksResponse(tasks=[task_pb(task) for task in tasks], next_page_token=token)

    async def ListApprovals(
        self, request: dispatcher_pb2.ListApprovalsRequest, context: Context
    ) -> dispatcher_pb2.ListApprovalsResponse:
        waiting, token = await self.dispatcher.listing.list_approvals(
            approval_filter(request), request.page_size, request.page_token, caller=require_identity()
        )
        return dispatcher_pb2.ListApprovalsResponse(
            approvals=[task_approval_pb(w) for w in waiting], next_page_token=token
        )

    async def GetTaskTrace(
        self, request: dispatcher_pb2.GetTaskTraceRequest, context: Context
    ) -> dispatcher_pb2.GetTaskTraceResponse:
        found = await self.dispatcher.get_task_trace(request.task_id, caller=require_identity())
        return dispatcher_pb2.GetTaskTraceResponse(
            spans=[trace_span_pb(span) for span in found.spans], truncated=found.truncated
        )


def trace_reader(host: ServiceHost) -> TraceReader:
    """The span file this process writes (spans not over OTLP), else where its spans go instead."""
    telemetry = host.telemetry
    if telemetry.span_file is not None:
        return TraceReader(telemetry.span_file)
    where = f"spans are exported over OTLP to {telemetry.endpoint}" if telemetry.endpoint else ""
    return TraceReader(None, where or f"spans go to: {telemetry.exporter}")


async def setup(host: ServiceHost) -> Callable[[], Awaitable[None]] | None:
    """Registers DispatcherService and WorkflowService on the host and starts this replica's worker."""
    if host.store is None:
        raise RuntimeError("dispatcher_svc needs a connected Redis store")
    clients = ServiceClients(host.settings, telemetry=host.telemetry)
    dispatcher = Dispatcher(
        settings=host.settings,
        store=host.store,
        ports=grpc_ports(clients),
        authenticator=host.authenticator,
        tracer=host.telemetry.tracer("dispatcher_svc"),
        hook=testhooks.from_env(),
        metrics=host.metrics,
        traces=trace_reader(host),
    )
    await dispatcher.start()
    host.add_servicer(
        SERVICE_NAME, dispatcher_pb2_grpc.add_DispatcherServiceServicer_to_server, DispatcherServicer(dispatcher)
    )
    workflows = await workflow_server.register(host, dispatcher)  # WorkflowService and its loop

    async def cleanup() -> None:
        await workflows.stop()
        await dispatcher.stop()
        await clients.close()

    return cleanup


SPEC = ServiceSpec(
    name="dispatcher",
    setup=setup,
    method_roles={f"/{SERVICE_NAME}/ResolveApproval": frozenset({"operator", "admin"})},
)
