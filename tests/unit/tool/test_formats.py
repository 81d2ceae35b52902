"""tool_svc.formats (issue 51): OpenAI / BFCL / Anthropic / MCP definitions -> tool contracts."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentmesh.config import ToolsSettings
from agentmesh.errors import ErrorCode, InvalidRequestError
from tool_svc.builtin import default_specs
from tool_svc.formats import convert, convert_all
from tool_svc.mcp.names import registry_name
from tool_svc.registry import ToolRegistry
from tool_svc.validation import SchemaCheck

BFCL_DATA = Path(__file__).resolve().parents[3] / "bench" / "data" / "bfcl"

BFCL = {
    "name": "ChaDri.change_drink",
    "description": "Modifies the existing drink order.",
    "parameters": {
        "type": "dict",
        "required": ["new_preferences"],
        "properties": {
            "drink_id": {"type": "string", "default": "0000"},
            "new_preferences": {
                "type": "dict",
                "properties": {"size": {"type": "string", "enum": ["small", "large"]}, "ratio": {"type": "float"}},
            },
            "pair": {"type": "tuple", "items": {"type": "integer"}},
            "anything": {"type": "any"},
        },
    },
}

SHAPES: list[tuple[str, dict[str, Any], str]] = [
    ("bfcl", BFCL, "cha_dri_change_drink"),
    (
        "openai tool",
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                "strict": True,
            },
        },
        "get_weather",
    ),
    ("openai legacy function, no parameters", {"name": "ping", "description": "Checks liveness."}, "ping"),
    ("anthropic", {"name": "Search", "description": "Searches.", "input_schema": {"type": "object"}}, "search"),
    ("mcp", {"name": "Get.Item-v2", "description": "An item.", "inputSchema": {"type": "object"}}, "get_item_v2"),
    (
        "camel case",
        {"name": "Movies_1_FindMovies", "description": "Finds.", "parameters": {"type": "dict"}},
        "movies_1_find_movies",
    ),
    (
        "gemini upper-case types",
        {
            "name": "lookup",
            "description": "Looks up.",
            "parameters": {
                "type": "OBJECT",
                "properties": {"n": {"type": "INTEGER"}, "tags": {"type": "ARRAY", "items": {"type": "STRING"}}},
            },
        },
        "lookup",
    ),
    ("properties without type", {"name": "f", "description": "F.", "parameters": {"properties": {"a": {}}}}, "f"),
    ("leading digit", {"name": "3d.render", "description": "Renders.", "parameters": {"type": "dict"}}, "fn_3d_render"),
]


@pytest.mark.parametrize(("shape", "definition", "name"), SHAPES, ids=[s[0] for s in SHAPES])
def test_shapes_convert_to_a_valid_contract(shape: str, definition: dict[str, Any], name: str) -> None:
    contract = convert(definition)
    assert contract.name == name
    assert contract.input_schema["type"] == "object"
    SchemaCheck.compile(contract.input_schema)  # a usable Draft 2020-12 schema
    assert contract.to_tooldef(executor="builtin").name == name


def test_bfcl_types_are_mapped() -> None:
    schema = convert(BFCL).input_schema
    props = schema["properties"]
    assert props["new_preferences"]["type"] == "object"
    assert props["new_preferences"]["properties"]["ratio"]["type"] == "number"
    assert props["pair"]["type"] == "array" and props["pair"]["items"]["type"] == "integer"
    assert "type" not in props["anything"]
    assert props["new_preferences"]["properties"]["size"]["enum"] == ["small", "large"]
    check = SchemaCheck.compile(schema)
    assert not check.violations({"new_preferences": {"ratio": 0.5}})
    assert check.violations({"new_preferences": {"ratio": "half"}})
    assert check.violations({})  # required kept


def test_examples_are_kept() -> None:
    contract = convert({"name": "f", "description": "F.", "examples": ["do f"]})
    assert contract.examples == ("do f",)


INVALID: list[tuple[str, Any, str]] = [
    ("not an object", ["name"], "tool"),
    ("no name", {"description": "x"}, "tool.name"),
    ("empty description", {"name": "f", "description": " "}, "tool.description"),
    ("function not an object", {"type": "function", "function": "f"}, "tool.function"),
    (
        "unknown type",
        {"name": "f", "description": "F.", "parameters": {"type": "dict", "properties": {"a": {"type": "complex"}}}},
        "tool.parameters.properties.a.type",
    ),
    ("type not a name", {"name": "f", "description": "F.", "parameters": {"type": 3}}, "tool.parameters.type"),
    (
        "parameters not an object type",
        {"name": "f", "description": "F.", "parameters": {"type": "string"}},
        "tool.parameters",
    ),
    ("schema not an object", {"name": "f", "description": "F.", "parameters": "x"}, "tool.parameters"),
    (
        "invalid schema",
        {"name": "f", "description": "F.", "parameters": {"type": "object", "required": "a"}},
        "tool.parameters",
    ),
    ("examples not strings", {"name": "f", "description": "F.", "examples": [1]}, "tool.examples"),
]


@pytest.mark.parametrize(("case", "definition", "field"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_definitions_are_typed_errors(case: str, definition: Any, field: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        convert(definition)
    assert caught.value.code == ErrorCode.INVALID_REQUEST
    assert caught.value.field == field


def test_name_mapping_round_trips() -> None:
    originals = ["ChaDri.change_drink", "uber.ride", "HNA_NEWS.search", "todoIdx", "x" * 80]
    contracts, names = convert_all({"name": n, "description": "D."} for n in originals)
    for original, contract in zip(originals, contracts, strict=True):
        assert contract.original_name == original
        assert names.registry(original) == contract.name == registry_name("", original, split_words=True)
        assert names.original(contract.name) == original
        assert len(contract.name) <= 64
    assert names.original("nope") is None
    _, prefixed = convert_all([{"name": "uber.ride", "description": "D."}], prefix="bfcl")
    assert prefixed.original("bfcl__uber_ride") == "uber.ride"


def test_two_names_mapping_to_one_are_an_error() -> None:
    with pytest.raises(InvalidRequestError, match="both map to uber_ride") as caught:
        convert_all([{"name": "uber.ride", "description": "D."}, {"name": "uberRide", "description": "D."}])
    assert caught.value.field == "tools[1].name"
    with pytest.raises(InvalidRequestError, match="defined twice"):
        convert_all([{"name": "f", "description": "D."}, {"name": "f", "description": "D."}])


def test_every_bfcl_function_registers_after_conversion() -> None:
    # Before issue 51 none did as written: top-level "dict", "float", dotted and upper-case names.
    registry = ToolRegistry(ToolsSettings(http_allowlist=["http://127.0.0.1:*/"]), default_specs())
    with gzip.open(BFCL_DATA / "BFCL_v4_multiple.json.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    converted = 0
    for line in lines:  # one question's candidates at a time: across questions "car.rental" meets "car_rental"
        contracts, names = convert_all(json.loads(line)["function"])
        for contract in contracts:
            registry.compile(contract.to_tooldef(endpoint_url="http://127.0.0.1:8080/"), "runtime")
            assert names.original(contract.name) == contract.original_name
            converted += 1
    assert converted > 500


def test_accented_names_are_folded_not_cut() -> None:
    contracts, names = convert_all(
        {"name": n, "description": "D."} for n in ["café.lookup", "Müller_Suche", "ŽluťoučkýKůň", "ｆｕｌｌ"]
    )
    assert [c.name for c in contracts] == ["cafe_lookup", "muller_suche", "zlutoucky_kun", "full"]
    assert names.original("cafe_lookup") == "café.lookup"


def test_non_latin_names_stay_apart_and_map_back() -> None:
    # Before, each mapped to a run of "_" as long as the name: two Chinese names of one length collided.
    originals = ["获取客户资料", "查询客户资料", "привет", "get_客户", "get_订单", "9号"]
    contracts, names = convert_all({"name": n, "description": "D."} for n in originals)
    mapped = [c.name for c in contracts]
    assert len(set(mapped)) == len(originals)
    for original, name in zip(originals, mapped, strict=True):
        assert re.fullmatch(r"[a-z][a-z0-9_]{0,63}", name), name
        assert names.original(name) == original
        assert convert({"name": original, "description": "D."}).name == name  # deterministic
    assert mapped[0].startswith("fn_") and mapped[3].startswith("get_") and mapped[5].startswith("fn_9_")
    assert convert({"name": "获取" * 40, "description": "D."}).name.startswith("fn_")
    # A lone surrogate (not encodable as UTF-8) still maps, never raises.
    assert convert({"name": "f\ud800", "description": "D."}).name == "f"
