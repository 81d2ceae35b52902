"""JSON Schema regular expressions in linear time: RE2 (google-re2) instead of Python's `re`
(docs/design.md §5, §15; issue 39).

A tool's input schema comes from an admin or from an MCP server, and the arguments it checks come from
an agent: Python's backtracking `re` lets a pattern such as `^(a+)+$` take seconds for a few dozen
characters of argument, on tool_svc's event loop. Here every regex a schema uses is RE2's:

- `check_schema_patterns`: at registration / mount, every `pattern`, every `patternProperties` key must
  compile with RE2 (no look-around, no back-references); otherwise the tool is refused with the reason.
- `LinearValidator`: Draft 2020-12 as jsonschema implements it, with the keywords that match regexes
  (`pattern`, `patternProperties`, `additionalProperties` next to `patternProperties`) and the `regex`
  format redefined on RE2, through jsonschema's public extension API (`validators.extend`, a
  `FormatChecker` of our own). `unevaluatedProperties` beside `patternProperties` would take
  jsonschema's own `re` path: such a schema is refused at registration.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

import re2
from jsonschema import Draft202012Validator, FormatChecker, validators  # type: ignore[import-untyped, unused-ignore]
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped, unused-ignore]

__all__ = ["LINEAR_FORMAT_CHECKER", "LinearValidator", "PatternError", "check_schema_patterns", "search"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the caller's news, not a line on stderr
_OPTIONS.max_mem = 8 << 20  # a pattern whose program needs more is refused (RE2 says "pattern too large")


class PatternError(ValueError):
    """A regex RE2 cannot compile; the message says which and why."""


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(f"{pattern[:200]!r} is not a linear-time (RE2) regular expression: {reason}") from None


def compile_pattern(pattern: str) -> Any:
    """The RE2 program of `pattern` (cached); PatternError when RE2 cannot compile it."""
    return _compiled(pattern)


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches anywhere in `text` (JSON Schema's `pattern` is unanchored)."""
    return _compiled(pattern).search(text) is not None


_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SINGLE = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")


def _subschemas(schema: Any, where: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if not isinstance(schema, Mapping):
        return
    yield where, schema
    for key, sub in schema.items():
        if key in _NAMED and isinstance(sub, Mapping):
            for name, child in sub.items():
                yield from _subschemas(child, f"{where}/{key}/{name}")
        elif key in _SINGLE or key == "unevaluatedProperties":
            yield from _subschemas(sub, f"{where}/{key}")
        elif key in _LISTS and isinstance(sub, list):
            for i, child in enumerate(sub):
                yield from _subschemas(child, f"{where}/{key}/{i}")


def check_schema_patterns(schema: Any) -> None:
    """PatternError naming the place of the first regex RE2 cannot compile, or of a combination whose
    check would not be linear (module doc)."""
    for where, sub in _subschemas(schema, "#"):
        pattern = sub.get("pattern")
        if isinstance(pattern, str):
            try:
                compile_pattern(pattern)
            except PatternError as exc:
                raise PatternError(f"at {where}/pattern: {exc}") from None
        keyed = sub.get("patternProperties")
        if isinstance(keyed, Mapping):
            for key in keyed:
                try:
                    compile_pattern(str(key))
                except PatternError as exc:
                    raise PatternError(f"at {where}/patternProperties: {exc}") from None
            if "unevaluatedProperties" in sub:
                raise PatternError(
                    f"at {where}: unevaluatedProperties beside patternProperties is not supported "
                    "(use additionalProperties)"
                )


# -- the keywords, as jsonschema's own (jsonschema/_keywords.py) with RE2 in place of re ---------------


def _pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, keyed: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in keyed.items():
        for name, value in instance.items():
            if search(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [
        name for name in instance if name not in properties and not any(search(pattern, name) for pattern in patterns)
    ]


def _additional_properties(
    validator: Any, allowed: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        joined = ", ".join(repr(each) for each in sorted(extras, key=str))
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({joined} {verb} unexpected)")


LINEAR_FORMAT_CHECKER = FormatChecker()
"""Every format jsonschema knows, with `regex` checked by RE2 (what `pattern` will use)."""


@LINEAR_FORMAT_CHECKER.checks("regex", raises=PatternError)  # type: ignore[untyped-decorator, unused-ignore]
def _is_regex(instance: object) -> bool:
    if isinstance(instance, str):
        compile_pattern(instance)
    return True


LinearValidator: Any = validators.extend(
    Draft202012Validator,
    validators={
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
    format_checker=LINEAR_FORMAT_CHECKER,
)
"""Draft 2020-12 with RE2 for every regex an instance is matched against."""
