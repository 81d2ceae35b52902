"""Argument parsing and schema validation: every bad call is a CONTRACT error the model can act on."""

from __future__ import annotations

import pytest

from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode
from tool_svc.validation import SchemaCheck, SchemaDefinitionError, check_tool_schema, marked_values, parse_arguments

ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {
            "type": "string",
            "pattern": "^ORD-\\d{4}-\\d{4}$",
            "description": "The order",
            "examples": ["ORD-2025-0001"],
        },
        "status": {"type": "string", "enum": ["open", "closed"]},
        "qty": {"type": "integer", "minimum": 1},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
        "target": {"anyOf": [{"type": "integer"}, {"type": "string", "format": "ipv4"}]},
    },
    "required": ["order_id", "qty"],
    "additionalProperties": False,
}


def test_not_json_names_the_position() -> None:
    with pytest.raises(AgentmeshError) as caught:
        parse_arguments('{"order_id": "ORD-2025-0001",, }', max_bytes=1000)
    err = caught.value
    assert err.code == ErrorCode.ARGUMENTS_NOT_JSON
    assert err.error_class == ErrorClass.CONTRACT
    assert err.metadata["position"] == "29"
    assert err.metadata["line"] == "1" and err.metadata["column"] == "30"
    assert err.violations and err.violations[0].path == "$"


@pytest.mark.parametrize("text", ["{'a': 1}", "{", "NaN", '{"a": Infinity}', "[" * 100_000, "\x00"])
def test_not_json_variants(text: str) -> None:
    with pytest.raises(AgentmeshError) as caught:
        parse_arguments(text, max_bytes=10**6)
    assert caught.value.code == ErrorCode.ARGUMENTS_NOT_JSON
    assert caught.value.violations


def test_empty_arguments_mean_no_arguments() -> None:
    assert parse_arguments("", max_bytes=10) == {}
    assert parse_arguments("  \n", max_bytes=10) == {}


def test_big_integers_stay_exact() -> None:
    assert parse_arguments('{"id": 9007199254740993}', max_bytes=100) == {"id": 9007199254740993}


def test_oversized_arguments() -> None:
    with pytest.raises(AgentmeshError) as caught:
        parse_arguments('{"a": "' + "x" * 2000 + '"}', max_bytes=1024)
    assert caught.value.code == ErrorCode.PAYLOAD_TOO_LARGE


def test_one_violation_per_error_with_hints() -> None:
    check = SchemaCheck.compile(ORDER_SCHEMA)
    found = {
        (v.path, v.rule): v
        for v in check.violations(
            {"order_id": "ord-2025-12", "status": "pending", "items": [{"sku": 5}], "extra": 1, "target": []}
        )
    }
    assert set(found) == {
        ("$.order_id", "pattern"),
        ("$.status", "enum"),
        ("$.qty", "required"),
        ("$.items[0].sku", "type"),
        ("$.extra", "additionalProperties"),
        ("$.target", "type"),
    }
    pattern = found[("$.order_id", "pattern")]
    assert pattern.expected == "^ORD-\\d{4}-\\d{4}$"
    assert pattern.actual == '"ord-2025-12"'
    assert "ORD-2025-0001" in pattern.hint and "ord-2025-12" in pattern.hint
    assert "open" in found[("$.status", "enum")].hint
    assert found[("$.qty", "required")].actual == ""
    assert found[("$.extra", "additionalProperties")].actual == "'extra'"
    assert "alternatives" in found[("$.target", "type")].hint


def test_valid_arguments_have_no_violations() -> None:
    assert SchemaCheck.compile(ORDER_SCHEMA).violations({"order_id": "ORD-2025-0001", "qty": 2}) == []


def test_violations_are_capped() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    found = SchemaCheck.compile(schema).violations({f"k{i}": "x" for i in range(100)})
    assert 1 <= len(found) <= 20


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "objekt"}, "not a valid Draft 2020-12 schema"),
        ({"type": "array"}, "must describe an object"),
        ([], "must be a JSON object"),
        ({"type": "object", "properties": {"c": {"type": "string", "x-agentmesh-kind": "bash"}}}, "must be one of"),
        ({"type": "object", "properties": {"c": {"type": "integer", "x-agentmesh-kind": "shell"}}}, "must have"),
        ({"type": "object", "properties": {"p": {"pattern": "("}}}, "not a valid"),
    ],
)
def test_bad_schemas_are_rejected_with_the_reason(schema: object, reason: str) -> None:
    with pytest.raises(SchemaDefinitionError, match=reason):
        check_tool_schema(schema, "input_schema", require_object=True)


def test_marked_values_follow_nesting_and_combinators() -> None:
    schema = {
        "type": "object",
        "properties": {
            "cmd": {"type": "string", "x-agentmesh-kind": "shell"},
            "steps": {"type": "array", "items": {"type": "object", "properties": {"sql": {"x-agentmesh-kind": "sql"}}}},
        },
        "anyOf": [{"properties": {"alt": {"type": "string", "x-agentmesh-kind": "path"}}}],
    }
    found = list(
        marked_values(schema, {"cmd": "ls", "steps": [{"sql": "select 1"}, {"sql": "drop table x"}], "alt": "/etc"})
    )
    assert ("$.cmd", "shell", "ls") in found
    assert ("$.steps[1].sql", "sql", "drop table x") in found
    assert ("$.alt", "path", "/etc") in found


def test_every_unexpected_property_gets_its_own_path_and_a_hint_naming_it() -> None:
    # jsonschema reports these on the parent object; a model can only fix a call that names the property.
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "additionalProperties": False,
    }
    found = SchemaCheck.compile(schema).violations({"a": "x", "extra_field": 1, "odd key": 2})
    assert [(v.path, v.rule, v.actual) for v in found] == [
        ("$.extra_field", "additionalProperties", "'extra_field'"),
        ("$['odd key']", "additionalProperties", "'odd key'"),
    ]
    assert found[0].hint == "remove property 'extra_field'; allowed: a, b"
    assert found[0].expected == "only a, b"


def test_unexpected_properties_in_nested_objects_and_with_pattern_properties() -> None:
    schema = {
        "type": "object",
        "properties": {"filter": {"type": "object", "properties": {"x": {}}, "additionalProperties": False}},
        "patternProperties": {"^tag_": {"type": "string"}},
        "additionalProperties": False,
    }
    found = SchemaCheck.compile(schema).violations({"tag_a": "ok", "filter": {"x": 1, "y": 2}, "nope": 1})
    assert [(v.path, v.actual) for v in found] == [("$.nope", "'nope'"), ("$.filter.y", "'y'")]
    assert found[0].hint == "remove property 'nope'; allowed: filter, names matching ^tag_"
    assert found[1].hint == "remove property 'y'; allowed: x"


def test_unevaluated_properties_name_the_offender() -> None:
    schema = {"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False}
    found = SchemaCheck.compile(schema).violations({"a": 1, "zz": 2})
    assert [(v.path, v.rule, v.actual) for v in found] == [("$.zz", "unevaluatedProperties", "'zz'")]
    assert "remove property 'zz'" in found[0].hint


def test_required_and_dependent_required_point_at_the_missing_property() -> None:
    schema = {
        "type": "object",
        "properties": {"card": {"type": "string"}, "cvv": {"type": "string", "description": "3 digits"}},
        "required": ["card", "my key"],
        "dependentRequired": {"card": ["cvv"]},
    }
    found = {v.path: v for v in SchemaCheck.compile(schema).violations({"card": "4111"})}
    assert set(found) == {"$['my key']", "$.cvv"}
    assert found["$['my key']"].rule == "required" and "'my key'" in found["$['my key']"].hint
    assert found["$.cvv"].rule == "dependentRequired" and found["$.cvv"].expected == "present"
    assert "'cvv'" in found["$.cvv"].hint and "'card'" in found["$.cvv"].hint


def test_property_names_and_extra_items_are_located_exactly() -> None:
    schema = {
        "type": "object",
        "properties": {"pair": {"type": "array", "prefixItems": [{}, {}], "items": False}},
        "propertyNames": {"pattern": "^[a-z]+$"},
    }
    found = {v.path: v for v in SchemaCheck.compile(schema).violations({"pair": [1, 2, 3], "Bad": 1})}
    assert set(found) == {"$.Bad", "$.pair[2]"}
    assert found["$.Bad"].actual == "'Bad'" and "rename or remove property 'Bad'" in found["$.Bad"].hint
    assert found["$.pair[2]"].rule == "items" and "at most 2" in found["$.pair[2]"].hint
