"""`agentmesh run --workflow NAME [--input ...]`: start a workflow run and stream its events.

The workflow twin of `agentmesh run AGENT GOAL` (run_view): StartWorkflowRun, then WatchWorkflowRun,
resumed with after_sequence when the stream breaks, so no event is shown twice or missed; one line per
event; at the end GetWorkflowRun and each node's output. Exit code as for tasks: 0 SUCCEEDED, 1 any other
end (FAILED, ABORTED: FATAL or cancelled), 2 bad request (local or the server's typed error), 3 the
dispatcher cannot be reached, 130 Ctrl-C, which detaches: the run goes on (it outlives this stream) and
`--run-id` re-attaches to it.

`--input` takes a JSON object, `@FILE` holding one, or `key=value` (a string) / `key:=JSON` (any JSON
value) items, merged into one object; anything else is INVALID_REQUEST before anything is sent.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import grpc
import grpc.aio

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.run_view import operator_token, report_refusal
from agentmesh.cli.tracing import CommandTrace, cli_channel, command_trace
from agentmesh.config import Settings
from agentmesh.errors import ErrorCode
from agentmesh.v1 import workflow_pb2, workflow_pb2_grpc

W = workflow_pb2
_RECONNECTS = 5
_COLOR = {
    W.WORKFLOW_NODE_STATUS_SUCCEEDED: "32",
    W.WORKFLOW_NODE_STATUS_FAILED: "31;1",
    W.WORKFLOW_NODE_STATUS_FELL_BACK: "35",  # magenta: ENGINEERING, as a task's FALLBACK
    W.WORKFLOW_NODE_STATUS_CANCELLED: "31",
}
_RUN_COLOR = {
    W.WORKFLOW_RUN_STATUS_SUCCEEDED: "32;1",
    W.WORKFLOW_RUN_STATUS_FAILED: "31;1",
    W.WORKFLOW_RUN_STATUS_ABORTED: "31;1",
}


class InputError(ValueError):
    """A bad `--input`: the message names the item and what is wrong."""


def run_status_name(status: int) -> str:
    return W.WorkflowRunStatus.Name(status).removeprefix("WORKFLOW_RUN_STATUS_")


def node_status_name(status: int) -> str:
    return W.WorkflowNodeStatus.Name(status).removeprefix("WORKFLOW_NODE_STATUS_")


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{where}: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InputError(f"{where}: must be a JSON object, got {type(value).__name__}")
    return value


def parse_input(items: Sequence[str]) -> str:
    """The run's input as JSON text from the `--input` items ("" for none); InputError on a bad one."""
    merged: dict[str, Any] = {}

    def put(key: str, value: Any, item: str) -> None:
        if key in merged:
            raise InputError(f"--input {item!r}: key {key!r} given twice")
        merged[key] = value

    for item in items:
        if item.lstrip().startswith(("{", "[")):  # JSON (an array is refused by name)
            for key, value in _json_object(item, "--input").items():
                put(key, value, item)
        elif item.startswith("@"):
            try:
                text = Path(item[1:]).read_text(encoding="utf-8")
            except OSError as exc:
                raise InputError(f"--input {item}: {exc.strerror or exc}") from None
            for key, value in _json_object(text, f"--input {item}").items():
                put(key, value, item)
        elif ":=" in item and item.find(":=") + 1 == item.find("="):  # the first = belongs to :=
            key, raw = item.split(":=", 1)
            try:
                value = json.loads(raw)
            except ValueError as exc:
                raise InputError(f"--input {item!r}: the value after := is not JSON: {exc}") from None
            put(_key(key, item), value, item)
        elif "=" in item:
            key, value = item.split("=", 1)
            put(_key(key, item), value, item)
        else:
            raise InputError(f"--input {item!r}: expected a JSON object, @FILE, key=value or key:=JSON")
    return json.dumps(merged, ensure_ascii=False) if items else ""


def _key(key: str, item: str) -> str:
    if not key.strip():
        raise InputError(f"--input {item!r}: empty key")
    return key


def format_workflow_event(event: workflow_pb2.WorkflowEvent, *, color: bool = False) -> str:
    """One line for one event: sequence, what (the run, or a node and item), status, attempt, error."""
    if event.kind == W.WORKFLOW_EVENT_KIND_RUN:
        what, status, code = "run", run_status_name(event.run_status), _RUN_COLOR.get(event.run_status)
    else:
        what = f"node {event.node_id}" + (f"[{event.item - 1}]" if event.item else "")
        status, code = node_status_name(event.node_status), _COLOR.get(event.node_status)
    details = [f"attempt {event.attempt}"] if event.attempt else []
    details += [d for d in (event.error_code, " ".join(event.reason.split())) if d]
    text = f"{event.sequence:>4}  {what:<24}  {status:<10}  {'  '.join(details)}".rstrip()
    return f"\x1b[{code}m{text}\x1b[0m" if color and code else text


def _ended(event: workflow_pb2.WorkflowEvent) -> bool:
    return event.kind == W.WORKFLOW_EVENT_KIND_RUN and event.run_status not in (
        W.WORKFLOW_RUN_STATUS_UNSPECIFIED,
        W.WORKFLOW_RUN_STATUS_RUNNING,
    )


async def stream_run(
    stub: workflow_pb2_grpc.WorkflowServiceStub,
    start: workflow_pb2.StartWorkflowRunRequest,
    metadata: tuple[tuple[str, str], ...],
    *,
    on_start: Callable[[workflow_pb2.WorkflowRun], None],
    on_event: Callable[[workflow_pb2.WorkflowEvent], None],
) -> workflow_pb2.WorkflowRun:
    """StartWorkflowRun, then its events until it ends (a broken stream resumes after the last one seen),
    then the run as GetWorkflowRun reads it."""
    run = (await stub.StartWorkflowRun(start, metadata=metadata, timeout=30)).run
    on_start(run)
    last = 0
    reconnects = 0
    while True:
        request = W.WatchWorkflowRunRequest(run_id=run.run_id, after_sequence=last)
        events: AsyncIterator[Any] = stub.WatchWorkflowRun(request, metadata=metadata)
        try:
            async for reply in events:
                event = reply.event
                if event.sequence <= last:
                    continue
                last = event.sequence
                on_event(event)
                if _ended(event):
                    break
            break
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE and reconnects < _RECONNECTS:
                reconnects += 1
                await asyncio.sleep(min(2.0, 0.2 * 2**reconnects))
                continue
            raise
    got = await stub.GetWorkflowRun(W.GetWorkflowRunRequest(run_id=run.run_id), metadata=metadata, timeout=10)
    final: workflow_pb2.WorkflowRun = got.run
    return final


def _failure(run: workflow_pb2.WorkflowRun) -> str:
    """Why the run did not succeed, typed: the abort's error code, else each failed node's."""
    if run.error_code:
        return run.error_code
    failed = [n for n in run.nodes if n.status == W.WORKFLOW_NODE_STATUS_FAILED]
    return ", ".join(f"{n.node_id}: {n.error_code or 'FAILED'}" for n in failed)


def write_outcome(out: TextIO, run: workflow_pb2.WorkflowRun) -> None:
    """The run's end: its status with the typed error, then each node's status and output."""
    out.write(f"\nworkflow run {run.run_id} ({run.workflow}): {run_status_name(run.status)}")
    why = _failure(run) if run.status != W.WORKFLOW_RUN_STATUS_SUCCEEDED else ""
    out.write(f" ({why})\n" if why else "\n")
    out.write("outputs:\n")
    for node in run.nodes:
        line = f"  {node.node_id}: {node_status_name(node.status)}"
        if node.error_code:
            line += f" ({node.error_code})"
        if node.reason:
            line += f" ({' '.join(node.reason.split())})"
        if node.output_json:
            # One value, indented under its node: what a script or a person reads.
            shown = json.dumps(json.loads(node.output_json), ensure_ascii=False, indent=2)
            line += "\n" + "\n".join("    " + row for row in shown.splitlines())
        out.write(line + "\n")


def workflow_command(
    settings: Settings,
    workflow: str,
    inputs: Sequence[str] = (),
    *,
    run_id: str = "",
    token: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`agentmesh run --workflow NAME`: 0 when the run SUCCEEDED."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        input_json = parse_input(inputs)
    except InputError as exc:
        err.write(f"agentmesh run: {ErrorCode.INVALID_REQUEST.name}: {exc}\n")
        return 2
    token = token or operator_token(settings)
    metadata = ((IDENTITY_HEADER, token),) if token else ()
    color = out.isatty()
    started_ms = time.time() * 1000
    started: list[workflow_pb2.WorkflowRun] = []

    def on_start(run: workflow_pb2.WorkflowRun) -> None:
        started.append(run)
        out.write(f"workflow run {run.run_id} ({run.workflow}) started by {run.created_by or 'you'}\n")
        out.flush()

    def on_event(event: workflow_pb2.WorkflowEvent) -> None:
        out.write(format_workflow_event(event, color=color) + "\n")
        out.flush()

    async def main(command: CommandTrace) -> workflow_pb2.WorkflowRun:
        target = settings.services.endpoint("dispatcher").dial_target
        # Every call of this command is one request in one trace: the run's (agentmesh.cli.tracing).
        async with cli_channel(target, settings, command) as channel:
            stub = workflow_pb2_grpc.WorkflowServiceStub(channel)  # type: ignore[no-untyped-call]
            start = W.StartWorkflowRunRequest(workflow=workflow, input_json=input_json, run_id=run_id)
            return await stream_run(stub, start, metadata, on_start=on_start, on_event=on_event)

    try:
        with command_trace(settings, "run") as command:
            command.span.set_attribute("agentmesh.workflow", workflow)
            run = asyncio.run(main(command))
    except grpc.aio.AioRpcError as exc:
        return report_refusal(exc, err)
    except KeyboardInterrupt:
        if not started:
            err.write("interrupted before the run was started\n")
            return 130
        again = f"agentmesh run --workflow {workflow} --run-id {started[0].run_id}"
        err.write(f"interrupted; the workflow run keeps running (it outlives this stream); follow it: {again}\n")
        return 130
    write_outcome(out, run)
    # A run started by this command carries its request id: the run's one trace.
    if not run_id or run.create_time.ToMilliseconds() >= started_ms - 2000:
        out.write(f"trace:  agentmesh trace {command.request_id}\n")
    return 0 if run.status == W.WORKFLOW_RUN_STATUS_SUCCEEDED else 1
