"""Hostile argument text (issue 19): invalid Unicode and deep nesting are in-band CONTRACT errors
(ARGUMENTS_NOT_JSON) with a hint the model can act on, never an exception out of the pipeline."""

from __future__ import annotations

import pytest

from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode
from tool_svc.validation import parse_arguments


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"expression": "\\ud800"}', "$.expression"),
        ('{"expression": "1+\\uDFFF"}', "$.expression"),
        ('{"items": ["a", "\\udbff"]}', "$.items[1]"),
        ('{"\\ud800": 1}', "$ (a key)"),
    ],
)
def test_a_lone_surrogate_escape_is_arguments_not_json_saying_the_text_must_be_valid_unicode(
    text: str, where: str
) -> None:
    with pytest.raises(AgentmeshError) as caught:
        parse_arguments(text, max_bytes=10_000)
    err = caught.value
    assert err.code is ErrorCode.ARGUMENTS_NOT_JSON and err.error_class is ErrorClass.CONTRACT
    [violation] = err.violations
    assert "must be valid Unicode" in violation.hint and where in violation.hint
    # Everything the error carries can be encoded (it travels in a protobuf reply).
    for text_field in (err.message, violation.hint, violation.actual, violation.path):
        text_field.encode("utf-8")


def test_a_surrogate_pair_is_a_real_character() -> None:
    assert parse_arguments('{"emoji": "\\ud83d\\ude00"}', max_bytes=1000) == {"emoji": "😀"}


@pytest.mark.parametrize(
    "text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 20_000 + "1" + "}" * 20_000, '{"a": ' + "[" * 65 + "]" * 65 + "}"]
)
def test_nesting_deeper_than_the_limit_is_refused_before_parsing(text: str) -> None:
    with pytest.raises(AgentmeshError) as caught:
        parse_arguments(text, max_bytes=10**6)
    assert caught.value.code is ErrorCode.ARGUMENTS_NOT_JSON
    assert "deeper than 64 levels" in caught.value.violations[0].hint


def test_the_depth_limit_is_a_parameter() -> None:
    assert parse_arguments('{"a": [[1]]}', max_bytes=100, max_depth=3) == {"a": [[1]]}
    with pytest.raises(AgentmeshError):
        parse_arguments('{"a": [[[1]]]}', max_bytes=100, max_depth=3)
