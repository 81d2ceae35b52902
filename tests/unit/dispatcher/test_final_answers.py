"""Typed final answers and claims checked against the ledger (issue 41), through the loop on fakes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentmesh.chat import ANSWER_CORRECTION_PREFIX
from agentmesh.errors import AgentmeshError, ErrorCode
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from tests.unit.dispatcher.conftest import APPROVER, OPERATOR, MakeRig
from tests.unit.dispatcher.fakes import FakeTools, Prompt, call, reply

REPORT: dict[str, Any] = {
    "type": "object",
    "properties": {"service": {"type": "string"}, "healthy": {"type": "boolean"}},
    "required": ["service", "healthy"],
}


def corrections(p: Prompt) -> int:
    return sum(1 for m in p.messages if m["role"] == "user" and m["content"].startswith(ANSWER_CORRECTION_PREFIX))


def of_kind(events: list[TaskEvent], kind: EventKind) -> list[TaskEvent]:
    return [e for e in events if e.kind == kind]


async def test_a_typed_answer_is_parsed_and_kept(make_rig: MakeRig) -> None:
    rig = await make_rig(
        lambda p: reply(text='{"service": "payment-svc", "healthy": true}'), agent={"output_schema": REPORT}
    )
    task_id = await rig.start()
    events = await rig.events(task_id)
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.SUCCEEDED
    assert json.loads(task.output_json) == {"service": "payment-svc", "healthy": True}
    assert task.answer == "service: payment-svc\nhealthy: true"
    assert json.loads(task.output_schema_json) == REPORT
    (answer,) = of_kind(events, EventKind.ANSWER)
    assert json.loads(answer.output_json) == {"service": "payment-svc", "healthy": True}
    # Provider-native structured output is asked for with the schema.
    assert json.loads(rig.provider.schemas[0]) == REPORT


async def test_free_text_answers_have_no_output(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="all good"))
    task_id = await rig.start()
    await rig.events(task_id)
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert (task.answer, task.output_json, task.output_schema_json) == ("all good", "", "")
    assert rig.provider.schemas == [""]


async def test_an_invalid_answer_is_corrected_with_violations(make_rig: MakeRig) -> None:
    def policy(p: Prompt):
        return reply(text='{"service": 3}' if not corrections(p) else '{"service": "a", "healthy": false}')

    rig = await make_rig(policy, agent={"output_schema": REPORT})
    task_id = await rig.start()
    events = await rig.events(task_id)
    (fix,) = of_kind(events, EventKind.CORRECTION)
    assert fix.error is not None and fix.error.code == ErrorCode.OUTPUT_INVALID
    assert {(v.path, v.rule) for v in fix.error.violations} == {("$.healthy", "required"), ("$.service", "type")}
    assert "correction 1 of 2" in fix.message
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.SUCCEEDED and json.loads(task.output_json)["healthy"] is False
    # The session holds the rejected answer and the correction the model read, in order.
    log = rig.context.sessions[task_id]
    assert [m["role"] for m in log] == ["user", "assistant", "user", "assistant"]
    assert log[2]["content"].startswith(ANSWER_CORRECTION_PREFIX) and "$.healthy required" in log[2]["content"]


async def test_an_answer_still_invalid_after_two_corrections_fails_typed(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="it is fine"), agent={"output_schema": REPORT})
    task_id = await rig.start()
    events = await rig.events(task_id)
    assert len(of_kind(events, EventKind.CORRECTION)) == 2
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.FAILED and task.error is not None
    assert task.error.code == ErrorCode.OUTPUT_INVALID and task.error.metadata["reason"] == "final_answer"
    assert task.error.violations[0].rule == "json"
    assert rig.provider.calls == 3


async def test_a_task_schema_narrows_the_agents(make_rig: MakeRig) -> None:
    narrower = {"type": "object", "properties": {"service": {"enum": ["payment-svc"]}}}
    answers = iter(['{"service": "other", "healthy": true}', '{"service": "payment-svc", "healthy": true}'])
    rig = await make_rig(lambda p: reply(text=next(answers)), agent={"output_schema": REPORT})
    task_id = await rig.start(output_schema_json=json.dumps(narrower))
    events = await rig.events(task_id)
    (fix,) = of_kind(events, EventKind.CORRECTION)
    assert fix.error is not None and fix.error.violations[0].path == "$.service"
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.SUCCEEDED
    assert json.loads(task.output_schema_json) == {"allOf": [REPORT, narrower]}


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ('{"type": "array"}', "may only narrow"),
        ("{not json", "is not JSON"),
        ('{"type": "object", "properties": {"a": {"pattern": "x"}}}', "regexes are refused"),
    ],
)
async def test_a_bad_task_schema_is_invalid_request(make_rig: MakeRig, schema: str, reason: str) -> None:
    rig = await make_rig(lambda p: reply(text="{}"), agent={"output_schema": REPORT})
    with pytest.raises(AgentmeshError) as caught:
        await rig.start(output_schema_json=schema)
    assert caught.value.code == ErrorCode.INVALID_REQUEST and reason in caught.value.message
    assert caught.value.violations[0].path == "output_schema_json"


async def test_a_task_schema_without_an_agent_schema(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text='{"n": 4}'))
    task_id = await rig.start(output_schema_json='{"type": "object", "required": ["n"]}')
    await rig.events(task_id)
    assert json.loads((await rig.dispatcher.get_task(task_id, caller=OPERATOR)).output_json) == {"n": 4}


async def test_a_false_claim_is_corrected_with_the_gap(make_rig: MakeRig) -> None:
    def policy(p: Prompt):
        if not corrections(p):
            return reply(text="I restarted the pod and it is healthy now.")
        return reply(text="I did not restart the pod: no restart ran. It is still degraded.")

    tools = FakeTools({"restart_pod": lambda c: "ok", "get_pod": lambda c: "{}"}, writes={"restart_pod"})
    rig = await make_rig(policy, tools)
    task_id = await rig.start()
    events = await rig.events(task_id)
    (check,) = of_kind(events, EventKind.CLAIM_CHECK)
    assert check.attributes["verdict"] == "unsupported" and check.attributes["mode"] == "check"
    assert "no restart_pod call succeeded" in check.attributes["gap"]
    (fix,) = of_kind(events, EventKind.CORRECTION)
    assert fix.error is not None and fix.error.code == ErrorCode.CLAIM_UNSUPPORTED
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.SUCCEEDED and "did not restart" in task.answer
    assert "it was never called" in rig.context.sessions[task_id][2]["content"]


async def test_a_second_false_claim_fails_the_task(make_rig: MakeRig) -> None:
    tools = FakeTools({"restart_pod": lambda c: "ok"}, writes={"restart_pod"})
    rig = await make_rig(lambda p: reply(text="Pod 已重启成功。"), tools)
    task_id = await rig.start()
    events = await rig.events(task_id)
    assert [e.attributes["verdict"] for e in of_kind(events, EventKind.CLAIM_CHECK)] == ["unsupported", "unsupported"]
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.FAILED and task.error is not None
    assert task.error.code == ErrorCode.CLAIM_UNSUPPORTED and "restart_pod" in task.error.metadata["gap"]


async def test_a_write_refused_by_approval_then_claimed_is_caught(make_rig: MakeRig) -> None:
    def policy(p: Prompt):
        if not p.tool_messages():
            return reply(call("restart_pod", {"pod": "payment-7f9c"}, "c1"))
        if not corrections(p):
            return reply(text="The pod payment-7f9c was restarted successfully.")
        return reply(text="The restart of payment-7f9c was denied; nothing was changed.")

    tools = FakeTools({"restart_pod": lambda c: "restarted"}, needs_approval={"restart_pod"})
    rig = await make_rig(policy, tools)
    task_id = await rig.start()
    async for event in rig.dispatcher.watch(task_id, caller=OPERATOR):
        if event.status == TaskStatus.WAITING_APPROVAL:
            break
    pending = (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).pending_approval
    assert pending is not None
    await rig.dispatcher.resolve_approval(
        task_id, pending.approval_id, approve=False, reason="not now", arguments_sha256="", caller=APPROVER
    )
    events = await rig.events(task_id)
    (check,) = of_kind(events, EventKind.CLAIM_CHECK)
    assert "no restart_pod call succeeded" in check.attributes["gap"]
    assert "was refused: APPROVAL_DENIED" in check.attributes["gap"]
    assert tools.runs["restart_pod"] == 0
    assert (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).status == TaskStatus.SUCCEEDED


async def test_a_claim_backed_by_the_ledger_passes(make_rig: MakeRig) -> None:
    def policy(p: Prompt):
        if not p.tool_messages():
            return reply(call("restart_pod", {"pod": "a"}, "c1"))
        return reply(text="I restarted the pod.")

    tools = FakeTools({"restart_pod": lambda c: "restarted"}, writes={"restart_pod"})
    rig = await make_rig(policy, tools)
    task_id = await rig.start()
    events = await rig.events(task_id)
    (check,) = of_kind(events, EventKind.CLAIM_CHECK)
    assert check.attributes["verdict"] == "supported" and not of_kind(events, EventKind.CORRECTION)


@pytest.mark.parametrize(("mode", "verdicts"), [("warn", ["warned"]), ("off", [])])
async def test_claims_warn_and_off(make_rig: MakeRig, mode: str, verdicts: list[str]) -> None:
    tools = FakeTools({"restart_pod": lambda c: "ok"}, writes={"restart_pod"})
    rig = await make_rig(lambda p: reply(text="I restarted the pod."), tools, agent={"claims": mode})
    task_id = await rig.start()
    events = await rig.events(task_id)
    assert [e.attributes["verdict"] for e in of_kind(events, EventKind.CLAIM_CHECK)] == verdicts
    assert (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).status == TaskStatus.SUCCEEDED


async def test_cited_actions_are_verified(make_rig: MakeRig) -> None:
    schema = {**REPORT, "x-agentmesh-actions": True}

    def policy(p: Prompt):
        if not p.tool_messages():
            return reply(call("restart_pod", {"pod": "a"}, "c1"))
        # The call's id as the session names it (the loop qualifies ids per task and step).
        real = next(m for m in p.messages if m["role"] == "assistant" and m["tool_calls"])["tool_calls"][0].id
        cited = "call_made_up" if not corrections(p) else real
        return reply(
            text=json.dumps(
                {"service": "a", "healthy": True, "actions": [{"tool": "restart_pod", "tool_call_id": cited}]}
            )
        )

    tools = FakeTools({"restart_pod": lambda c: "restarted"}, writes={"restart_pod"})
    rig = await make_rig(policy, tools, agent={"output_schema": schema})
    task_id = await rig.start()
    events = await rig.events(task_id)
    assert [e.attributes["verdict"] for e in of_kind(events, EventKind.CLAIM_CHECK)] == ["unsupported", "supported"]
    assert (
        "'call_made_up', which is no tool call of this task"
        in of_kind(events, EventKind.CLAIM_CHECK)[0].attributes["gap"]
    )
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.SUCCEEDED and json.loads(task.output_json)["actions"][0]["tool"] == "restart_pod"
    # The runtime added the actions field to the schema the provider was asked for.
    assert "actions" in json.loads(rig.provider.schemas[0])["properties"]


def test_the_protobuf_mapping_carries_the_typed_answer() -> None:
    # server.py: the answer as JSON text and as a Value (Connect shows an object); ListAgents shows the schema.
    from google.protobuf import json_format

    from agentmesh.config import AgentSettings
    from dispatcher_svc.agents import AgentRegistry
    from dispatcher_svc.model import Task, TaskEvent
    from dispatcher_svc.server import agent_pb, event_pb, task_pb

    agent = AgentRegistry([AgentSettings(id="typed", output_schema=REPORT)]).get("typed")
    assert json.loads(agent_pb(agent).output_schema_json) == REPORT
    task = task_pb(
        Task(
            "t",
            "typed",
            "g",
            TaskStatus.SUCCEEDED,
            output_json='{"service": "a", "healthy": true}',
            output_schema_json="{}",
        )
    )
    assert json_format.MessageToDict(task.output) == {"service": "a", "healthy": True}
    assert json.loads(json_format.MessageToJson(task))["output"] == {"service": "a", "healthy": True}
    assert not task_pb(Task("t", "typed", "g", TaskStatus.SUCCEEDED)).HasField("output")
    event = event_pb(TaskEvent("t", 5, EventKind.ANSWER, 0, output_json="[1, 2]"))
    assert event.output_json == "[1, 2]" and json.loads(json_format.MessageToJson(event.output)) == [1, 2]
