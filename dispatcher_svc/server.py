"""dispatcher_svc's gRPC surface: maps protobuf to the dispatcher domain and back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc.aio
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentmesh.auth import require_identity
from agentmesh.client import ServiceClients
from agentmesh.errors import AgentmeshError
from agentmesh.rpcstatus import abort
from agentmesh.server import ServiceHost, ServiceSpec
from agentmesh.telemetry import current_request_id
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from dispatcher_svc import convert, testhooks
from dispatcher_svc.adapters import grpc_ports
from dispatcher_svc.service import Dispatcher

SERVICE_NAME = dispatcher_pb2.DESCRIPTOR.services_by_name["DispatcherService"].full_name

Context = grpc.aio.ServicerContext[Any, Any]


def _traceparent() -> str:
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent", "")


class DispatcherServicer(dispatcher_pb2_grpc.DispatcherServiceServicer):
    """The DispatcherService servicer."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    async def _start(self, request: dispatcher_pb2.StartTaskRequest) -> dispatcher_pb2.Task:
        task = await self.dispatcher.start_task(
            convert.start_request(request), request_id=current_request_id() or "", traceparent=_traceparent()
        )
        return convert.task_pb(task)

    async def StartTask(
        self, request: dispatcher_pb2.StartTaskRequest, context: Context
    ) -> dispatcher_pb2.StartTaskResponse:
        try:
            return dispatcher_pb2.StartTaskResponse(task=await self._start(request))
        except AgentmeshError as err:
            await abort(context, err)

    async def RunTask(
        self, request: dispatcher_pb2.RunTaskRequest, context: Context
    ) -> AsyncIterator[dispatcher_pb2.RunTaskResponse]:
        try:
            task = await self._start(request.start)
            async for event in self.dispatcher.watch(task.task_id, 0):
                yield dispatcher_pb2.RunTaskResponse(event=convert.event_pb(event))
        except AgentmeshError as err:
            await abort(context, err)

    async def GetTask(self, request: dispatcher_pb2.GetTaskRequest, context: Context) -> dispatcher_pb2.GetTaskResponse:
        try:
            return dispatcher_pb2.GetTaskResponse(task=convert.task_pb(await self.dispatcher.get_task(request.task_id)))
        except AgentmeshError as err:
            await abort(context, err)

    async def WatchTask(
        self, request: dispatcher_pb2.WatchTaskRequest, context: Context
    ) -> AsyncIterator[dispatcher_pb2.WatchTaskResponse]:
        try:
            async for event in self.dispatcher.watch(request.task_id, request.after_sequence):
                yield dispatcher_pb2.WatchTaskResponse(event=convert.event_pb(event))
        except AgentmeshError as err:
            await abort(context, err)

    async def CancelTask(
        self, request: dispatcher_pb2.CancelTaskRequest, context: Context
    ) -> dispatcher_pb2.CancelTaskResponse:
        try:
            task = await self.dispatcher.cancel(request.task_id, request.reason)
            return dispatcher_pb2.CancelTaskResponse(task=convert.task_pb(task))
        except AgentmeshError as err:
            await abort(context, err)

    async def ResolveApproval(
        self, request: dispatcher_pb2.DispatcherServiceResolveApprovalRequest, context: Context
    ) -> dispatcher_pb2.DispatcherServiceResolveApprovalResponse:
        try:
            approval, task = await self.dispatcher.resolve_approval(
                request.task_id,
                request.approval_id,
                approve=request.approve,
                reason=request.reason,
                arguments_sha256=request.arguments_sha256,
                resolver=require_identity().subject,
            )
            return dispatcher_pb2.DispatcherServiceResolveApprovalResponse(
                approval=convert.approval_pb(approval), task=convert.task_pb(task)
            )
        except AgentmeshError as err:
            await abort(context, err)

    async def ListAgents(
        self, request: dispatcher_pb2.ListAgentsRequest, context: Context
    ) -> dispatcher_pb2.ListAgentsResponse:
        return dispatcher_pb2.ListAgentsResponse(
            agents=[convert.agent_pb(agent) for agent in self.dispatcher.list_agents()]
        )


async def setup(host: ServiceHost) -> Callable[[], Awaitable[None]] | None:
    """Registers DispatcherService on the host and starts this replica's worker."""
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
    )
    await dispatcher.start()
    host.add_servicer(
        SERVICE_NAME, dispatcher_pb2_grpc.add_DispatcherServiceServicer_to_server, DispatcherServicer(dispatcher)
    )

    async def cleanup() -> None:
        await dispatcher.stop()
        await clients.close()

    return cleanup


SPEC = ServiceSpec(
    name="dispatcher",
    setup=setup,
    method_roles={f"/{SERVICE_NAME}/ResolveApproval": frozenset({"operator", "admin"})},
)
