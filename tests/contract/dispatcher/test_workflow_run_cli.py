"""`agentmesh run --workflow` against a real dispatcher serving WorkflowService (fake downstream services):
a run streams its events and prints its node outputs, re-attaches by run id, and every bad input or
failed run gets its typed error and exit code (issue 46's CLI leftover)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.cli import build_parser
from agentmesh.cli.run_args import cmd_run
from agentmesh.cli.workflow_run_view import InputError, format_workflow_event, parse_input, stream_run, workflow_command
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.v1 import workflow_pb2, workflow_pb2_grpc
from tests.contract.dispatcher.conftest import MakeMesh, Mesh
from tests.contract.dispatcher.test_run_cli import settings_for
from tests.contract.dispatcher.test_workflow_grpc import CONFIG, handlers, policy

W = workflow_pb2
FAST = {"initial_backoff_s": 0.05, "max_backoff_s": 0.1, "jitter_s": 0}
FLAKY = {
    "name": "flaky",
    "nodes": [{"id": "probe", "type": "tool", "tool": "down", "arguments": {}, "retry": {"max_attempts": 2, **FAST}}],
}
TOOLS = [*CONFIG["tools"]["registry"], {"name": "down", "executor": "builtin", "builtin": "calculator"}]  # type: ignore[index]
WORKFLOWS = {**CONFIG["workflows"], "definitions": [*CONFIG["workflows"]["definitions"], FLAKY]}  # type: ignore[dict-item, index]


async def mesh_of(make_mesh: MakeMesh) -> Mesh:
    down = {"down": lambda a: AgentmeshError(ErrorCode.UPSTREAM_UNAVAILABLE, "ops api down")}
    config = {**CONFIG, "tools": {"registry": TOOLS}, "workflows": WORKFLOWS}
    return await make_mesh(policy, {**handlers(), **down}, needs_approval={"deploy"}, config=config)


async def cli(mesh: Mesh, workflow: str, *inputs: str, run_id: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(
        workflow_command, settings_for(mesh), workflow, list(inputs), run_id=run_id, out=out, err=err
    )
    return code, out.getvalue(), err.getvalue()


async def runs_of(mesh: Mesh) -> list[str]:
    service = workflow_pb2_grpc.WorkflowServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]
    listed = await service.ListWorkflowRuns(W.ListWorkflowRunsRequest(), metadata=mesh.md())
    return [r.run_id for r in listed.runs]


async def test_a_run_streams_its_events_and_prints_the_node_outputs(make_mesh: MakeMesh) -> None:
    mesh = await mesh_of(make_mesh)
    code, out, err = await cli(mesh, "support", "message=refund please", 'customer:="Ann"', run_id="cli-1")
    assert code == 0, (out, err)
    lines = out.splitlines()
    assert lines[0].startswith("workflow run cli-1 (support) started by ")
    events = [line for line in lines[1:] if line[:4].strip().isdigit()]
    assert [int(line[:4]) for line in events] == list(range(1, len(events) + 1))  # every event, once, in order
    assert any("node intent" in line and "SUCCEEDED" in line for line in events)
    assert any("node reply" in line and "SKIPPED" in line for line in events)
    assert "run" in events[-1] and "SUCCEEDED" in events[-1]
    assert "\nworkflow run cli-1 (support): SUCCEEDED\n" in out
    outputs = out.split("outputs:\n", 1)[1]
    assert '  intent: SUCCEEDED\n    {\n      "intent": "refund",\n      "order_id": "A-1001"\n    }' in outputs
    assert '"total": 350' in outputs and "  reply: SKIPPED" in outputs
    assert "trace:  agentmesh trace " in out
    assert mesh.tools.runs["lookup_order"] == 1
    # The same run id again follows that run: the same events, nothing re-run, no second run.
    again, out2, _ = await cli(mesh, "support", '{"message": "refund please"}', run_id="cli-1")
    assert again == 0 and [line for line in out2.splitlines() if line[:4].strip().isdigit()] == events
    assert mesh.tools.runs["lookup_order"] == 1 and await runs_of(mesh) == ["cli-1"]


class CtrlC(io.StringIO):
    """A terminal where the user presses Ctrl-C once the first node starts."""

    def write(self, text: str) -> int:
        if "node intent" in text:
            raise KeyboardInterrupt
        return super().write(text)


async def test_ctrl_c_detaches_and_the_run_id_follows_the_run_again(make_mesh: MakeMesh) -> None:
    mesh = await mesh_of(make_mesh)
    out, err = CtrlC(), io.StringIO()
    code = await asyncio.to_thread(
        workflow_command, settings_for(mesh), "support", ["message=refund"], run_id="cc-1", out=out, err=err
    )
    assert code == 130 and "node intent" not in out.getvalue()
    assert "the workflow run keeps running" in err.getvalue()
    assert "agentmesh run --workflow support --run-id cc-1" in err.getvalue()
    # Not cancelled: following it again sees it end, every node run once.
    again, text, _ = await cli(mesh, "support", "message=refund", run_id="cc-1")
    assert again == 0 and "(support): SUCCEEDED" in text
    assert mesh.tools.runs["lookup_order"] == 1


async def test_an_unknown_workflow_gets_the_servers_not_found(make_mesh: MakeMesh) -> None:
    mesh = await mesh_of(make_mesh)
    code, out, err = await cli(mesh, "nope")
    assert code == 2 and out == ""
    assert "agentmesh run: NOT_FOUND: " in err and "no workflow 'nope'" in err


@pytest.mark.parametrize(
    ("inputs", "words"),
    [
        (['{"message": '], "INVALID_REQUEST: --input: not JSON"),
        (["[1, 2]"], "must be a JSON object, got list"),  # not an object: not a "{", not key=value
        (["message:={oops"], "the value after := is not JSON"),
        (["message"], "expected a JSON object, @FILE, key=value or key:=JSON"),
        (["message=a", '{"message": "b"}'], "key 'message' given twice"),
        (["=x"], "empty key"),
        (["@/nonexistent/input.json"], "--input @/nonexistent/input.json: No such file"),
    ],
)  # fmt: skip
async def test_bad_input_is_refused_before_anything_starts(make_mesh: MakeMesh, inputs: list[str], words: str) -> None:
    mesh = await mesh_of(make_mesh)
    code, out, err = await cli(mesh, "support", *inputs)
    assert code == 2 and out == ""
    assert err.startswith("agentmesh run: INVALID_REQUEST: --input") and words in err, err
    assert await runs_of(mesh) == []


async def test_input_against_the_workflows_schema_is_the_servers_typed_error(make_mesh: MakeMesh) -> None:
    mesh = await mesh_of(make_mesh)
    code, _, err = await cli(mesh, "support", "customer=Ann")
    assert code == 2 and "INVALID_REQUEST: " in err and "message" in err and "input_json" in err


async def test_failed_and_aborted_runs_exit_1_with_their_typed_error(make_mesh: MakeMesh) -> None:
    mesh = await mesh_of(make_mesh)
    code, out, err = await cli(mesh, "fatal", "x:=1")
    assert code == 1, (out, err)
    assert "workflow run " in out and "(fatal): ABORTED (DANGEROUS_OPERATION)" in out
    assert "  check: FAILED (DANGEROUS_OPERATION)" in out and "  after_check: CANCELLED" in out
    code, out, err = await cli(mesh, "flaky")
    assert code == 1, (out, err)
    assert "(flaky): FAILED (probe: UPSTREAM_UNAVAILABLE)" in out
    assert any("node probe" in line and "attempt 2" in line and "FAILED" in line for line in out.splitlines())
    assert mesh.tools.runs["down"] == 2  # its retry, then the failure


def test_the_run_command_takes_a_workflow_or_an_agent_not_both(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["run", "--workflow", "support", "--input", "a=1", "b:=2", "--run-id", "r1"])
    assert (args.workflow, args.input, args.run_id, args.agent) == ("support", ["a=1", "b:=2"], "r1", None)
    cases = [
        (["run", "ops", "--workflow", "support"], "give --workflow support or an agent (ops), not both"),
        (["run", "--workflow", "support", "--approve"], "--approve: for an agent's task, not with --workflow"),
        (["run", "--workflow", " "], "--workflow: must not be empty"),
        (["run", "ops"], "give an agent and a goal"),
        (["run", "ops", "goal", "--input", "a=1"], "--input and --run-id go with --workflow"),
    ]
    for argv, words in cases:
        args = parser.parse_args(argv)
        assert cmd_run(None, [], args) == 2, argv  # type: ignore[arg-type]  # refused before settings are read
        assert f"agentmesh run: INVALID_REQUEST: {words}" in capsys.readouterr().err


def test_input_items_merge_into_one_object(tmp_path: Path) -> None:
    file = tmp_path / "in.json"
    file.write_text('{"services": ["a", "b"]}', encoding="utf-8")
    text = parse_input(["message=a=b", "n:=3", "flag:=true", f"@{file}", '{"extra": {"k": null}}', "url=x:=y"])
    assert json.loads(text) == {
        "message": "a=b", "n": 3, "flag": True, "services": ["a", "b"], "extra": {"k": None}, "url": "x:=y"
    }  # fmt: skip
    assert parse_input([]) == ""
    with pytest.raises(InputError):
        parse_input([f"@{tmp_path}"])  # a folder


def test_event_lines() -> None:
    node = W.WorkflowEvent(
        sequence=7, kind=W.WORKFLOW_EVENT_KIND_NODE, node_id="scan", item=2,
        node_status=W.WORKFLOW_NODE_STATUS_FAILED, attempt=3, error_code="UPSTREAM_TIMEOUT",
    )  # fmt: skip
    assert format_workflow_event(node) == "   7  node scan[1]              FAILED      attempt 3  UPSTREAM_TIMEOUT"
    assert format_workflow_event(node, color=True).startswith("\x1b[31;1m")
    run = W.WorkflowEvent(sequence=9, kind=W.WORKFLOW_EVENT_KIND_RUN, run_status=W.WORKFLOW_RUN_STATUS_SUCCEEDED)
    assert format_workflow_event(run) == "   9  run                       SUCCEEDED"


class BreakingWatch:
    """A WorkflowService whose first watch breaks (UNAVAILABLE) after two events, as a restarting
    dispatcher would; the resumed watch starts again from event 1 as far as the client can tell."""

    def __init__(self) -> None:
        self.afters: list[int] = []
        self.events = [
            W.WorkflowEvent(sequence=1, kind=W.WORKFLOW_EVENT_KIND_RUN, run_status=W.WORKFLOW_RUN_STATUS_RUNNING),
            W.WorkflowEvent(sequence=2, kind=W.WORKFLOW_EVENT_KIND_NODE, node_id="a", attempt=1),
            W.WorkflowEvent(sequence=3, kind=W.WORKFLOW_EVENT_KIND_NODE, node_id="b", attempt=1),
            W.WorkflowEvent(sequence=4, kind=W.WORKFLOW_EVENT_KIND_RUN, run_status=W.WORKFLOW_RUN_STATUS_FAILED),
        ]

    async def StartWorkflowRun(self, request: Any, **_: Any) -> Any:
        return W.StartWorkflowRunResponse(run=W.WorkflowRun(run_id="x-1", workflow=request.workflow))

    async def GetWorkflowRun(self, request: Any, **_: Any) -> Any:
        return W.GetWorkflowRunResponse(run=W.WorkflowRun(run_id="x-1", status=W.WORKFLOW_RUN_STATUS_FAILED))

    def WatchWorkflowRun(self, request: Any, **_: Any) -> Any:
        self.afters.append(request.after_sequence)
        first = len(self.afters) == 1

        async def stream() -> Any:
            for event in self.events if not first else self.events[:2]:
                if not first and event.sequence == 1:
                    yield W.WatchWorkflowRunResponse(event=event)  # a duplicate the client must drop
                if event.sequence > request.after_sequence:
                    yield W.WatchWorkflowRunResponse(event=event)
            if first:
                raise grpc.aio.AioRpcError(
                    grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "gone", None
                )

        return stream()


async def test_a_broken_watch_resumes_after_the_last_event_seen() -> None:
    service = BreakingWatch()
    seen: list[int] = []
    run = await stream_run(
        service,  # type: ignore[arg-type]
        W.StartWorkflowRunRequest(workflow="w"),
        (),
        on_start=lambda run: None,
        on_event=lambda event: seen.append(event.sequence),
    )
    assert service.afters == [0, 2]
    assert seen == [1, 2, 3, 4] and run.status == W.WORKFLOW_RUN_STATUS_FAILED


async def test_the_parsed_command_line_reaches_the_run(make_mesh: MakeMesh, capsys: pytest.CaptureFixture[str]) -> None:
    mesh = await mesh_of(make_mesh)
    argv = ["run", "--workflow", "support", "--input", "message=refund", "--run-id", "argv-1", "--wait", "5"]
    code = await asyncio.to_thread(cmd_run, settings_for(mesh), [], build_parser().parse_args(argv))
    captured = capsys.readouterr()
    assert code == 0, captured
    assert "workflow run argv-1 (support): SUCCEEDED" in captured.out and await runs_of(mesh) == ["argv-1"]
