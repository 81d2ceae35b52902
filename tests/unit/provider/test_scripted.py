"""The scripted model: the policy interface, reading errors back, hint-driven fixes, scenarios, faults."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode, Violation, model_text
from provider_svc.models.base import (
    CallContext,
    FinishReason,
    Message,
    ModelRequest,
    Role,
    Sampling,
    StreamFinal,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    ToolDef,
)
from provider_svc.testing.scripted import (
    FaultConfig,
    GenericPolicy,
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    ScriptedToolCall,
    _apply_fault,
    _repair_json,
    count_tokens,
    load_policy,
    load_scenario,
    tool_error_of,
)
from tests.unit.provider.messages import tool_message

ORDER_TOOL = ToolDef(
    "get_order",
    "use when looking up an order by its id",
    {
        "type": "object",
        "properties": {"order_id": {"type": "string", "pattern": r"^ORD-\d{4}-\d{4}$"}},
        "required": ["order_id"],
    },
)
SHELL_TOOL = ToolDef(
    "run_shell",
    "use when running a diagnostic command",
    {
        "type": "object",
        "properties": {"command": {"type": "string", "x-agentmesh-kind": "shell"}},
        "required": ["command"],
    },
)
WEATHER_TOOL = ToolDef(
    "get_weather", "use when asked about the weather in a city", {"type": "object", "properties": {}}
)


def _schema_error(actual: str, hint: str, path: str = "$.order_id") -> AgentmeshError:
    err = AgentmeshError(
        ErrorCode.SCHEMA_INVALID,
        "arguments violate the input schema",
        violations=[Violation(path, "pattern", r"^ORD-\d{4}-\d{4}$", json.dumps(actual), hint)],
    )
    return err


async def _ask(
    model: ScriptedModel, messages: tuple[Message, ...], tools: tuple[ToolDef, ...] = (ORDER_TOOL,), **kw: object
):
    return await model.request(ModelRequest(messages=messages, tools=tools, **kw), CallContext())  # type: ignore[arg-type]


def test_tool_error_of_reads_the_typed_error_not_the_text() -> None:
    err = AgentmeshError(
        ErrorCode.UPSTREAM_TIMEOUT,
        "inventory did not answer",
        violations=[Violation("$.a; b", "type", "integer", '"x"', "use a number; e.g. 5")],
        retryable=True,
        retry_after=2,
        fallback_tool="inventory_cache",
        missing_permission="prod:inv:read",
        metadata={"ref_id": "pl_1"},
    )
    parsed = tool_error_of(tool_message(err, tool_call_id="c1"))
    assert parsed is not None
    assert (parsed.code, parsed.error_class, parsed.message) == (
        "UPSTREAM_TIMEOUT",
        "ENGINEERING",
        "inventory did not answer",
    )
    assert parsed.violations[0].rule == "type" and parsed.violations[0].hint == "use a number; e.g. 5"
    assert parsed.violations[0].expected == "integer" and parsed.violations[0].actual == '"x"'
    assert parsed.retryable and parsed.retry_after_s == 2
    assert parsed.fallback_tool == "inventory_cache" and parsed.missing_permission == "prod:inv:read"
    assert parsed.metadata == {"ref_id": "pl_1"} and parsed.is_engineering
    # The rendered text alone is a normal result: the model's words are never parsed back.
    assert tool_error_of(tool_message(model_text(err), tool_call_id="c1")) is None


def test_tool_error_of_json_form_and_plain_results() -> None:
    text = json.dumps(
        {
            "error": {
                "code": "ERROR_CODE_UNKNOWN_TOOL",
                "message": "no such tool",
                "metadata": {"closest_tools": "get_order"},
            }
        }
    )
    parsed = tool_error_of(tool_message(text))
    assert parsed is not None and parsed.code == "UNKNOWN_TOOL" and parsed.is_contract
    assert tool_error_of(tool_message('{"status": "shipped"}')) is None
    assert tool_error_of(tool_message("all good: 3 records")) is None


async def test_generic_policy_calls_the_relevant_tool_then_answers() -> None:
    model = ScriptedModel("scripted", "default")
    goal = Message(Role.USER, "Where is order ORD-2025-0042? Look up the order please.")
    first = await _ask(model, (goal,), tools=(WEATHER_TOOL, ORDER_TOOL))
    call = first.message.tool_calls[0]
    assert first.finish_reason == FinishReason.TOOL_CALLS
    assert (call.name, json.loads(call.arguments_json)) == ("get_order", {"order_id": "ORD-2025-0042"})
    result = tool_message('{"status": "shipped"}', tool_call_id=call.id, name="get_order")
    second = await _ask(model, (goal, first.message, result), tools=(WEATHER_TOOL, ORDER_TOOL))
    assert second.finish_reason == FinishReason.STOP and not second.message.tool_calls
    assert "shipped" in second.message.content


async def test_a_continued_conversation_is_answered_turn_by_turn() -> None:
    """A session's next task adds a user message: the policy works on that turn (its goal, its tools,
    its findings); the earlier turn is context. The sent request is the chat completions equivalent."""
    model = ScriptedModel("scripted", "default")
    tools = (WEATHER_TOOL, ORDER_TOOL)
    first_goal = Message(Role.USER, "Where is order ORD-2025-0042? Look up the order please.")
    call = (await _ask(model, (first_goal,), tools=tools)).message
    result = tool_message('{"status": "shipped"}', tool_call_id=call.tool_calls[0].id, name="get_order")
    answer = (await _ask(model, (first_goal, call, result), tools=tools)).message
    second_goal = Message(Role.USER, "And order ORD-2025-0077? Look up that order too.")
    history = (first_goal, call, result, answer, second_goal)
    next_call = await _ask(model, history, tools=tools)
    assert [json.loads(c.arguments_json) for c in next_call.message.tool_calls] == [{"order_id": "ORD-2025-0077"}]
    request = ScriptedRequest(history, tools, "scripted/default", ModelRequest(history), 2, random.Random(1))
    assert request.goal == second_goal.content and request.turn == (second_goal,)
    assert request.called_tools == () and request.succeeded_tools == ()
    result2 = tool_message('{"status": "packed"}', tool_call_id=next_call.message.tool_calls[0].id, name="get_order")
    final = await _ask(model, (*history, next_call.message, result2), tools=tools)
    assert final.message.content.startswith("Answer: And order ORD-2025-0077?")
    assert "packed" in final.message.content and "shipped" not in final.message.content
    assert final.sent is not None and final.sent.format == "openai.chat.completions"
    body = json.loads(final.sent.body())
    assert body["model"] == "default" and len(body["messages"]) == 7
    assert body["tools"][1]["function"]["name"] == "get_order"


async def test_a_corrected_call_uses_the_hint_it_was_shown() -> None:
    # The tool's schema is NOT offered to the model: the only source of the right value is the hint.
    model = ScriptedModel("scripted", "default")
    goal = Message(Role.USER, "check my order")
    bad = Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "get_order", '{"order_id": "ord-2025-12"}'),))
    hint = "order_id must match ^ORD-\\d{4}-\\d{4}$ (e.g. ORD-2025-0001), got 'ord-2025-12'"
    error = tool_message(_schema_error("ord-2025-12", hint), tool_call_id="c1", name="get_order")
    reply = await _ask(model, (goal, bad, error), tools=(WEATHER_TOOL,))
    assert json.loads(reply.message.tool_calls[0].arguments_json) == {"order_id": "ORD-2025-0001"}
    other_hint = hint.replace("ORD-2025-0001", "ORD-1999-0007")
    error2 = tool_message(_schema_error("ord-2025-12", other_hint), tool_call_id="c1", name="get_order")
    reply2 = await _ask(model, (goal, bad, error2), tools=(WEATHER_TOOL,))
    assert json.loads(reply2.message.tool_calls[0].arguments_json) == {"order_id": "ORD-1999-0007"}


async def test_fix_prefers_a_value_from_the_goal_over_the_example() -> None:
    model = ScriptedModel("scripted", "default")
    goal = Message(Role.USER, "my order is ORD-2024-7777")
    bad = Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "get_order", '{"order_id": "7777"}'),))
    error = tool_message(_schema_error("7777", "must match (e.g. ORD-2025-0001)"), tool_call_id="c1")
    reply = await _ask(model, (goal, bad, error))
    assert json.loads(reply.message.tool_calls[0].arguments_json) == {"order_id": "ORD-2024-7777"}


async def test_unknown_tool_malformed_json_and_fallback_tool() -> None:
    model = ScriptedModel("scripted", "default")
    goal = Message(Role.USER, "order ORD-2025-0001 status")
    unknown = AgentmeshError(ErrorCode.UNKNOWN_TOOL, "no tool get_ordr", metadata={"closest_tools": "get_order"})
    bad_name = Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "get_ordr", '{"order_id": "ORD-2025-0001"}'),))
    reply = await _ask(model, (goal, bad_name, tool_message(unknown, tool_call_id="c1")))
    assert reply.message.tool_calls[0].name == "get_order"

    not_json = AgentmeshError(ErrorCode.ARGUMENTS_NOT_JSON, "Expecting ',' delimiter")
    broken = Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "get_order", '{"order_id": "ORD-2025-0001",'),))
    fixed = await _ask(model, (goal, broken, tool_message(not_json, tool_call_id="c1")))
    assert json.loads(fixed.message.tool_calls[0].arguments_json) == {"order_id": "ORD-2025-0001"}

    down = AgentmeshError(ErrorCode.UPSTREAM_UNAVAILABLE, "orders db down", fallback_tool="order_cache")
    cache = ToolDef("order_cache", "cached orders", {"type": "object", "properties": {"order_id": {"type": "string"}}})
    call = Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "get_order", '{"order_id": "ORD-2025-0001"}'),))
    fallback = await _ask(model, (goal, call, tool_message(down, tool_call_id="c1")), tools=(ORDER_TOOL, cache))
    assert fallback.message.tool_calls[0].name == "order_cache"

    fatal = AgentmeshError(ErrorCode.DANGEROUS_OPERATION, "rm -rf refused")
    stop = await _ask(model, (goal, call, tool_message(fatal, tool_call_id="c1")))
    assert not stop.message.tool_calls and "DANGEROUS_OPERATION" in stop.message.content


async def test_tool_choice_is_respected() -> None:
    model = ScriptedModel("scripted", "default")
    goal = (Message(Role.USER, "weather in Paris and order ORD-2025-0001"),)
    none = await _ask(model, goal, tools=(ORDER_TOOL,), tool_choice=ToolChoice("none"))
    assert not none.message.tool_calls
    forced = await _ask(model, goal, tools=(ORDER_TOOL, WEATHER_TOOL), tool_choice=ToolChoice("tool", "get_weather"))
    assert forced.message.tool_calls[0].name == "get_weather"


async def test_replies_are_deterministic_and_counted_with_tiktoken() -> None:
    model = ScriptedModel("scripted", "default", faults=FaultConfig(seed=3, schema_violation=0.5))
    goal = (Message(Role.SYSTEM, "be precise"), Message(Role.USER, "order ORD-2025-0001?"))
    a, b = await _ask(model, goal), await _ask(model, goal)
    assert a.message == b.message and a.usage == b.usage
    assert a.usage.output_tokens == count_tokens("get_order") + count_tokens(a.message.tool_calls[0].arguments_json)
    assert a.usage.input_tokens > count_tokens("be precise") + count_tokens("order ORD-2025-0001?")
    assert count_tokens("hello world") == 2


@pytest.mark.parametrize(
    ("kind", "check"),
    [
        ("malformed_json", lambda c: _not_json(c.arguments_json)),
        ("schema_violation", lambda c: json.loads(c.arguments_json) != {"order_id": "ORD-2025-0001"}),
        ("unknown_tool", lambda c: c.name == "get_order_v2"),
        ("dangerous_command", lambda c: c.name == "run_shell" and "rm -rf /" in c.arguments_json),
    ],
)
async def test_each_fault_kind(kind: str, check: object) -> None:
    model = ScriptedModel("scripted", "default", faults=FaultConfig.model_validate({"seed": 1, kind: 1.0}))
    reply = await _ask(model, (Message(Role.USER, "order ORD-2025-0001 lookup"),), tools=(ORDER_TOOL, SHELL_TOOL))
    assert check(reply.message.tool_calls[0])  # type: ignore[operator]


def _not_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return True
    return False


async def test_fault_rates_are_seeded_and_corrections_stay_clean() -> None:
    faults = FaultConfig(seed=11, schema_violation=0.3)
    model = ScriptedModel("scripted", "default", faults=faults)
    outcomes: Counter[bool] = Counter()
    for i in range(200):
        reply = await _ask(model, (Message(Role.USER, f"order ORD-2025-{i:04d} lookup"),))
        outcomes[json.loads(reply.message.tool_calls[0].arguments_json) == {"order_id": f"ORD-2025-{i:04d}"}] += 1
    assert 40 <= outcomes[False] <= 80  # ~30 % of 200, seeded
    again = ScriptedModel("scripted", "default", faults=faults)
    same = await _ask(again, (Message(Role.USER, "order ORD-2025-0007 lookup"),))
    first = await _ask(model, (Message(Role.USER, "order ORD-2025-0007 lookup"),))
    assert same.message == first.message
    always = ScriptedModel("scripted", "default", faults=FaultConfig(seed=1, schema_violation=1.0))
    goal = Message(Role.USER, "order ORD-2025-0001")
    bad = Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "get_order", '{"order_id": "x"}'),))
    error = tool_message(_schema_error("x", "e.g. ORD-2025-0001"), tool_call_id="c1")
    fixed = await _ask(always, (goal, bad, error))
    assert json.loads(fixed.message.tool_calls[0].arguments_json) == {"order_id": "ORD-2025-0001"}


async def test_custom_policy_sees_the_prompt_and_streams() -> None:
    seen: list[ScriptedRequest] = []

    def policy(req: ScriptedRequest) -> ScriptedReply:
        seen.append(req)
        if "get_order" not in req.called_tools:
            return ScriptedReply(tool_calls=(ScriptedToolCall("get_order", '{"order_id": "ORD-2025-0001"}'),))
        return ScriptedReply(text=f"done after {req.call_index} steps: {req.last_result_text}")

    model = ScriptedModel("scripted", "custom", policy, stream_chunk_chars=4)
    goal = Message(Role.USER, "go")
    events = [e async for e in model.request_stream(ModelRequest((goal,), (ORDER_TOOL,)), CallContext())]
    final = events[-1]
    assert isinstance(final, StreamFinal)
    call = final.response.message.tool_calls[0]
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert "".join(d.arguments_delta for d in deltas) == call.arguments_json and deltas[0].name == "get_order"
    history = (goal, final.response.message, tool_message("shipped", tool_call_id=call.id))
    events = [e async for e in model.request_stream(ModelRequest(history, (ORDER_TOOL,)), CallContext())]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "done after 1 steps: shipped"
    assert seen[-1].goal == "go" and seen[-1].last_result is not None and seen[-1].call_index == 1


async def test_async_policy_and_broken_policies() -> None:
    async def slow(req: ScriptedRequest) -> ScriptedReply:
        return ScriptedReply(text="async ok")

    assert (await _ask(ScriptedModel("s", "a", slow), (Message(Role.USER, "x"),))).message.content == "async ok"

    def boom(req: ScriptedRequest) -> ScriptedReply:
        raise KeyError("oops")

    with pytest.raises(AgentmeshError) as caught:
        await _ask(ScriptedModel("s", "b", boom), (Message(Role.USER, "x"),))
    assert caught.value.code == ErrorCode.INTERNAL and "KeyError" in caught.value.message
    with pytest.raises(AgentmeshError):
        await _ask(ScriptedModel("s", "c", lambda req: "text"), (Message(Role.USER, "x"),))  # type: ignore[arg-type,return-value]


async def test_max_tokens_and_stop_apply_to_text() -> None:
    model = ScriptedModel("s", "m", lambda req: ScriptedReply(text="one two three four five six seven END eight"))
    short = await _ask(model, (Message(Role.USER, "x"),), sampling=Sampling(max_tokens=3))
    assert short.finish_reason == FinishReason.LENGTH and short.usage.output_tokens <= 3
    stopped = await _ask(model, (Message(Role.USER, "x"),), sampling=Sampling(stop=("END",)))
    assert stopped.message.content == "one two three four five six seven "


SCENARIO = """
name: refund-check
faults: {seed: 5}
rules:
  - when: {not_called: get_order}
    call:
      tool: get_order
      arguments: {order_id: {from_goal: "ORD-\\\\d{4}-\\\\d{4}", default: "ORD-0000-0000"}, note: "{goal}"}
  - when: {last_error_class: CONTRACT}
    fix: true
  - when: {last_tool: get_order, last_ok: true, result_contains: shipped}
    answer: "Shipped: {last_result}"
"""


async def test_scenario_yaml(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    policy = load_scenario(path)
    assert policy.faults == FaultConfig(seed=5)
    model = ScriptedModel("scripted", "refund", policy)
    goal = Message(Role.USER, "refund ORD-2025-0101 please")
    first = await _ask(model, (goal,))
    args = json.loads(first.message.tool_calls[0].arguments_json)
    assert args == {"order_id": "ORD-2025-0101", "note": "refund ORD-2025-0101 please"}
    result = tool_message("status: shipped", tool_call_id=first.message.tool_calls[0].id)
    done = await _ask(model, (goal, first.message, result))
    assert done.message.content == "Shipped: status: shipped"
    other = tool_message("status: lost", tool_call_id=first.message.tool_calls[0].id)
    generic = await _ask(model, (goal, first.message, other))  # no rule matches: the generic policy answers
    assert "lost" in generic.message.content


@pytest.mark.parametrize(
    ("text", "problem"),
    [("rules: [{when: {nonsense: 1}}]", "nonsense"), ("rules: [", "not valid YAML"), ("name: x", "rules")],
)
def test_bad_scenarios_fail_loudly(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=problem):
        load_scenario(path)
    with pytest.raises(ValueError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")


def test_load_policy() -> None:
    assert isinstance(load_policy("provider_svc.testing.scripted:GenericPolicy"), GenericPolicy)
    configured = load_policy("provider_svc.testing.scripted:GenericPolicy", {"max_tool_steps": 3})
    assert isinstance(configured, GenericPolicy) and configured.max_tool_steps == 3
    for bad, problem in (("nocolon", "expected"), ("no_such_mod:x", "cannot import"), ("json:nope", "no attribute")):
        with pytest.raises(ValueError, match=problem):
            load_policy(bad)


# --- repairing malformed JSON arguments ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "repaired"),
    [
        ('{"service":"payment-svc","window":"15m","', {"service": "payment-svc", "window": "15m"}),
        ('{"service":"payment-svc","win', {"service": "payment-svc"}),
        ('{"service":"payment-svc","window"', {"service": "payment-svc"}),
        ('{"service":"payment-svc","window":', {"service": "payment-svc"}),
        ('{"service":"payment-svc", "window": ', {"service": "payment-svc"}),
        ('{"service":"payment-svc",', {"service": "payment-svc"}),
        ('{"service":"payment-svc",}', {"service": "payment-svc"}),
        ('{"service":"paym', {"service": "paym"}),
        ('{"q":"a\\', {"q": "a"}),
        ('{"q":"\\u00e', {"q": ""}),
        ('{"q":"it\'s', {"q": "it's"}),
        ('{"n":25', {}),
        ('{"ok":true', {"ok": True}),
        ('{"ok":tr', {}),
        ('{"filter":{"level":"error","codes":[500,503', {"filter": {"level": "error", "codes": [500]}}),
        ('{"filter":{"level":"error","', {"filter": {"level": "error"}}),
        ('{"a":[{"b":1},{"c":', {"a": [{"b": 1}, {}]}),
        ("{", {}),
        ('{,"', {}),
        ("{'service': 'payment-svc'}", {"service": "payment-svc"}),
        ("", None),
        ("not json", None),
        ("[1, 2", None),
        ('"just a string"', None),
        ('{"a":1} trailing', None),
        ('{"a" 1}', None),
        ('{"a":1,,"b":2}', None),
        ('{"a":}', None),
        ('{"a":1]', None),
    ],
)
def test_repair_json_shapes(text: str, repaired: dict[str, Any] | None) -> None:
    assert _repair_json(text) == repaired


SAMPLE = (
    '{"service": "payment-svc", "window": "15m", "limit": 250, "ratio": -1.5e-3, "dry_run": false,'
    ' "note": null, "tags": ["a\\"b", "caf\\u00e9", "x,y:z}"], "filter": {"level": "error", "codes": [500, 503],'
    ' "empty": {}}, "last": "done"}'
)


def _truncation_of(value: Any, original: Any) -> bool:
    """Whether `value` is `original` cut short: equal; a string prefix; a container whose members are
    the original's first ones, all equal but the last, which is itself a truncation."""
    if value == original:
        return True
    if isinstance(original, str):
        return isinstance(value, str) and original.startswith(value)
    if isinstance(original, dict) and isinstance(value, dict):
        keys = list(value)
        if keys != list(original)[: len(keys)]:
            return False
        return not keys or (
            all(value[k] == original[k] for k in keys[:-1]) and _truncation_of(value[keys[-1]], original[keys[-1]])
        )
    if isinstance(original, list) and isinstance(value, list):
        if len(value) > len(original):
            return False
        return not value or (
            value[:-1] == original[: len(value) - 1] and _truncation_of(value[-1], original[len(value) - 1])
        )
    return False


def test_every_prefix_of_an_object_repairs_to_a_truncation_of_it() -> None:
    original = json.loads(SAMPLE)
    assert _repair_json(SAMPLE) == original
    seen: set[str] = set()
    for cut in range(1, len(SAMPLE)):
        repaired = _repair_json(SAMPLE[:cut])
        assert isinstance(repaired, dict), SAMPLE[:cut]
        # Present keys are the original's first ones, complete values equal; only the last may be cut short.
        assert _truncation_of(repaired, original), (SAMPLE[:cut], repaired)
        # Numbers and literals are never cut: a number the text ends in is dropped, not shortened.
        for key in ("limit", "ratio", "dry_run", "note"):
            if key in repaired:
                assert repaired[key] == original[key], (SAMPLE[:cut], repaired)
        seen.add(json.dumps(repaired, sort_keys=True))
    assert len(seen) > 20  # the cuts really produce different repairs
    assert _repair_json("") is None


@pytest.mark.parametrize(
    "arguments",
    [
        {"service": "payment-svc", "window": "15m"},
        {"order_id": "ORD-2025-0001"},
        {},
        {"filter": {"level": "error", "codes": [500, 503]}},
        {"tags": ["a", "b"], "note": "ends with a brace }"},
        {"q": "x", "n": 250, "ok": True},
    ],
)
def test_the_malformed_json_fault_is_always_repaired(arguments: dict[str, Any]) -> None:
    req = ScriptedRequest(
        messages=(Message(Role.USER, "check payment-svc"),),
        tools=(ORDER_TOOL,),
        model="scripted/test",
        request=ModelRequest(messages=(Message(Role.USER, "check payment-svc"),), tools=(ORDER_TOOL,)),
        call_index=0,
        rng=random.Random(0),
    )
    for separators in ((",", ":"), (", ", ": ")):
        call = ScriptedToolCall("get_order", json.dumps(arguments, separators=separators), "c1")
        broken = _apply_fault("malformed_json", call, req).arguments_json
        assert _not_json(broken), broken
        assert _repair_json(broken) == arguments, broken


_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
_FIX = "[agentmesh] Your final answer was not accepted: CLAIM_UNSUPPORTED: you say 'restarted'"


async def test_the_false_claim_fault_claims_a_restart_until_corrected() -> None:
    # Issue 41: the claims check's fault; a corrected answer is clean (unless on_corrections).
    model = ScriptedModel("scripted", "default", faults=FaultConfig(false_claim=1.0))
    asked = (Message(Role.USER, "how is payment-svc?"),)
    first = await model.request(ModelRequest(messages=asked), CallContext())
    assert first.message.content.endswith("I restarted the pod and it is healthy now.")
    corrected = (*asked, Message(Role.ASSISTANT, first.message.content), Message(Role.USER, _FIX))
    second = await model.request(ModelRequest(messages=corrected), CallContext())
    assert "restarted" not in second.message.content
    # The correction is part of the turn: the policy still answers the goal, not the correction.
    assert "payment-svc" in second.message.content and "CLAIM_UNSUPPORTED" not in second.message.content
    chinese = await model.request(ModelRequest(messages=(Message(Role.USER, "检查 payment-svc"),)), CallContext())
    assert chinese.message.content.endswith("Pod 已重启成功。")


async def test_the_invalid_answer_fault_breaks_the_schema() -> None:
    asked = (Message(Role.USER, "report on payment-svc"),)
    clean = await ScriptedModel("scripted", "default").request(
        ModelRequest(messages=asked, response_schema=_SCHEMA), CallContext()
    )
    assert "answer" in json.loads(clean.message.content)
    faulty = ScriptedModel("scripted", "default", faults=FaultConfig(invalid_answer=1.0, on_corrections=True))
    bad = await faulty.request(ModelRequest(messages=asked, response_schema=_SCHEMA), CallContext())
    assert bad.message.content == "[]"
    again = (*asked, Message(Role.ASSISTANT, "[]"), Message(Role.USER, _FIX))
    still = await faulty.request(ModelRequest(messages=again, response_schema=_SCHEMA), CallContext())
    assert still.message.content == "[]"
