"""The scripted-model scenarios of provider_svc/scenarios (demo, crash tests, long-chain bench)."""

from __future__ import annotations

import json
import random

from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from provider_svc.models.base import Message, ModelRequest, Role, ToolCall, ToolDef
from provider_svc.scenarios import alert_chain, nonce_chain, ops_troubleshooting
from provider_svc.testing.scripted import ScriptedReply, ScriptedRequest
from tests.unit.provider.messages import tool_message

METRICS = ToolDef(
    "query_metrics",
    "metrics",
    {
        "type": "object",
        "properties": {
            "service": {"type": "string"},
            "metric": {"type": "string", "enum": ["latency_p99"]},
            "window": {"type": "string", "pattern": "^[0-9]{1,4}[smh]$", "description": "e.g. 15m"},
        },
        "required": ["service", "metric", "window"],
    },
)


def request(goal: str, *turns: tuple[str, str, str | AgentmeshError]) -> ScriptedRequest:
    """A prompt: the goal, then (tool, arguments, result text) turns."""
    messages = [Message(Role.SYSTEM, "sre"), Message(Role.USER, goal)]
    for i, (name, args, result) in enumerate(turns):
        messages.append(Message(Role.ASSISTANT, "", (ToolCall(f"c{i}", name, args),)))
        messages.append(tool_message(result, tool_call_id=f"c{i}", name=name))
    tools = (
        METRICS,
        ToolDef("query_logs"),
        ToolDef("get_deployment"),
        ToolDef("list_pods"),
        ToolDef("restart_service"),
    )
    model_request = ModelRequest(tuple(messages), tools)
    return ScriptedRequest(tuple(messages), tools, "scripted/x", model_request, len(turns), random.Random(1))


def only_call(reply: ScriptedReply) -> tuple[str, dict[str, object]]:
    [call] = reply.tool_calls
    return call.name, json.loads(call.arguments_json)


def test_ops_scenario_walks_the_story_and_reacts_to_what_it_is_shown() -> None:
    goal = "ALERT payment-svc: latency"
    logs = (
        "query_logs",
        '{"service":"payment-svc","limit":2000}',
        "ref pl_" + "a" * 64 + "\nERROR db connection pool exhausted",
    )
    assert only_call(ops_troubleshooting.policy(request(goal))) == (
        "query_logs",
        {"service": "payment-svc", "limit": 2000},
    )
    name, args = only_call(ops_troubleshooting.policy(request(goal, logs)))
    assert (name, args["window"]) == ("query_metrics", "15 minutes")
    err = AgentmeshError(
        ErrorCode.SCHEMA_INVALID,
        "bad window",
        violations=[Violation("$.window", "pattern", "^[0-9]{1,4}[smh]$", '"15 minutes"', "e.g. 15m")],
    )
    bad = ("query_metrics", json.dumps(args), (err))
    name, fixed = only_call(ops_troubleshooting.policy(request(goal, logs, bad)))
    assert (name, fixed["window"]) == ("query_metrics", "15m")  # the fix came from the hint
    good = ("query_metrics", json.dumps(fixed), '{"latency_p99_ms": 4870}')
    assert only_call(ops_troubleshooting.policy(request(goal, logs, bad, good)))[0] == "get_deployment"
    not_found = AgentmeshError(ErrorCode.UPSTREAM_NOT_FOUND, "404", fallback_tool="list_pods")
    missing = ("get_deployment", '{"service":"payment-svc"}', (not_found))
    assert only_call(ops_troubleshooting.policy(request(goal, logs, bad, good, missing)))[0] == "list_pods"
    pods = ("list_pods", '{"service":"payment-svc"}', '{"pods": []}')
    name, restart = only_call(ops_troubleshooting.policy(request(goal, logs, bad, good, missing, pods)))
    assert (name, restart["service"]) == ("restart_service", "payment-svc")
    done = ("restart_service", json.dumps(restart), '{"restarted": true}')
    answer = ops_troubleshooting.policy(request(goal, logs, bad, good, missing, pods, done))
    assert not answer.tool_calls
    assert "connection pool" in answer.text and "pl_" + "a" * 64 in answer.text and "restarted" in answer.text
    name, shell = only_call(ops_troubleshooting.policy(request("payment-svc disk is full: clean up")))
    assert name == "run_shell" and str(shell["command"]).startswith("rm -rf")


def test_nonce_chain_answers_differently_to_the_same_prompt() -> None:
    first = only_call(nonce_chain.policy(request("announce")))
    second = only_call(nonce_chain.policy(request("announce")))
    assert first[0] == second[0] == "notify"
    assert first[1]["seq"] == second[1]["seq"] == 1
    assert first[1]["nonce"] != second[1]["nonce"]
    turns = [("notify", json.dumps({"seq": i + 1, "nonce": "ab" * 8}), f"ack {i + 1}") for i in range(3)]
    assert "notify done 3 times" in nonce_chain.policy(request("announce", *turns)).text


def test_alert_chain_retries_untyped_errors_blindly_but_takes_typed_fallbacks() -> None:
    policy = alert_chain.factory(blind_retries=2)
    goal = "ALERT #1 on ledger-svc"
    logs = ("query_logs", "{}", "lines")
    metrics = ("query_metrics", "{}", '{"error_rate": 0.1}')
    untyped = ("get_deployment", '{"service":"ledger-svc"}', "Error: 404 not found")
    assert only_call(policy(request(goal, logs, metrics, untyped)))[0] == "get_deployment"
    assert only_call(policy(request(goal, logs, metrics, untyped, untyped)))[0] == "get_deployment"
    # After the retry cap it gives up on the stage and moves on.
    assert only_call(policy(request(goal, logs, metrics, untyped, untyped, untyped)))[0] == "restart_service"
    typed = (
        "get_deployment",
        "{}",
        (AgentmeshError(ErrorCode.UPSTREAM_NOT_FOUND, "404", fallback_tool="list_pods")),
    )
    assert only_call(policy(request(goal, logs, metrics, typed)))[0] == "list_pods"
