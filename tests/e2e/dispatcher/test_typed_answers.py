"""Typed final answers and claims checked against the ledger (issue 41), across four service processes.

An overlay on the demo's configuration adds three scripted models and their agents:
- `typed`: an output schema; the answer comes back parsed through gRPC (Task.output_json and the
  Value `output`), Connect (JSON, an object rather than a string) and the Python client (a pydantic model);
- `typed_bad`: the scripted fault `invalid_answer` on every answer: corrected twice, then FAILED with
  OUTPUT_INVALID and the violations;
- `claimer`: the scripted fault `false_claim` (a restart it never ran, on the first answer): the claims
  check catches it, the CLAIM_CHECK event shows the verdict, and the corrected answer succeeds; and a
  restart refused by approval then claimed as done is caught, naming APPROVAL_DENIED.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import grpc.aio
import httpx
import pytest
import yaml
from google.protobuf import json_format
from pydantic import BaseModel

from agentmesh.cli.run_view import RunOutcome, stream_task
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc
from tests.e2e.conftest import REPO
from tests.e2e.dispatcher.conftest import SERVICE_ORDER, Mesh

pytestmark = pytest.mark.e2e
D = dispatcher_pb2
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "service": {"type": "string"}},
    "required": ["answer", "service"],
}


class Report(BaseModel):
    answer: str
    service: str


def _overlay(tmp: Path) -> Path:
    scripted = [
        {"name": "typed"},
        {"name": "typed-bad", "faults": {"seed": 1, "invalid_answer": 1.0, "on_corrections": True}},
        {"name": "claimer", "faults": {"seed": 1, "false_claim": 1.0}},
    ]
    config = {
        "providers": {"backends": [{"name": "scripted", "type": "scripted", "models": scripted}]},
        "agents": [
            {"id": "typed", "model": "scripted/typed", "tools": ["calculator"], "permissions": ["*:builtin.*:read"],
             "output_schema": SCHEMA},
            {"id": "typed_bad", "model": "scripted/typed-bad", "tools": ["calculator"],
             "permissions": ["*:builtin.*:read"], "output_schema": SCHEMA},
            {"id": "claimer", "model": "scripted/claimer", "tools": ["list_pods", "restart_service"],
             "permissions": ["*:ops.*:write"], "max_steps": 8},
        ],
    }  # fmt: skip
    path = tmp / "typed.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def _run(mesh: Mesh, agent: str, goal: str, *, approve: bool | None = None, **start: Any) -> RunOutcome:
    async with grpc.aio.insecure_channel(mesh.target("dispatcher")) as channel:

        def decide(event: D.TaskEvent) -> tuple[bool, str] | None:
            return None if approve is None else (approve, "e2e")

        return await stream_task(
            channel,
            D.StartTaskRequest(agent_id=agent, goal=goal, **start),
            mesh.operator_metadata(),
            decide=decide,
            on_event=lambda event: None,
            timeout_s=60,
            approver=mesh.operator_metadata("bob"),
        )


async def _get(mesh: Mesh, task_id: str) -> D.Task:
    async with grpc.aio.insecure_channel(mesh.target("dispatcher")) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        reply: D.GetTaskResponse = await stub.GetTask(
            D.GetTaskRequest(task_id=task_id), metadata=mesh.operator_metadata()
        )
        return reply.task


def of_kind(outcome: RunOutcome, kind: int) -> list[D.TaskEvent]:
    return [e for e in outcome.events if e.kind == kind]


async def test_typed_answers_and_claims_across_processes(mesh_env: Mesh, tmp_path: Path) -> None:
    mesh_env.env["AGENTMESH_CONFIG"] = os.pathsep.join([mesh_env.env["AGENTMESH_CONFIG"], str(_overlay(tmp_path))])
    for name in SERVICE_ORDER:
        await asyncio.to_thread(mesh_env.start, name)

    # gRPC: a parsed object, as JSON text and as a Value; the ANSWER event carries it too.
    typed = await _run(mesh_env, "typed", "report on payment-svc")
    assert typed.status == D.TASK_STATUS_SUCCEEDED, [e.message for e in typed.events]
    task = await _get(mesh_env, typed.task_id)
    output = json.loads(task.output_json)
    assert set(output) >= {"answer", "service"} and json_format.MessageToDict(task.output) == output
    (answer,) = of_kind(typed, D.TASK_EVENT_KIND_ANSWER)
    assert json.loads(answer.output_json) == output

    # Connect: the answer is a JSON object in the task, not a string.
    base = f"http://127.0.0.1:{mesh_env.http_ports['dispatcher']}"
    token = mesh_env.operator_metadata()[0][1]
    async with httpx.AsyncClient(base_url=base, headers={"authorization": f"Bearer {token}"}) as http:
        got = await http.post("/agentmesh.v1.DispatcherService/GetTask", json={"taskId": typed.task_id})
    assert got.status_code == 200, got.text
    assert got.json()["task"]["output"] == output

    # The Python client: a task schema from a pydantic model, the output as that model.
    from agentmesh_client import Client

    def client_run() -> Any:
        with Client(mesh_env.target("dispatcher"), token=token) as client:
            run = client.run("assistant", "report on checkout-svc", output_type=Report)
            return run.result(), run.output

    result, streamed = await asyncio.to_thread(client_run)
    assert result.status == "SUCCEEDED" and isinstance(result.output, Report) and isinstance(streamed, Report)
    assert json.loads(result.output_json) == result.output.model_dump()

    # The CLI prints the typed answer as JSON.
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentmesh.cli", "run", "typed", "report on payment-svc", "--wait", "0",
        env=mesh_env.env, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(cli.communicate(), 60)
    assert cli.returncode == 0, (out, err)
    printed = out.decode().split("\noutput:\n", 1)[1].split("\nsession:", 1)[0]
    assert set(json.loads(printed)) >= {"answer", "service"}

    # An answer that keeps breaking the schema: two corrections with violations, then OUTPUT_INVALID.
    bad = await _run(mesh_env, "typed_bad", "report on payment-svc")
    assert bad.status == D.TASK_STATUS_FAILED
    fixes = of_kind(bad, D.TASK_EVENT_KIND_CORRECTION)
    assert len(fixes) == 2 and all(f.error.code == common_pb2.ERROR_CODE_OUTPUT_INVALID for f in fixes)
    assert fixes[0].error.violations[0].path == "$" and fixes[0].error.violations[0].rule == "type"
    failed = await _get(mesh_env, bad.task_id)
    assert (
        failed.error.code == common_pb2.ERROR_CODE_OUTPUT_INVALID and failed.error.metadata["reason"] == "final_answer"
    )

    # The scripted fault claims a restart that never ran: caught, corrected, verdict in the events.
    claimed = await _run(mesh_env, "claimer", "list the pods of payment-svc")
    assert claimed.status == D.TASK_STATUS_SUCCEEDED, [e.message for e in claimed.events]
    assert [e.tool_call.name for e in of_kind(claimed, D.TASK_EVENT_KIND_TOOL_CALL)] == ["list_pods"]
    (check, *later) = of_kind(claimed, D.TASK_EVENT_KIND_CLAIM_CHECK)
    assert check.attributes["verdict"] == "unsupported" and not later
    assert "no restart_service call succeeded" in check.attributes["gap"]
    (fix,) = of_kind(claimed, D.TASK_EVENT_KIND_CORRECTION)
    assert fix.error.code == common_pb2.ERROR_CODE_CLAIM_UNSUPPORTED
    assert "restarted" not in (await _get(mesh_env, claimed.task_id)).answer

    # A restart refused by approval, then claimed as done: caught, naming the refusal.
    refused = await _run(mesh_env, "claimer", "restart payment-svc", approve=False)
    names = [e.tool_call.name for e in of_kind(refused, D.TASK_EVENT_KIND_TOOL_CALL)]
    assert "restart_service" in names, [e.message for e in refused.events]
    (check,) = of_kind(refused, D.TASK_EVENT_KIND_CLAIM_CHECK)
    assert check.attributes["verdict"] == "unsupported"
    assert "was refused: APPROVAL_DENIED" in check.attributes["gap"]
    assert refused.status == D.TASK_STATUS_SUCCEEDED
