"""Hostile JSON text in the core helpers (issue 19): depth found before parsing, lone surrogates found
after, and a model's tool call hashed whatever its text holds."""

from __future__ import annotations

import hashlib
import json

import pytest

from agentmesh.chat import ToolCall, json_depth_exceeds, lone_surrogate_path


@pytest.mark.parametrize(
    ("text", "limit", "deep"),
    [
        ("[" * 100_000 + "]" * 100_000, 64, True),
        ('{"a":' * 20_000 + "1" + "}" * 20_000, 64, True),
        ("[" * 100_000, 64, True),  # unterminated: still found, without parsing
        ("[[[1]]]", 3, False),
        ("[[[[1]]]]", 3, True),
        ('["[[[[[[[[", "{{{{{{{{{{"]', 2, False),  # brackets inside strings do not count
        ('["\\"[[[[[[[["]', 2, False),  # nor after an escaped quote
        ('{"a": [1, 2], "b": [3, [4]]}', 3, False),
        ('"unterminated [[[[[', 2, True),  # not JSON anyway: the parser never sees it
    ],
)
def test_json_depth_exceeds(text: str, limit: int, deep: bool) -> None:
    assert json_depth_exceeds(text, limit) is deep


def test_lone_surrogates_are_found_with_their_path() -> None:
    text = '{"a": ["ok", "x\\ud800"]}'
    assert lone_surrogate_path(text, json.loads(text)) == "$.a[1]"
    key = '{"\\udfff": 1}'
    assert lone_surrogate_path(key, json.loads(key)) == "$ (a key)"
    pair = '["\\ud83d\\ude00", "\\u00e9"]'  # a surrogate pair is a real character
    assert lone_surrogate_path(pair, json.loads(pair)) is None


@pytest.mark.parametrize(
    "arguments",
    ['{"expression": "\\ud800"}', '"\\udfff"', "[" * 100_000 + "]" * 100_000, '{"a":' * 20_000 + "1" + "}" * 20_000],
)
def test_a_tool_call_with_hostile_arguments_still_has_a_hash_and_a_signature(arguments: str) -> None:
    # Before: UnicodeEncodeError / RecursionError, which failed the task INTERNAL on every resume.
    call = ToolCall("c1", "calculator", arguments)
    assert len(call.arguments_sha256()) == 64
    assert call.signature().startswith("calculator:")


def test_the_hash_of_ordinary_arguments_is_unchanged() -> None:
    call = ToolCall("c1", "t", '{"b": 1, "a": "é"}')
    assert call.arguments_sha256() == hashlib.sha256('{"a":"é","b":1}'.encode()).hexdigest()
