"""Handoffs (issue 44): tool names, the brief's check, the guards, the config, and exactly one child
task when the parent's owner dies between creating the child and recording it (real Redis, fake services)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agentmesh.config import AgentSettings, ConfigError, Settings
from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode
from agentmesh.tool_names import mapped_name
from dispatcher_svc import handoffs
from dispatcher_svc.agents import AgentRegistry
from dispatcher_svc.model import EventKind, TaskStatus
from dispatcher_svc.tasks import TaskRecord
from tests.unit.dispatcher.conftest import OPERATOR, MakeRig
from tests.unit.dispatcher.fakes import FakeContext, Prompt, call, reply
from tool_svc.mcp.names import registry_name

BRIEF = {
    "summary": "pods restart since 09:00",
    "facts": [
        {"statement": "restarts", "value": "2259", "citation": {"message_index": 0}},
        {"statement": "cause is memory", "basis": "OOMKilled in the events"},
    ],
    "open_questions": ["which deploy?"],
}


def test_handoff_names_share_the_mcp_mapping() -> None:
    tools = handoffs.tools_for("a", [("Log.Analyst", "both", False), ("report", "transfer", False)])
    assert set(tools) == {"transfer_to_log_analyst", "ask_log_analyst", "transfer_to_report"}
    assert tools["ask_log_analyst"].mode == "ask" and tools["ask_log_analyst"].target == "Log.Analyst"
    long = "x" * 80
    name = handoffs.tools_for("a", [(long, "transfer", False)]).popitem()[0]
    assert len(name) == 64 and name == mapped_name("transfer_to", long, sep="_")
    assert registry_name("shop", "Get.Item-v2") == mapped_name("shop", "Get.Item-v2") == "shop__get_item_v2"
    assert handoffs.tools_for("a", []) == {}


def test_two_targets_mapping_to_one_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="both map to the tool transfer_to_log_analyst"):
        handoffs.tools_for("a", [("log-analyst", "transfer", False), ("log.analyst", "transfer", False)])


def test_config_shapes_and_unknown_targets(make_settings: Any) -> None:
    settings: Settings = make_settings(
        {
            "agents": [
                {"id": "a", "model": "m", "handoffs": ["b", {"to": "c", "mode": "ask"}]},
                {"id": "b", "model": "m"},
                {"id": "c", "model": "m"},
            ]
        }
    )
    agents = AgentRegistry(settings.agents)
    assert set(agents.get("a").handoff_tools) == {"transfer_to_b", "ask_c"}
    assert agents.get("b").handoff_tools == {}
    bad: Settings = make_settings({"agents": [{"id": "a", "model": "m", "handoffs": ["nobody"]}]})
    with pytest.raises(ConfigError, match="no agent 'nobody' to hand off to"):
        AgentRegistry(bad.agents)


def test_the_brief_is_checked_against_its_schema() -> None:
    assert handoffs.check_brief(json.dumps(BRIEF)) == BRIEF
    for bad in (
        "{not json",
        json.dumps({"facts": []}),  # no summary
        json.dumps({"summary": "s", "facts": [{"statement": "x"}]}),  # neither citation nor basis
        json.dumps({"summary": "s", "facts": [{"statement": "x", "basis": "b", "citation": {"ref_id": "r"}}]}),
        json.dumps({"summary": "s", "facts": [{"statement": "x", "citation": {}}]}),
        json.dumps({"summary": "s", "extra": 1}),
    ):
        err = handoffs.check_brief(bad)
        assert isinstance(err, AgentmeshError) and err.error_class is ErrorClass.CONTRACT, bad


def test_guards_depth_and_cycles() -> None:
    assert handoffs.guard(hops=["a"], to_agent="b", depth=0, limit=8) is None
    assert handoffs.guard(hops=["a", "b"], to_agent="a", depth=1, limit=8) is None  # a return is no cycle
    cycle = handoffs.guard(hops=["a", "b", "a"], to_agent="b", depth=2, limit=8)
    assert cycle is not None and cycle.code is ErrorCode.LOOP_DETECTED and "a->b->a->b" in cycle.message
    deep = handoffs.guard(hops=["a", "b"], to_agent="c", depth=2, limit=2)
    assert deep is not None and deep.code is ErrorCode.HANDOFF_DEPTH_EXCEEDED
    assert deep.error_class is ErrorClass.ENGINEERING and deep.metadata["limit"] == "2"


def test_child_ids_are_stable_per_parent_step_and_call() -> None:
    one = handoffs.child_task_id("t-1", 2, "call_x_2_0")
    assert one == handoffs.child_task_id("t-1", 2, "call_x_2_0")
    assert one != handoffs.child_task_id("t-1", 3, "call_x_2_0") != handoffs.child_task_id("t-2", 2, "call_x_2_0")
    assert len(one) <= 128


def test_what_is_taken_for_a_handoff_call() -> None:
    assert handoffs.looks_like_handoff("transfer_to_x", set())
    assert handoffs.looks_like_handoff("ask_x", set())
    assert not handoffs.looks_like_handoff("ask_x", {"ask_x"})  # a registry tool of that name
    assert not handoffs.looks_like_handoff("transfer_to_account", {"transfer_to_account"})
    assert not handoffs.looks_like_handoff("restart", set())
    err = handoffs.not_offered("transfer_to_x", list(handoffs.tools_for("a", [("b", "both", False)]).values()))
    assert err.error_class is ErrorClass.CONTRACT and "ask_b, transfer_to_b" in err.message


def relay_policy(p: Prompt) -> Any:
    """Agent a hands over to b (transfer); b answers."""
    system = p.messages[0]["content"]
    if system == "agent a":
        return reply(call("transfer_to_b", BRIEF, "h1"))
    return reply(text="b finished: " + p.messages[1]["content"].splitlines()[0])


AGENTS: list[dict[str, Any]] = [
    {
        "id": "a",
        "model": "fake/m",
        "system_prompt": "agent a",
        "handoffs": ["b"],
        "permissions": ["dev:*:*"],
        "token_budget": 5_000,
    },
    {"id": "b", "model": "fake/m", "system_prompt": "agent b", "permissions": ["dev:*:*"]},
]


async def test_a_handoff_creates_its_child_once_when_the_parents_owner_dies_after_creating_it(
    make_rig: MakeRig,
) -> None:
    paused = asyncio.Event()
    stuck: list[TaskRecord] = []

    async def hang(reached: str, record: TaskRecord) -> None:
        if reached == "after_handoff_child" and not stuck:
            stuck.append(record)
            paused.set()
            await asyncio.Event().wait()

    context = FakeContext()
    first = await make_rig(relay_policy, hook=hang, context=context, overrides={"agents": AGENTS})
    task_id = await first.start(agent_id="a", goal="triage the alert")
    await asyncio.wait_for(paused.wait(), 10)
    # "kill -9" of the parent's owner: the child exists, the parent still says RUNNING.
    for loop_task in first.dispatcher.worker._loops:
        loop_task.cancel()
    for run in list(first.dispatcher.worker._running.values()):
        run.cancel()
    await asyncio.sleep(0.05)
    tree = await first.dispatcher.tasks.tree(task_id)
    assert len(tree) == 1
    assert (await first.dispatcher.tasks.load(task_id)).status is TaskStatus.RUNNING

    second = await make_rig(relay_policy, context=context, overrides={"agents": AGENTS})
    events = await second.events(task_id)
    parent = await second.dispatcher.get_task(task_id, caller=OPERATOR)
    assert parent.status is TaskStatus.HANDED_OFF and parent.child_task_id == tree[0]
    assert await second.dispatcher.tasks.tree(task_id) == tree  # the re-run found the same child
    assert context.calls["build_handoff"] == 2  # built twice, one child (and one grant set: same child session)
    assert {hop[1] for hop in context.hops} == {tree[0]}
    child_events = await second.events(tree[0])
    child = await second.dispatcher.get_task(tree[0], caller=OPERATOR)
    assert child.status is TaskStatus.SUCCEEDED and child.answer.startswith("b finished: Handoff: pods restart")
    assert (child.parent_task_id, child.root_task_id, child.created_by) == (task_id, task_id, parent.created_by)
    assert [e.kind for e in child_events].count(EventKind.HANDOFF) == 1
    # The child spends what its parent left of the budget (a tiny one here), not its agent's own.
    child_record = await second.dispatcher.tasks.load(tree[0])
    parent_record = await second.dispatcher.tasks.load(task_id)
    assert child_record.token_budget <= 5_000 - parent_record.usage.total_tokens
    assert (child_record.depth, child_record.hops, child_record.answer_to) == (1, "a,b", "")
    assert [e.kind for e in events].count(EventKind.HANDOFF) == 1
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))


def ask_policy(p: Prompt) -> Any:
    """Agent a asks b and answers with b's answer; b answers at once."""
    if p.messages[0]["content"] == "agent a":
        results = p.tool_messages()
        return reply(text="b says " + results[-1]["content"]) if results else reply(call("ask_b", BRIEF, "h1"))
    return reply(text="42")


ASK_AGENTS: list[dict[str, Any]] = [
    {**AGENTS[0], "handoffs": [{"to": "b", "mode": "ask"}]},
    AGENTS[1],
]


async def test_the_sweeper_delivers_an_answer_whose_delivery_was_lost(
    make_rig: MakeRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child's owner died between its terminal commit and the delivery: the sweeper delivers."""
    from dispatcher_svc import handoff_answers
    from dispatcher_svc.run import exits

    async def lost(run: Any) -> None:
        return None

    monkeypatch.setattr(exits, "_answer_parent", lost)
    monkeypatch.setattr(handoff_answers, "RECHECK_MS", 0)
    rig = await make_rig(ask_policy, overrides={"agents": ASK_AGENTS}, dispatcher={"approval_sweep_interval_s": 0.1})
    task_id = await rig.start(agent_id="a", goal="what is the answer")
    events = await rig.events(task_id)
    parent = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert parent.status is TaskStatus.SUCCEEDED and parent.answer == "b says 42"
    assert TaskStatus.WAITING_CHILD in [e.status for e in events]
    answer_back = [e for e in events if e.kind == EventKind.HANDOFF and e.attributes.get("mode") == "answer"]
    assert len(answer_back) == 1 and answer_back[0].attributes["child_status"] == "SUCCEEDED"


def test_a_handoffs_task_is_bound_by_its_roots_deadline(make_settings: Any) -> None:
    from dispatcher_svc.run.state import RunState

    agent = AgentRegistry(make_settings({"agents": AGENTS}).agents).get("b")
    own = TaskRecord(task_id="h-1", agent_id="b", goal="g", status=TaskStatus.PENDING, create_time_ms=10_000)
    assert RunState.of(own, agent, task_timeout_s=60).deadline_ms == 70_000
    child = TaskRecord(
        task_id="h-2", agent_id="b", goal="g", status=TaskStatus.PENDING, create_time_ms=10_000, deadline_ms=20_000
    )
    assert RunState.of(child, agent, task_timeout_s=60).deadline_ms == 20_000


def test_a_handoff_names_an_agent_or_a_capability_and_a_capability_needs_a_carrier() -> None:
    base: dict[str, Any] = {"model": "m/m", "permissions": []}
    entry = AgentSettings(id="a", handoffs=[{"capability": "logs", "mode": "ask"}], **base)
    registry = AgentRegistry([entry, AgentSettings(id="b", capabilities=["logs"], **base)])
    [tool] = registry.get("a").handoff_tools.values()
    assert (tool.name, tool.target, tool.capability, tool.mode) == ("ask_logs", "logs", True, "ask")
    assert "an agent with capability logs" in tool.description
    with pytest.raises(ConfigError, match="no agent carries capability 'logs'"):
        AgentRegistry([entry, AgentSettings(id="b", **base)])
    for both_or_neither in ({"to": "b", "capability": "logs"}, {"mode": "ask"}):
        with pytest.raises(ValueError, match="one target"):
            AgentSettings(id="a", handoffs=[both_or_neither], **base)


def test_verify_with_names_another_verifier_whose_answer_is_a_verdict() -> None:
    base: dict[str, Any] = {"model": "m/m", "permissions": []}
    checker = AgentSettings(id="checker", role="verifier", **base)
    producer = AgentSettings(id="p", verify_with="checker", **base)
    registry = AgentRegistry([producer, checker])
    assert registry.get("p").verify_with == "checker"
    schema = registry.get("checker").output_schema
    assert schema is not None and schema["properties"]["verdict"] == {"enum": ["accepted", "rejected"]}
    assert registry.get("p").output_schema is None
    for agents in (
        [producer],  # nobody of that id
        [producer, AgentSettings(id="checker", **base)],  # not a verifier
        [AgentSettings(id="checker", role="verifier", verify_with="checker", **base)],  # itself
    ):
        with pytest.raises(ConfigError, match="verify_with: 'checker' is not another agent with role verifier"):
            AgentRegistry(agents)
    mute = AgentSettings(id="checker", role="verifier", output_schema={"type": "object"}, **base)
    with pytest.raises(ConfigError, match="output_schema has no `verdict`"):
        AgentRegistry([producer, mute])
    with pytest.raises(ValueError, match="role"):
        AgentSettings(id="x", role="judge", **base)


def test_a_verdict_is_read_from_the_verifiers_typed_output_and_a_rejection_is_contract() -> None:
    assert handoffs.verdict_of('{"verdict":"accepted"}') == handoffs.Verdict(True, ())
    assert handoffs.verdict_of('{"verdict":"rejected","reasons":["x is unsupported"]}') == handoffs.Verdict(
        False, ("x is unsupported",)
    )
    for no_verdict in ("", "accepted", "[]", '{"verdict":"maybe"}', '{"reasons":[]}'):
        assert handoffs.verdict_of(no_verdict) is None, no_verdict
    first = handoffs.rejected("checker", ["x is unsupported", " "], final=False)
    assert (first.code, first.error_class) == (ErrorCode.VERIFICATION_REJECTED, ErrorClass.CONTRACT)
    assert first.message.startswith("verifier checker rejected the handoff: x is unsupported; fix the brief")
    assert handoffs.rejected("checker", [], final=True).message.endswith("no reason given; the task fails")
    a, b = (handoffs.verify_child_id("t-1", 3, "c1", n) for n in (0, 1))
    assert a != b and a == handoffs.verify_child_id("t-1", 3, "c1", 0) != handoffs.child_task_id("t-1", 3, "c1")
