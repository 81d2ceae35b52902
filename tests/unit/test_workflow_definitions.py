"""Workflow definitions (issue 46): every invalid case gets a typed error naming the node and the
field; the examples load; the committed JSON Schema is the model's and validates them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator  # type: ignore[import-untyped, unused-ignore]

from agentmesh.config import ConfigError, Settings, load_settings
from agentmesh.errors import ErrorCode
from agentmesh.workflow_config import WorkflowsSettings
from dispatcher_svc.workflows.catalog import definition_from_data, load_catalog, load_catalog_or_config_error
from dispatcher_svc.workflows.errors import WorkflowInvalidError
from dispatcher_svc.workflows.schema import SCHEMA_PATH, render_schema
from dispatcher_svc.workflows.validate import Names, compile_workflow

ROOT = Path(__file__).resolve().parents[2]
NAMES = Names(frozenset({"triage", "writer"}), frozenset({"lookup", "calculator"}), ("crm__",))
LIMITS = WorkflowsSettings()


def base() -> dict[str, Any]:
    return {
        "name": "flow",
        "nodes": [
            {"id": "a", "type": "agent", "agent": "triage", "goal": "read {{ input.text }}"},
            {
                "id": "b",
                "type": "tool",
                "tool": "lookup",
                "after": ["a"],
                "arguments": {"id": "{{ nodes.a.output.id }}"},
            },
            {"id": "c", "type": "condition", "after": ["b"], "when": "nodes.b.output.ok", "then": ["d"], "else": ["e"]},
            {"id": "d", "type": "agent", "agent": "writer", "goal": "ok {{ nodes.b.output }}", "fallback": "f"},
            {"id": "e", "type": "agent", "agent": "writer", "goal": "no"},
            {"id": "f", "type": "agent", "agent": "writer", "goal": "fallback"},
            {
                "id": "p",
                "type": "parallel",
                "after": ["a"],
                "over": "{{ nodes.a.output.items }}",
                "max_concurrency": 2,
                "do": {"type": "tool", "tool": "crm__fetch", "arguments": {"x": "{{ item.x }}"}},
            },
            {"id": "j", "type": "join", "mode": "any", "after": ["d", "e"]},
        ],
    }


def node(data: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(n for n in data["nodes"] if n["id"] == node_id)


def set_field(node_id: str, key: str, value: Any) -> Any:
    def change(data: dict[str, Any]) -> None:
        node(data, node_id)[key] = value

    return change


def add_node(spec: dict[str, Any]) -> Any:
    return lambda data: data["nodes"].append(spec)


# (case, change of the valid base, node named, field named, words of the reason)
INVALID: list[tuple[str, Any, str, str, str]] = [
    ("unknown node type", add_node({"id": "x", "type": "loop"}), "x", "type", "unknown node type 'loop'"),
    ("unknown key", set_field("a", "retries", 3), "a", "retries", "unknown key"),
    ("bad id", add_node({"id": "X-1", "type": "agent", "agent": "triage", "goal": "g"}), "X-1", "id", "pattern"),
    ("duplicate id", add_node({"id": "a", "type": "agent", "agent": "triage", "goal": "g"}), "a", "id", "two nodes"),
    ("dangling after", set_field("b", "after", ["zz"]), "b", "after", "unknown node 'zz'"),
    ("dangling then", set_field("c", "then", ["zz"]), "c", "then", "unknown node 'zz'"),
    ("dangling else", set_field("c", "else", ["zz"]), "c", "else", "unknown node 'zz'"),
    ("dangling fallback", set_field("d", "fallback", "zz"), "d", "fallback", "unknown node 'zz'"),
    ("cycle", set_field("a", "after", ["b"]), "a", "after", "cycle: a -> b -> a"),
    ("self cycle", set_field("a", "after", ["a"]), "a", "after", "cycle"),
    ("unknown agent", set_field("a", "agent", "ghost"), "a", "agent", "unknown agent 'ghost'"),
    ("unknown tool", set_field("b", "tool", "ghost"), "b", "tool", "unknown tool 'ghost'"),
    ("unknown do tool", set_field("p", "do", {"type": "tool", "tool": "ghost"}), "p", "do.tool", "unknown tool"),
    (
        "unknown do agent",
        set_field("p", "do", {"type": "agent", "agent": "ghost", "goal": "g"}),
        "p",
        "do.agent",
        "unknown agent",
    ),
    ("template not ancestor", set_field("a", "goal", "{{ nodes.b.output }}"), "a", "goal", "not an ancestor"),
    ("template sibling", set_field("e", "goal", "{{ nodes.d.output }}"), "e", "goal", "cannot have run yet"),
    ("template unknown node", set_field("e", "goal", "{{ nodes.zz.output }}"), "e", "goal", "unknown node 'zz'"),
    ("template call", set_field("a", "goal", "{{ input.x.__class__() }}"), "a", "goal", "no calls"),
    ("template other root", set_field("a", "goal", "{{ config.key }}"), "a", "goal", "only input, nodes and item"),
    ("template unclosed", set_field("a", "goal", "{{ input.x"), "a", "goal", "unclosed"),
    (
        "template without output",
        set_field("b", "arguments", {"id": "{{ nodes.a.id }}"}),
        "b",
        "arguments",
        "nodes.<id>.output",
    ),
    ("item outside parallel", set_field("a", "goal", "{{ item }}"), "a", "goal", "item exists only"),
    ("over not one reference", set_field("p", "over", "items: {{ input.items }}"), "p", "over", "one reference"),
    ("over not ancestor", set_field("p", "over", "{{ nodes.b.output }}"), "p", "over", "not an ancestor"),
    ("condition not CEL", set_field("c", "when", "nodes.b.output.ok &&"), "c", "when", "not CEL"),
    ("condition not ancestor", set_field("c", "when", "nodes.e.output.ok"), "c", "when", "not an ancestor"),
    ("condition nodes by index", set_field("c", "when", 'nodes["b"].output.ok'), "c", "when", "nodes.<id>.output"),
    ("condition nesting", set_field("c", "when", "input.a.all(x, x.all(y, y.all(z, z)))"), "c", "when", "nested"),
    ("condition too long", set_field("c", "when", "true && " * 300 + "true"), "c", "when", "condition_max_chars"),
    ("then and else", set_field("c", "else", ["d"]), "c", "else", "in then and else"),
    ("fallback of itself", set_field("d", "fallback", "d"), "d", "fallback", "cannot name itself"),
    ("fallback twice", set_field("e", "fallback", "f"), "e", "fallback", "already the fallback of 'd'"),
    ("fallback waited for", set_field("j", "after", ["d", "f"]), "j", "after", "'f' is a fallback node"),
    ("fallback not a step", set_field("d", "fallback", "j"), "d", "fallback", "not an agent or tool"),
    ("join n too large", set_field("j", "mode", "n"), "j", "n", "mode n needs"),
    ("join n with any", set_field("j", "n", 1), "j", "n", "n is for mode n"),
    ("join without inputs", add_node({"id": "k", "type": "join"}), "k", "after", "needs the nodes"),
    ("output schema", set_field("a", "output_schema", {"type": "nope"}), "a", "output_schema", "not a JSON Schema"),
    ("missing goal", set_field("a", "goal", ""), "a", "goal", "at least 1"),
    ("retry out of range", set_field("a", "retry", {"max_attempts": 0}), "a", "retry.max_attempts", "greater than"),
]


@pytest.mark.parametrize(("case", "change", "node_id", "field", "words"), INVALID, ids=[c[0] for c in INVALID])
def test_every_invalid_definition_names_its_node_and_field(
    case: str, change: Any, node_id: str, field: str, words: str
) -> None:
    data = copy.deepcopy(base())
    change(data)
    with pytest.raises(WorkflowInvalidError) as caught:
        compile_workflow(definition_from_data(data), NAMES, LIMITS)
    error = caught.value
    assert error.code == ErrorCode.INVALID_REQUEST
    assert (error.workflow, error.node, error.field) == ("flow", node_id, field), str(error)
    assert words in error.reason, str(error)
    assert f"node '{node_id}'" in error.message and field in error.message


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda d: d.update(schedule={"cron": "0 25 * * *"}), "schedule.cron", "hour"),
        (lambda d: d.update(schedule={"cron": "* * *"}), "schedule.cron", "5 fields"),
        (lambda d: d.update(schedule={"cron": "*/0 * * * *"}), "schedule.cron", "step"),
        (lambda d: d.update(schedule={"cron": "0 7 * * *", "timezone": "Mars/Base"}), "schedule.timezone", "time zone"),
        (lambda d: d.update(input_schema={"type": 3}), "input_schema", "not a JSON Schema"),
        (lambda d: d.update(nodes=[]), "nodes", "at least 1"),
    ],
)
def test_workflow_level_errors_name_the_field(change: Any, field: str, words: str) -> None:
    data = copy.deepcopy(base())
    change(data)
    with pytest.raises(WorkflowInvalidError) as caught:
        compile_workflow(definition_from_data(data), NAMES, LIMITS)
    assert (caught.value.node, caught.value.field) == ("", field), str(caught.value)
    assert words in caught.value.reason


def test_the_base_definition_is_valid_and_its_graph_is_right() -> None:
    workflow = compile_workflow(definition_from_data(base()), NAMES, LIMITS)
    assert workflow.deps["d"] == ("c",) and workflow.deps["f"] == ("d",)
    assert workflow.fallback_of == {"f": "d"}
    assert workflow.branches == {"d": (("c", True),), "e": (("c", False),)}
    assert workflow.order.index("a") < workflow.order.index("b") < workflow.order.index("c") < workflow.order.index("j")


def settings(**workflows: Any) -> Settings:
    return Settings(auth={"mode": "disabled"}, agents=[{"id": "triage"}], workflows=workflows)


def test_a_bad_inline_definition_is_a_config_error_at_dispatcher_start() -> None:
    bad = {"name": "w", "nodes": [{"id": "a", "type": "agent", "agent": "ghost", "goal": "g"}]}
    with pytest.raises(ConfigError, match="workflow 'w': node 'a': agent: unknown agent 'ghost'"):
        load_catalog_or_config_error(settings(definitions=[bad]))


def test_folder_files_load_and_their_errors_name_the_file(tmp_path: Path) -> None:
    good = {"name": "one", "nodes": [{"id": "a", "type": "agent", "agent": "triage", "goal": "g"}]}
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(good), encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not a workflow", encoding="utf-8")
    assert list(load_catalog(settings(folder=tmp_path))) == ["one"]
    (tmp_path / "two.json").write_text(json.dumps({**good, "name": "one"}), encoding="utf-8")
    with pytest.raises(WorkflowInvalidError, match="two workflows"):
        load_catalog(settings(folder=tmp_path))
    (tmp_path / "two.json").write_text(
        json.dumps({"name": "two", "nodes": [{"id": "a", "type": "x"}]}), encoding="utf-8"
    )
    with pytest.raises(WorkflowInvalidError, match=r"two \(two.json\)': node 'a': type"):
        load_catalog(settings(folder=tmp_path))
    with pytest.raises(WorkflowInvalidError, match="not a folder"):
        load_catalog(settings(folder=tmp_path / "missing"))


def test_two_inline_definitions_with_one_name_are_a_config_error() -> None:
    one = {"name": "w", "nodes": [{"id": "a", "type": "agent", "agent": "triage", "goal": "g"}]}
    with pytest.raises(ValueError, match="used twice: w"):
        settings(definitions=[one, one])


def test_the_examples_load_with_their_configuration() -> None:
    loaded = load_settings(
        [ROOT / "agentmesh.yaml", ROOT / "agentmesh.demo.yaml", ROOT / "examples" / "workflows.agentmesh.yaml"]
    )
    catalog = load_catalog(
        loaded.model_copy(
            update={"workflows": loaded.workflows.model_copy(update={"folder": ROOT / "examples" / "workflows"})}
        )
    )
    assert sorted(catalog) == ["incident", "support"]
    incident = catalog["incident"]
    assert incident.fallback_of == {"metrics_from_logs": "metrics"}
    assert incident.definition.schedule is not None and incident.definition.schedule.cron == "0 7 * * *"
    assert incident.nodes["logs"].type == "parallel"
    assert catalog["support"].branches == {"escalate": (("needs_human", True),), "reply": (("needs_human", False),)}


def test_the_committed_schema_is_the_models_and_validates_the_examples() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == render_schema(), (
        "docs/workflow.schema.json is stale: run python -m dispatcher_svc.workflows.schema"
    )
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    for path in sorted((ROOT / "examples" / "workflows").glob("*.yaml")):
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text(encoding="utf-8"))))
        assert not errors, f"{path.name}: {errors[0].message}"
    bad = copy.deepcopy(base())
    bad["nodes"].append({"id": "x", "type": "loop"})
    assert list(validator.iter_errors(bad))
