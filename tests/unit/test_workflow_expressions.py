"""Workflow templates (a sandboxed reference grammar) and CEL conditions (cost-limited)."""

from __future__ import annotations

import pytest

from agentmesh.workflow_config import WorkflowsSettings
from dispatcher_svc.workflows.conditions import ConditionError, compile_condition
from dispatcher_svc.workflows.templates import TemplateSyntaxError, parse_ref, render

SCOPE = {
    "input": {"name": "Ada", "items": [1, 2], "odd key": "x"},
    "nodes": {"a": {"id": "A-1", "n": 2}},
    "item": "svc",
}


def test_render_keeps_types_for_a_whole_reference_and_writes_text_otherwise() -> None:
    assert render("{{ input.items }}", SCOPE) == [1, 2]
    assert render(" {{nodes.a.output.n}} ", SCOPE) == 2
    assert (
        render("hi {{ input.name }}, {{ input.items }} {{ nodes.a.output }}", SCOPE)
        == 'hi Ada, [1,2] {"id":"A-1","n":2}'
    )
    assert render({"k": ["{{ item }}", 3, '{{ input["odd key"] }}']}, SCOPE) == {"k": ["svc", 3, "x"]}
    assert render("{{ input.items[1] }}", SCOPE) == 2


@pytest.mark.parametrize(
    "template", ["{{ input.missing }}", "{{ input.items[5] }}", "{{ nodes.b.output }}", "{{ input.name.x }}"]
)
def test_a_missing_value_names_its_json_path(template: str) -> None:
    with pytest.raises(KeyError, match=r"\$\['"):
        render(template, SCOPE)


@pytest.mark.parametrize(
    "text", ["input.__class__()", "input|upper", "nodes.a", "os.environ", "input.items[-1]", "input + 1", ""]
)
def test_anything_but_a_reference_is_refused(text: str) -> None:
    with pytest.raises(TemplateSyntaxError):
        parse_ref(text)


def test_a_reference_shows_its_normalized_json_path() -> None:
    assert parse_ref("nodes.a.output.list[0].x").json_path == "$['nodes']['a']['output']['list'][0]['x']"


def test_a_condition_evaluates_over_input_and_node_outputs() -> None:
    condition = compile_condition('nodes.a.output.id.startsWith("A") && size(input.items) == 2', WorkflowsSettings())
    assert condition.nodes == frozenset({"a"})
    assert condition.evaluate({"input": SCOPE["input"], "nodes": SCOPE["nodes"]}, 10**6) is True


@pytest.mark.parametrize(
    ("source", "data", "words"),
    [
        ("input.items", {"input": {"items": [1]}}, "not a bool"),
        ("input.nope == 1", {"input": {}}, "evaluation failed"),
        (
            "input.xs.all(x, input.xs.all(y, x != y || x == y))",
            {"input": {"xs": list(range(300))}},
            "condition_max_cost",
        ),
    ],
)
def test_a_condition_that_cannot_give_a_bool_within_its_cost_is_refused(
    source: str, data: dict[str, object], words: str
) -> None:
    with pytest.raises(ConditionError, match=words):
        compile_condition(source, WorkflowsSettings()).evaluate(data, WorkflowsSettings().condition_max_cost)


def test_the_load_time_limits_of_a_condition() -> None:
    tight = WorkflowsSettings(condition_max_nodes=20, condition_max_nesting=0)
    with pytest.raises(ConditionError, match="parse-tree nodes"):
        compile_condition("1 + 2 + 3 + 4 + 5 == 15", tight)
    with pytest.raises(ConditionError, match="nested macros"):
        compile_condition("[1].all(x, x > 0)", WorkflowsSettings(condition_max_nesting=0))
