"""The WorkflowService gRPC surface (served by the dispatcher process): maps protobuf to `WorkflowRuns`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc.aio
from google.protobuf import json_format, struct_pb2

from agentmesh.answers import canonical
from agentmesh.errors import ErrorCode
from agentmesh.identity_value import require_identity
from agentmesh.rpc import codec
from agentmesh.rpc.host import ServiceHost
from agentmesh.telemetry import current_request_id
from agentmesh.v1 import workflow_pb2, workflow_pb2_grpc
from dispatcher_svc.service import Dispatcher
from dispatcher_svc.workflow_runs import RunEvent, WorkflowRuns, task_ids
from dispatcher_svc.workflow_steps import RunIdentity
from dispatcher_svc.workflows.runs import RunRecord
from dispatcher_svc.workflows.validate import Workflow

__all__ = ["SERVICE_NAME", "WorkflowServicer", "register"]

SERVICE_NAME = workflow_pb2.DESCRIPTOR.services_by_name["WorkflowService"].full_name

Context = grpc.aio.ServicerContext[Any, Any]
W = workflow_pb2

_RUN_STATUS = {
    "running": W.WORKFLOW_RUN_STATUS_RUNNING,
    "succeeded": W.WORKFLOW_RUN_STATUS_SUCCEEDED,
    "failed": W.WORKFLOW_RUN_STATUS_FAILED,
    "aborted": W.WORKFLOW_RUN_STATUS_ABORTED,
}
_NODE_STATUS = {
    "pending": W.WORKFLOW_NODE_STATUS_PENDING,
    "running": W.WORKFLOW_NODE_STATUS_RUNNING,
    "succeeded": W.WORKFLOW_NODE_STATUS_SUCCEEDED,
    "failed": W.WORKFLOW_NODE_STATUS_FAILED,
    "fell_back": W.WORKFLOW_NODE_STATUS_FELL_BACK,
    "skipped": W.WORKFLOW_NODE_STATUS_SKIPPED,
    "cancelled": W.WORKFLOW_NODE_STATUS_CANCELLED,
}


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _code_name(code: ErrorCode | str | None) -> str:
    if code is None:
        return ""
    return code.name if isinstance(code, ErrorCode) else str(code)


def run_pb(record: RunRecord) -> workflow_pb2.WorkflowRun:
    tasks = task_ids(record)
    nodes = [
        W.WorkflowNode(
            node_id=node,
            status=_NODE_STATUS[state.status.value],
            attempts=state.attempts,
            output_json=_json(state.output) if state.status.value == "succeeded" else "",
            error_code=_code_name(state.error),
            reason=state.reason,
            task_id=tasks.get(node, ""),
        )
        for node, state in record.state.nodes.items()
    ]
    pb = W.WorkflowRun(
        run_id=record.run_id,
        workflow=record.workflow,
        status=_RUN_STATUS[record.status.value],
        input_json=_json(record.input),
        nodes=nodes,
        error_code=_code_name(record.state.aborted),
        created_by=RunIdentity.from_meta(record.meta).subject,
        last_sequence=record.last_sequence,
    )
    if record.created_ms:
        pb.create_time.CopyFrom(codec.timestamp_ms(record.created_ms))
    return pb


def event_pb(run_id: str, event: RunEvent) -> workflow_pb2.WorkflowEvent:
    data = event.data
    pb = W.WorkflowEvent(run_id=run_id, sequence=event.sequence, error_code=data.get("error") or "")
    if data.get("kind") == "node":
        pb.kind = W.WORKFLOW_EVENT_KIND_NODE
        pb.node_id = str(data.get("node", ""))
        pb.item = 0 if data.get("item") is None else int(data["item"]) + 1
        pb.node_status = _NODE_STATUS.get(str(data.get("status")), W.WORKFLOW_NODE_STATUS_UNSPECIFIED)
        pb.attempt = int(data.get("attempt") or 0)
        pb.reason = str(data.get("reason") or "")
    else:
        pb.kind = W.WORKFLOW_EVENT_KIND_RUN
        pb.run_status = _RUN_STATUS.get(str(data.get("status")), W.WORKFLOW_RUN_STATUS_UNSPECIFIED)
    return pb


def workflow_pb(workflow: Workflow) -> workflow_pb2.Workflow:
    definition = workflow.definition
    data = definition.model_dump(mode="json", by_alias=True, exclude_none=True)
    pb = W.Workflow(
        name=workflow.name,
        description=definition.description,
        input_schema_json=canonical(definition.input_schema) if definition.input_schema is not None else "",
        node_ids=list(workflow.order),
        schedule_cron=definition.schedule.cron if definition.schedule is not None else "",
    )
    pb.definition.CopyFrom(json_format.ParseDict(data, struct_pb2.Struct()))
    return pb


class WorkflowServicer(workflow_pb2_grpc.WorkflowServiceServicer):
    """The WorkflowService servicer."""

    def __init__(self, runs: WorkflowRuns) -> None:
        self.runs = runs

    async def StartWorkflowRun(
        self, request: workflow_pb2.StartWorkflowRunRequest, context: Context
    ) -> workflow_pb2.StartWorkflowRunResponse:
        record = await self.runs.start_run(
            request.workflow,
            request.input_json,
            request.run_id,
            caller=require_identity(),
            request_id=current_request_id() or "",
        )
        return W.StartWorkflowRunResponse(run=run_pb(record))

    async def GetWorkflowRun(
        self, request: workflow_pb2.GetWorkflowRunRequest, context: Context
    ) -> workflow_pb2.GetWorkflowRunResponse:
        return W.GetWorkflowRunResponse(run=run_pb(await self.runs.get_run(request.run_id, caller=require_identity())))

    async def WatchWorkflowRun(
        self, request: workflow_pb2.WatchWorkflowRunRequest, context: Context
    ) -> AsyncIterator[workflow_pb2.WatchWorkflowRunResponse]:
        events = await self.runs.watch(request.run_id, request.after_sequence, caller=require_identity())
        async for event in events:
            yield W.WatchWorkflowRunResponse(event=event_pb(request.run_id, event))

    async def CancelWorkflowRun(
        self, request: workflow_pb2.CancelWorkflowRunRequest, context: Context
    ) -> workflow_pb2.CancelWorkflowRunResponse:
        record = await self.runs.cancel(request.run_id, request.reason, caller=require_identity())
        return W.CancelWorkflowRunResponse(run=run_pb(record))

    async def ListWorkflowRuns(
        self, request: workflow_pb2.ListWorkflowRunsRequest, context: Context
    ) -> workflow_pb2.ListWorkflowRunsResponse:
        found, token = await self.runs.list_runs(
            request.workflow, request.page_size, request.page_token, caller=require_identity()
        )
        return W.ListWorkflowRunsResponse(runs=[run_pb(r) for r in found], next_page_token=token)

    async def ListWorkflows(
        self, request: workflow_pb2.ListWorkflowsRequest, context: Context
    ) -> workflow_pb2.ListWorkflowsResponse:
        require_identity()
        return W.ListWorkflowsResponse(workflows=[workflow_pb(w) for w in self.runs.list_workflows()])


async def register(host: ServiceHost, dispatcher: Dispatcher) -> WorkflowRuns:
    """Serves WorkflowService on the dispatcher's host and starts this replica's workflow loop."""
    assert host.store is not None
    runs = WorkflowRuns(dispatcher, host.store, host.authenticator)
    await runs.start()
    host.add_servicer(SERVICE_NAME, workflow_pb2_grpc.add_WorkflowServiceServicer_to_server, WorkflowServicer(runs))
    return runs
