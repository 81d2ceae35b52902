"""Argument parsing and JSON Schema validation -> CONTRACT errors a model can act on (docs/design.md §3, §5).

- `parse_arguments`: the raw `arguments_json` -> a value, or ARGUMENTS_NOT_JSON with the parse position.
- `SchemaCheck`: a compiled Draft 2020-12 schema; `violations(value)` gives one `Violation` per error with
  the JSON path, the rule, what was expected, what was given, and a hint taken from the schema's
  description / pattern / enum / examples (the wording is `tool_svc.violations`).
- `check_tool_schema`: the registration-time check (a bad schema is rejected with the reason).
- `marked_values`: the values of fields marked `x-agentmesh-kind` (for the danger guard).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# No py.typed in jsonschema; types-jsonschema may or may not be installed (hence unused-ignore).
from jsonschema import Draft202012Validator  # type: ignore[import-untyped, unused-ignore]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped, unused-ignore]

from agentmesh.chat import DEFAULT_MAX_JSON_DEPTH, json_depth_exceeds, lone_surrogate_path
from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from tool_svc.call import CallState
from tool_svc.linear_regex import LINEAR_FORMAT_CHECKER, LinearValidator, PatternError, check_schema_patterns
from tool_svc.model import Outcome, arguments_sha256, call_sha256
from tool_svc.violations import clip, violations_for

KIND_KEYWORD = "x-agentmesh-kind"
KINDS = frozenset({"shell", "sql", "path", "code"})
MAX_VIOLATIONS = 20


# --- parsing ----------------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are not JSON (RFC 8259) although Python's parser accepts them.
    raise ValueError(f"{name} is not valid JSON")


def _not_json(reason: str, hint: str) -> AgentmeshError:
    return AgentmeshError(
        ErrorCode.ARGUMENTS_NOT_JSON,
        f"arguments are not valid JSON: {reason}",
        violations=[Violation(path="$", rule="json", expected="a JSON object", hint=hint)],
    )


def parse_arguments(text: str, *, max_bytes: int, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> Any:
    """The parsed arguments; an empty string means no arguments (`{}`), as some models send.

    Raises AgentmeshError ARGUMENTS_NOT_JSON (metadata position/line/column; also for text nesting
    deeper than `max_depth`, found before parsing, and for a lone surrogate escape such as "\\ud800",
    which is not valid Unicode) or PAYLOAD_TOO_LARGE.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise AgentmeshError(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"arguments are {size} bytes; the limit is {max_bytes}",
            metadata={"limit_bytes": str(max_bytes), "size_bytes": str(size)},
        )
    if not text.strip():
        return {}
    if json_depth_exceeds(text, max_depth):
        raise _not_json(
            f"nested deeper than {max_depth} levels",
            f"the arguments nest arrays/objects deeper than {max_depth} levels; send a flatter object",
        )
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        near = text[max(0, exc.pos - 20) : exc.pos + 20]
        raise AgentmeshError(
            ErrorCode.ARGUMENTS_NOT_JSON,
            f"arguments are not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} (char {exc.pos})",
            violations=[
                Violation(
                    path="$",
                    rule="json",
                    expected="a JSON object",
                    actual=clip(near),
                    hint=f"{exc.msg} at char {exc.pos}; send the arguments as one JSON object with double-quoted keys",
                )
            ],
            metadata={"position": str(exc.pos), "line": str(exc.lineno), "column": str(exc.colno)},
        ) from None
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise _not_json(reason, reason) from None
    where = lone_surrogate_path(text, value)
    if where is not None:
        raise _not_json(
            f"a lone surrogate escape at {clip(where, 120)}",
            f"the text must be valid Unicode: {clip(where, 120)} holds a lone surrogate escape (\\ud800-\\udfff "
            "without its pair); escape real characters only, or send them as UTF-8",
        )
    return value


# --- schema checks ----------------------------------------------------------------------------------


class SchemaDefinitionError(ValueError):
    """A tool's schema is unusable; the message says why and where."""


def _walk_schema(schema: Any, where: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if isinstance(schema, Mapping):
        yield where, schema
        for key, sub in schema.items():
            if key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
                if isinstance(sub, Mapping):
                    for name, child in sub.items():
                        yield from _walk_schema(child, f"{where}/{key}/{name}")
            elif key in ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames"):
                yield from _walk_schema(sub, f"{where}/{key}")
            elif key in ("allOf", "anyOf", "oneOf", "prefixItems") and isinstance(sub, list):
                for i, child in enumerate(sub):
                    yield from _walk_schema(child, f"{where}/{key}/{i}")


def check_tool_schema(schema: Any, what: str, *, require_object: bool) -> None:
    """Raises SchemaDefinitionError unless `schema` is a usable Draft 2020-12 schema."""
    if not isinstance(schema, Mapping):
        raise SchemaDefinitionError(f"{what} must be a JSON object, got {type(schema).__name__}")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "(root)"
        raise SchemaDefinitionError(f"{what} is not a valid Draft 2020-12 schema at {where}: {exc.message}") from None
    try:
        check_schema_patterns(schema)
    except PatternError as exc:
        raise SchemaDefinitionError(f"{what} {exc}") from None
    if require_object and schema.get("type") != "object":
        raise SchemaDefinitionError(f'{what} must describe an object ("type": "object"): arguments are a JSON object')
    for where, sub in _walk_schema(schema, "#"):
        kind = sub.get(KIND_KEYWORD)
        if kind is None:
            continue
        if kind not in KINDS:
            raise SchemaDefinitionError(
                f"{what} at {where}: {KIND_KEYWORD} must be one of {sorted(KINDS)}, got {kind!r}"
            )
        allowed = sub.get("type")
        types = {allowed} if isinstance(allowed, str) else set(allowed or ())
        if not types or not types <= {"string", "array"}:
            raise SchemaDefinitionError(
                f'{what} at {where}: a field marked {KIND_KEYWORD} must have "type": "string" (or an array of strings)'
            )


def has_marks(schema: Mapping[str, Any]) -> bool:
    """Whether any subschema carries x-agentmesh-kind."""
    return any(KIND_KEYWORD in sub for _, sub in _walk_schema(schema, "#"))


@dataclass(frozen=True)
class SchemaCheck:
    """A compiled schema; `violations(value)` lists every error (at most MAX_VIOLATIONS)."""

    validator: Any
    """A `LinearValidator` (Draft 2020-12, regexes by RE2)."""

    @classmethod
    def compile(cls, schema: Mapping[str, Any]) -> SchemaCheck:
        # RE2 for every regex (tool_svc.linear_regex): the schema is trusted less than its author thinks.
        return cls(LinearValidator(schema, format_checker=LINEAR_FORMAT_CHECKER))

    def violations(self, value: Any) -> list[Violation]:
        found: list[Violation] = []
        try:
            # The fast path: no error objects are built for the (usual) valid value.
            if self.validator.is_valid(value):
                return found
            errors = sorted(self.validator.iter_errors(value), key=lambda e: (e.json_path, str(e.validator)))
        except RecursionError:
            return [Violation(path="$", rule="depth", hint="the arguments are nested too deeply")]
        for err in errors:
            found.extend(violations_for(err))
            if len(found) >= MAX_VIOLATIONS:
                break
        return found[:MAX_VIOLATIONS]


def schema_error(tool: str, violations: list[Violation]) -> AgentmeshError:
    """SCHEMA_INVALID for `violations` (the message summarises the first)."""
    first = violations[0]
    more = f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""
    return AgentmeshError(
        ErrorCode.SCHEMA_INVALID,
        f"arguments of {tool} violate its input schema: {first.path} {first.rule}{more}",
        violations=violations,
    )


def output_error(tool: str, violations: list[Violation]) -> AgentmeshError:
    first = violations[0]
    return AgentmeshError(
        ErrorCode.OUTPUT_INVALID,
        f"the output of {tool} violates its output schema: {first.path} {first.rule}",
        violations=violations,
    )


# --- marked fields ----------------------------------------------------------------------------------


def _branches(schema: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield schema
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key, ()) or ():
            if isinstance(sub, Mapping):
                yield from _branches(sub)
    for key in ("then", "else"):
        sub = schema.get(key)
        if isinstance(sub, Mapping):
            yield from _branches(sub)


def marked_values(schema: Mapping[str, Any], value: Any, path: str = "$") -> Iterator[tuple[str, str, Any]]:
    """(json path, kind, value) for every value the schema marks with x-agentmesh-kind.

    Every branch of allOf/anyOf/oneOf is followed, so a marked field cannot hide behind a combinator.
    """
    seen: set[tuple[str, str]] = set()
    for branch in _branches(schema):
        kind = branch.get(KIND_KEYWORD)
        if isinstance(kind, str) and (path, kind) not in seen:
            seen.add((path, kind))
            yield path, kind, value
        if isinstance(value, Mapping):
            props = branch.get("properties", {})
            extra = branch.get("additionalProperties")
            for key, child in value.items():
                sub = props.get(key) if isinstance(props, Mapping) else None
                if sub is None and isinstance(extra, Mapping):
                    sub = extra
                if isinstance(sub, Mapping):
                    name = f"{path}.{key}" if str(key).isidentifier() else f"{path}[{json.dumps(key)}]"
                    yield from marked_values(sub, child, name)
        elif isinstance(value, list):
            items = branch.get("items")
            prefix = branch.get("prefixItems") or []
            for i, child in enumerate(value):
                sub = prefix[i] if i < len(prefix) else items
                # An array marked as a whole (argv) was yielded above; its items are checked too when marked.
                if isinstance(sub, Mapping):
                    yield from marked_values(sub, child, f"{path}[{i}]")


def is_finite_json(value: Any) -> bool:
    """False for floats that JSON cannot carry (an executor must not emit them)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(is_finite_json(v) for v in value)
    if isinstance(value, dict):
        return all(is_finite_json(v) for v in value.values())
    return True


class ValidateArguments:
    """Pipeline step: parse the raw JSON and check it against the input schema (CONTRACT errors)."""

    def __init__(self, max_arguments_bytes: int, max_json_depth: int = DEFAULT_MAX_JSON_DEPTH) -> None:
        self.max_arguments_bytes = max_arguments_bytes
        self.max_json_depth = max_json_depth

    async def __call__(self, call: CallState) -> Outcome | None:
        raw = call.request.arguments_json
        call.bytes_in = len(raw.encode("utf-8", "surrogatepass"))
        try:
            arguments = parse_arguments(raw, max_bytes=self.max_arguments_bytes, max_depth=self.max_json_depth)
        except AgentmeshError as exc:
            return exc
        assert call.tool is not None
        violations = call.tool.input_check.violations(arguments)
        if violations:
            return schema_error(call.spec.name, violations)
        call.arguments = arguments
        call.arguments_sha256 = arguments_sha256(arguments)
        call.call_sha256 = call_sha256(call.spec.name, arguments)
        return None


class ValidateOutput:
    """Pipeline step: an output that breaks the tool's output schema is OUTPUT_INVALID, never a silent success."""

    async def __call__(self, call: CallState) -> Outcome | None:
        produced = call.produced
        assert produced is not None and call.tool is not None
        if produced.result_type != "structured":
            return None
        if not is_finite_json(produced.value):
            return AgentmeshError(
                ErrorCode.OUTPUT_INVALID,
                f"the output of {call.spec.name} contains NaN or Infinity, which JSON cannot carry",
                fallback_tool=call.spec.fallback_tool,
            )
        check = call.tool.output_check
        if check is None:
            return None
        violations = check.violations(produced.value)
        if not violations:
            return None
        err = output_error(call.spec.name, violations)
        err.fallback_tool = call.spec.fallback_tool
        return err
