"""Typed final answers (agentmesh/answers.py, issue 41): schemas, narrowing, the answer check."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentmesh.answers import (
    ACTIONS_FIELD,
    SchemaProblem,
    check_answer,
    narrow,
    parse_schema,
    render,
    strict_compatible,
    violations_text,
    with_actions,
)

REPORT: dict[str, Any] = {
    "type": "object",
    "properties": {"service": {"type": "string"}, "healthy": {"type": "boolean"}, "replicas": {"type": "integer"}},
    "required": ["service", "healthy"],
}


def test_a_valid_answer_is_parsed() -> None:
    checked = check_answer(REPORT, '{"service": "payment-svc", "healthy": true}')
    assert checked.ok and checked.value == {"service": "payment-svc", "healthy": True}


def test_a_json_fence_is_accepted() -> None:
    assert check_answer(REPORT, '```json\n{"service": "a", "healthy": false}\n```').ok


def test_prose_is_a_json_violation_with_a_hint() -> None:
    checked = check_answer(REPORT, "The service is healthy.")
    (v,) = checked.violations
    assert (v.path, v.rule) == ("$", "json") and "JSON only" in v.hint


def test_violations_use_the_tool_argument_format() -> None:
    checked = check_answer(REPORT, '{"service": 3, "replicas": "two"}')
    found = {(v.path, v.rule) for v in checked.violations}
    assert found == {("$.healthy", "required"), ("$.service", "type"), ("$.replicas", "type")}
    typed = next(v for v in checked.violations if v.path == "$.service")
    assert typed.expected == "string" and typed.actual == "3" and typed.hint
    text = violations_text(checked.violations)
    assert "- $.healthy required: expected present" in text


def test_an_additional_property_names_what_is_allowed() -> None:
    closed = {**REPORT, "additionalProperties": False}
    (v,) = check_answer(closed, '{"service": "a", "healthy": true, "mood": "ok"}').violations
    assert (v.path, v.rule, v.actual) == ("$.mood", "additionalProperties", "'mood'")
    assert "allowed: healthy, replicas, service" in v.hint


def test_narrowing_combines_the_schemas() -> None:
    task = {"type": "object", "required": ["replicas"]}
    both = narrow(REPORT, task)
    assert both == {"allOf": [REPORT, task]}
    assert check_answer(both, '{"service": "a", "healthy": true}').violations[0].path == "$.replicas"
    assert check_answer(both, '{"service": "a", "healthy": true, "replicas": 2}').ok
    # Either alone is that one; the same schema twice is not combined.
    assert narrow(None, task) == task and narrow(REPORT, None) == REPORT and narrow(REPORT, dict(REPORT)) == REPORT
    assert narrow(None, None) is None


@pytest.mark.parametrize(
    ("task", "reason"),
    [
        ({"type": "array"}, "may only narrow"),
        ({"type": ["object", "string"]}, "may only narrow"),
        ({"required": ["x"]}, "top-level type"),
    ],
)
def test_a_task_schema_that_widens_is_refused(task: dict[str, Any], reason: str) -> None:
    with pytest.raises(SchemaProblem, match=reason):
        narrow(REPORT, task)


def test_integer_narrows_number() -> None:
    assert narrow({"type": "number"}, {"type": "integer"}) is not None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{", "not JSON"),
        ("[1]", "JSON object"),
        ('{"type": "objekt"}', "not a valid JSON Schema"),
        ('{"type": "string", "pattern": "^(a+)+$"}', "regexes are refused"),
        ('{"type": "object", "patternProperties": {"a": {}}}', "regexes are refused"),
        ('{"type": "string", "format": "regex"}', "regexes are refused"),
        ("{" + '"description": "' + "x" * 70_000 + '"}', "at most"),
    ],
)
def test_a_bad_task_schema_is_refused(text: str, reason: str) -> None:
    with pytest.raises(SchemaProblem, match=reason):
        parse_schema(text, trusted=False)


def test_a_trusted_schema_may_hold_a_pattern() -> None:
    assert parse_schema({"type": "string", "pattern": "^a"}, trusted=True)["pattern"] == "^a"


def test_the_actions_field_is_added_on_request() -> None:
    marked = {**REPORT, "x-agentmesh-actions": True}
    assert ACTIONS_FIELD in with_actions(marked)["properties"]
    assert ACTIONS_FIELD not in with_actions(REPORT)["properties"]
    bad = '{"service": "a", "healthy": true, "actions": [{"tool": "restart_pod"}]}'
    (v,) = check_answer(with_actions(marked), bad).violations
    assert v.path == "$.actions[0].tool_call_id" and v.rule == "required"


def test_strict_compatibility() -> None:
    closed = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    assert strict_compatible(closed)
    assert not strict_compatible(REPORT)
    assert not strict_compatible({"allOf": [closed]})


def test_render_for_humans() -> None:
    assert render({"service": "a", "healthy": True}) == "service: a\nhealthy: true"
    assert render([1, 2]) == json.dumps([1, 2])
    assert render("plain") == "plain"


def test_a_schema_holding_a_lone_surrogate_escape_is_refused_typed() -> None:
    """make fuzz: a task schema with "\\ud800" reached Redis and failed RunTask INTERNAL."""
    with pytest.raises(SchemaProblem, match="surrogate"):
        parse_schema('{"type": "object", "description": "\\ud800"}', trusted=False)
