"""The scripted model fills a tool's arguments from what the goal names (issue 42): the entity for a string
field ("How cold is it in Oslo?" -> city Oslo, not the schema's example), operators written as words for an
expression field ("6 x 7", "6 times 7"), and a second entity field gets the next entity."""

from __future__ import annotations

from typing import Any

import pytest

from provider_svc.models.base import ToolDef
from provider_svc.testing.scripted.filling import _arithmetic, entities, synthesize_arguments


def tool(properties: dict[str, Any], required: list[str]) -> ToolDef:
    schema = {"type": "object", "properties": properties, "required": required}
    return ToolDef(name="t", description="", input_schema=schema)


@pytest.mark.parametrize(
    ("goal", "found"),
    [
        ("How cold is it in Oslo?", ["Oslo"]),
        ("What is the forecast for Bergen tomorrow?", ["Bergen"]),
        ("Flights from New York to São Paulo", ["New York", "São Paulo", "Flights"]),
        ('Tell me about "The Hobbit"', ["The Hobbit"]),
        ("Oslo weather please", ["Oslo"]),
        ("I fly to NYC. Is it cold there?", ["NYC"]),
        ("ALERT payment-svc: p99 above 4 s", []),
        ("what is 6 times 7?", []),
    ],
)
def test_entities_are_what_the_text_names(goal: str, found: list[str]) -> None:
    assert entities(goal) == found


def test_the_entity_beats_the_schemas_example() -> None:
    weather = tool({"city": {"type": "string", "examples": ["paris"]}}, ["city"])
    assert synthesize_arguments(weather, ["How cold is it in Oslo?"]) == {"city": "Oslo"}
    # Nothing named: the example, as before.
    assert synthesize_arguments(weather, ["how cold is it?"]) == {"city": "paris"}


def test_each_entity_field_takes_the_next_entity() -> None:
    flight = tool({"origin": {"type": "string"}, "destination": {"type": "string"}}, ["origin", "destination"])
    args = synthesize_arguments(flight, ["Book a flight from Oslo to Cairo"])
    assert args == {"origin": "Oslo", "destination": "Cairo"}


def test_fields_with_their_own_rule_are_not_given_an_entity() -> None:
    shaped = tool(
        {
            "service": {"type": "string", "pattern": "^[a-z][a-z0-9-]+$"},
            "query": {"type": "string"},
            "level": {"type": "string", "enum": ["info", "error"]},
        },
        ["service", "query", "level"],
    )
    args = synthesize_arguments(shaped, ["Errors of payment-svc in Oslo"])
    # The pattern, the free-text and the enum rules decide these fields, never the entity.
    assert args["query"] == "Errors of payment-svc in Oslo" and args["level"] == "error"
    assert "Oslo" not in args["service"]


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("What is 6 times 7?", "6 * 7"),
        ("What is 6 x 7?", "6 * 7"),
        ("6 multiplied by 7", "6 * 7"),
        ("10 divided by 4 plus 1", "10 / 4 + 1"),
        ("What is 1234 * 5678?", "1234 * 5678"),
    ],
)
def test_operators_written_as_words_make_the_expression(text: str, expression: str) -> None:
    assert _arithmetic([text]) == expression
    calculator = tool({"expression": {"type": "string", "examples": ["(3+4.5)*1.7"]}}, ["expression"])
    assert synthesize_arguments(calculator, [text]) == {"expression": expression}
