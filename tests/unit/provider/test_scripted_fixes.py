"""The scripted model's corrections against the errors tool_svc really sends, and its argument synthesis.

Integration defects these pin down: an UNKNOWN_TOOL fix that added a "name" argument instead of
renaming the call, an extra property it could not remove, and a calculator called with the
schema's example instead of the goal's arithmetic. Each made the scripted model repeat a call until
the dispatcher's LOOP_DETECTED guard aborted the task (or answer the wrong question).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from agentmesh.config import ToolsSettings
from agentmesh.errors import AgentmeshError, ErrorCode, Violation, model_text
from provider_svc.models.base import CallContext, Message, ModelRequest, Role, ToolCall, ToolDef
from provider_svc.testing.scripted import (
    FaultConfig,
    GenericPolicy,
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    ScriptedToolCall,
    adapt_arguments,
    fix_last_call,
    synthesize_arguments,
)
from tests.unit.provider.messages import tool_message
from tool_svc.builtin import calculator, default_specs
from tool_svc.registry import ToolRegistry
from tool_svc.validation import SchemaCheck, schema_error

SERVICE = {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*-svc$", "description": "e.g. payment-svc"}


def _closed(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


OPS_TOOLS = (
    ToolDef(
        "query_metrics",
        "Use when you need a service's error rate or latency over a time window.",
        _closed(
            {
                "service": SERVICE,
                "metric": {"type": "string", "enum": ["latency_p99", "error_rate", "saturation"]},
                "window": {"type": "string", "pattern": "^[0-9]{1,4}[smh]$", "description": "e.g. 15m"},
            },
            ["service", "metric", "window"],
        ),
    ),
    ToolDef("get_deployment", "Use when you need a service's deployment.", _closed({"service": SERVICE}, ["service"])),
    ToolDef("list_pods", "Use when you need a service's pods.", _closed({"service": SERVICE}, ["service"])),
    ToolDef(
        "restart_service",
        "Use when a service must be restarted to recover.",
        _closed({"service": SERVICE, "reason": {"type": "string", "minLength": 3}}, ["service", "reason"]),
    ),
)
GOAL = "ALERT #0007 on checkout-svc: error rate above SLO. Triage, diagnose and remediate."
CHECKS = {t.name: SchemaCheck.compile(t.input_schema) for t in OPS_TOOLS}


def _unknown_tool_text(name: str, tools: tuple[ToolDef, ...] = OPS_TOOLS) -> AgentmeshError:
    """The UNKNOWN_TOOL text the model sees, built by tool_svc's registry itself."""
    registry = ToolRegistry(
        ToolsSettings(
            builtins=[],
            registry=[
                {
                    "name": t.name,
                    "executor": "http",
                    "endpoint_url": "http://127.0.0.1:1/x",
                    "input_schema": t.input_schema,
                    "description": t.description,
                }
                for t in tools
            ],
            http_allowlist=["http://127.0.0.1:1/"],
        ),
        default_specs(),
    )
    return registry.unknown(name)


def _schema_text(tool: str, arguments: dict[str, Any]) -> AgentmeshError:
    """The SCHEMA_INVALID text tool_svc sends for `arguments`."""
    violations = CHECKS[tool].violations(arguments)
    assert violations, "the arguments must break the schema"
    return schema_error(tool, violations)


def _request(
    call: ToolCall, result: str | AgentmeshError, tools: tuple[ToolDef, ...] = OPS_TOOLS, goal: str = GOAL
) -> ScriptedRequest:
    messages = (
        Message(Role.USER, goal),
        Message(Role.ASSISTANT, "", tool_calls=(call,)),
        tool_message(result, tool_call_id=call.id, name=call.name),
    )
    return ScriptedRequest(
        messages=messages,
        tools=tools,
        model="scripted/test",
        request=ModelRequest(messages=messages, tools=tools),
        call_index=1,
        rng=random.Random(0),
    )


def _only_call(req: ScriptedRequest) -> tuple[str, dict[str, Any]]:
    reply = fix_last_call(req)
    assert len(reply.tool_calls) == 1, reply
    call = reply.tool_calls[0]
    return call.name, json.loads(call.arguments_json)


# --- UNKNOWN_TOOL -----------------------------------------------------------------------------------


def test_unknown_tool_is_renamed_with_the_original_arguments() -> None:
    args = {"service": "checkout-svc", "metric": "error_rate", "window": "15m"}
    call = ToolCall("c1", "query_metrics_v2", json.dumps(args))
    name, fixed = _only_call(_request(call, _unknown_tool_text("query_metrics_v2")))
    assert name == "query_metrics"
    assert fixed == args  # no "name" argument smuggled in from the $.name violation
    assert CHECKS[name].violations(fixed) == []


def test_unknown_tool_arguments_are_adapted_to_the_suggested_tool() -> None:
    # list_podz does not exist; list_pods is suggested; "verbose" is no list_pods property.
    call = ToolCall("c1", "list_podz", '{"service": "checkout-svc", "verbose": true}')
    name, fixed = _only_call(_request(call, _unknown_tool_text("list_podz")))
    assert (name, fixed) == ("list_pods", {"service": "checkout-svc"})

    # The suggested tool needs more than the call had: filled from the goal and the schema.
    call = ToolCall("c2", "restart", '{"service": "checkout-svc"}')
    error = AgentmeshError(
        ErrorCode.UNKNOWN_TOOL, "no tool named 'restart'", metadata={"closest_tools": "restart_service"}
    )
    name, fixed = _only_call(_request(call, error))
    assert name == "restart_service" and fixed["service"] == "checkout-svc"
    assert CHECKS[name].violations(fixed) == []


def test_unknown_tool_suggestion_read_from_the_hint_and_offered_tools_preferred() -> None:
    # By spelling alone list_pod is closest to list_pods; the error's own suggestion wins, and of
    # its suggestions the one the model is offered.
    call = ToolCall("c1", "list_pod", '{"service": "checkout-svc"}')
    hinted = AgentmeshError(
        ErrorCode.UNKNOWN_TOOL,
        "no tool named 'list_pod'",
        violations=[Violation("$.name", "enum", "", "list_pod", "did you mean nope_tool or get_deployment?")],
    )
    assert _only_call(_request(call, hinted)) == ("get_deployment", {"service": "checkout-svc"})


def test_unknown_tool_without_any_other_name_answers_instead_of_looping() -> None:
    call = ToolCall("c1", "ghost", "{}")
    error = AgentmeshError(ErrorCode.UNKNOWN_TOOL, "no tool named 'ghost'")
    reply = fix_last_call(_request(call, error, tools=()))
    assert not reply.tool_calls and "UNKNOWN_TOOL" in reply.text


# --- additionalProperties -----------------------------------------------------------------------------


def test_an_extra_property_named_by_tool_svc_is_removed() -> None:
    args = {"service": "checkout-svc", "extra_field": True}
    call = ToolCall("c1", "get_deployment", json.dumps(args))
    error = _schema_text("get_deployment", args)
    text = model_text(error)
    assert "$.extra_field" in text and "'extra_field'" in text
    name, fixed = _only_call(_request(call, error))
    assert (name, fixed) == ("get_deployment", {"service": "checkout-svc"})


def test_an_extra_property_is_removed_even_when_the_tool_schema_is_not_offered() -> None:
    # Only the violation says what to remove (the model was not shown the tool's schema).
    args = {"service": "checkout-svc", "extra_field": True, "keep": 1}
    call = ToolCall("c1", "get_deployment", json.dumps(args))
    new_form = AgentmeshError(
        ErrorCode.SCHEMA_INVALID,
        "bad",
        violations=[
            Violation("$.extra_field", "additionalProperties", "only keep, service", "'extra_field'", "remove it")
        ],
    )
    assert _only_call(_request(call, new_form, tools=())) == ("get_deployment", {"service": "checkout-svc", "keep": 1})
    # The older form: the parent object's path, the names listed unquoted.
    old_form = AgentmeshError(
        ErrorCode.SCHEMA_INVALID,
        "bad",
        violations=[Violation("$", "additionalProperties", "only keep, service", "extra_field", "allowed: a")],
    )
    assert _only_call(_request(call, old_form, tools=())) == ("get_deployment", {"service": "checkout-svc", "keep": 1})
    nested = {"service": "checkout-svc", "opts": {"a": 1, "bad-key": 2}}
    nested_call = ToolCall("c1", "get_deployment", json.dumps(nested))
    located = AgentmeshError(
        ErrorCode.SCHEMA_INVALID,
        "bad",
        violations=[Violation("$.opts['bad-key']", "additionalProperties", "only a", "'bad-key'", "remove it")],
    )
    fixed = _only_call(_request(nested_call, located, tools=()))[1]
    assert fixed == {"service": "checkout-svc", "opts": {"a": 1}}


def test_an_extra_property_is_removed_when_only_the_allowed_names_are_given() -> None:
    call = ToolCall("c1", "get_deployment", '{"service": "checkout-svc", "zz": 1}')
    text = AgentmeshError(
        ErrorCode.SCHEMA_INVALID,
        "bad",
        violations=[Violation("$", "additionalProperties", "", "", "remove properties; allowed: service")],
    )
    assert _only_call(_request(call, text, tools=()))[1] == {"service": "checkout-svc"}


def test_adapt_arguments_keeps_what_fits_and_fills_what_is_required() -> None:
    metrics = OPS_TOOLS[0]
    adapted = json.loads(adapt_arguments('{"service": "checkout-svc", "limit": 5}', metrics, [GOAL]))
    assert adapted["service"] == "checkout-svc" and "limit" not in adapted
    assert CHECKS["query_metrics"].violations(adapted) == []
    assert json.loads(adapt_arguments('{"service": "a-svc"}', None, [GOAL])) == {"service": "a-svc"}


# --- converging under injected faults, through tool_svc's real checks ------------------------------


@pytest.mark.parametrize("fault", ["unknown_tool", "schema_violation"])
async def test_every_injected_fault_is_corrected_in_one_step_without_repeating_a_call(fault: str) -> None:
    """Each stage's first call is faulty (rate 1); the correction must pass tool_svc's checks at once.

    Before: the unknown-tool fix added a "name" property, which additionalProperties: false rejects,
    and that fix could not remove it: the same call was repeated until LOOP_DETECTED.
    """
    stages = {
        "query_metrics": {"service": "checkout-svc", "metric": "error_rate", "window": "15m"},
        "get_deployment": {"service": "checkout-svc"},
        "restart_service": {"service": "checkout-svc", "reason": "error rate above SLO"},
        "list_pods": {"service": "checkout-svc"},
    }

    def policy(req: ScriptedRequest) -> ScriptedReply:
        if req.last_error is not None:
            return fix_last_call(req)
        stage = next(s for s in stages if s not in req.succeeded_tools)
        return ScriptedReply(tool_calls=(ScriptedToolCall(stage, json.dumps(stages[stage])),))

    for seed in range(5):
        model = ScriptedModel("scripted", "t", policy, faults=FaultConfig(seed=seed, **{fault: 1.0}))
        messages: list[Message] = [Message(Role.USER, GOAL)]
        for stage in stages:
            reply = (await model.request(ModelRequest(tuple(messages), OPS_TOOLS), CallContext())).message
            messages.append(reply)
            bad = reply.tool_calls[0]
            if bad.name not in CHECKS:
                result = _unknown_tool_text(bad.name)
            else:
                result = _schema_text(bad.name, json.loads(bad.arguments_json))
            messages.append(tool_message(result, tool_call_id=bad.id, name=bad.name))
            fixed = (await model.request(ModelRequest(tuple(messages), OPS_TOOLS), CallContext())).message
            call = fixed.tool_calls[0]
            assert (call.name, call.arguments_json) != (bad.name, bad.arguments_json)
            assert call.name == stage, (fault, seed, call)
            assert CHECKS[stage].violations(json.loads(call.arguments_json)) == [], (fault, seed, call)
            messages.append(fixed)
            messages.append(tool_message('{"ok": true}', tool_call_id=call.id, name=call.name))


# --- GenericPolicy: arguments from the goal ---------------------------------------------------------

CALCULATOR = ToolDef("calculator", "Use when you need arithmetic.", calculator.SCHEMA)


@pytest.mark.parametrize(
    ("goal", "expression"),
    [
        ("what is 17*23", "17*23"),
        ("What is 17 * 23?", "17 * 23"),
        ("compute (2 + 3) * 4 for me", "(2 + 3) * 4"),
        ("what's sqrt(2) * 10, roughly", "sqrt(2) * 10"),
        ("ticket #0042: how much is 2^10 ?", "2**10"),
        ("12 apples cost 3.5 each: what is 12 * 3.5", "12 * 3.5"),
    ],
)
async def test_generic_policy_takes_the_arithmetic_from_the_goal(goal: str, expression: str) -> None:
    model = ScriptedModel("scripted", "default")
    tools = (CALCULATOR, ToolDef("get_weather", "Use when asked about the weather.", {"type": "object"}))
    reply = await model.request(ModelRequest((Message(Role.USER, goal),), tools), CallContext())
    call = reply.message.tool_calls[0]
    assert (call.name, json.loads(call.arguments_json)) == ("calculator", {"expression": expression})


def test_without_arithmetic_in_the_goal_the_schema_example_is_used() -> None:
    assert synthesize_arguments(CALCULATOR, ["please do some math"]) == {"expression": "(17 * 3) / 4"}
    # A number on its own, a date or an id is no expression.
    assert synthesize_arguments(CALCULATOR, ["order 0042 on 2025-06-01, ticket 17"]) == {"expression": "(17 * 3) / 4"}


def test_goal_values_beat_examples_only_when_unambiguous() -> None:
    order = ToolDef(
        "get_order",
        "order lookup",
        _closed(
            {"order_id": {"type": "string", "pattern": r"^ORD-\d{4}-\d{4}$", "examples": ["ORD-2025-0001"]}},
            ["order_id"],
        ),
    )
    assert synthesize_arguments(order, ["where is ORD-2024-7777?"]) == {"order_id": "ORD-2024-7777"}
    assert synthesize_arguments(order, ["where is my order?"]) == {"order_id": "ORD-2025-0001"}
    logs = ToolDef(
        "logs",
        "logs",
        _closed({"service": {"type": "string", "pattern": "^[a-z0-9-]+$", "examples": ["payment-svc"]}}, ["service"]),
    )
    # Every lowercase word fits that loose pattern: no single stated value, so the example stays.
    assert synthesize_arguments(logs, ["check the logs of checkout-svc"]) == {"service": "payment-svc"}
    assert synthesize_arguments(logs, ["service: checkout-svc, please"]) == {"service": "checkout-svc"}


def test_generic_policy_prefers_the_tool_whose_inputs_the_goal_states() -> None:
    # No word of "what is 17*23" names a tool: the calculator is picked for the arithmetic, not its position.
    other = ToolDef("search_docs", "Use when searching documentation.", _closed({"q": {"type": "string"}}, ["q"]))
    messages = (Message(Role.USER, "what is 17*23"),)
    req = ScriptedRequest(
        messages=messages,
        tools=(other, CALCULATOR),
        model="scripted/t",
        request=ModelRequest(messages, (other, CALCULATOR)),
        call_index=0,
        rng=random.Random(0),
    )
    call = GenericPolicy()(req).tool_calls[0]
    assert (call.name, json.loads(call.arguments_json)) == ("calculator", {"expression": "17*23"})
