"""Typed final answers (docs/design.md §7, issue 41): output schemas, how a task's schema narrows
its agent's, and the check of an answer against one, as violations in the format of tool arguments
(path, rule, expected, actual, hint; tool_svc/validation.py).

Pure functions on values: the dispatcher's decisions call them, the config loader and StartTask too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped, unused-ignore]
from jsonschema.exceptions import SchemaError, ValidationError  # type: ignore[import-untyped, unused-ignore]

# No py.typed in jsonschema; types-jsonschema may or may not be installed (hence unused-ignore).
from agentmesh.chat import lone_surrogate_path
from agentmesh.errors import Violation

ACTIONS_FIELD = "actions"
"""The answer field that lists the actions the answer claims, each citing the call that did it."""
ACTIONS_MARK = "x-agentmesh-actions"
"""An agent schema with this set to true gets the `actions` field added by the runtime."""
MAX_SCHEMA_BYTES = 64 * 1024
MAX_VIOLATIONS = 20
_MAX_VALUE_CHARS = 200
_REGEX_KEYWORDS = frozenset({"pattern", "patternProperties"})
_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n(.*?)\n\s*```\s*$", re.DOTALL)

ACTIONS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "description": "The actions this answer says were done, each citing the tool call that did it.",
    "items": {
        "type": "object",
        "properties": {
            "tool": {"type": "string", "description": "the write tool that did it"},
            "tool_call_id": {"type": "string", "description": "the id of that tool call in this task"},
            "summary": {"type": "string", "description": "what was done, in a few words"},
        },
        "required": ["tool", "tool_call_id"],
    },
}


class SchemaProblem(ValueError):
    """An output schema that cannot be used; the message says why (a config or request error)."""


def _walk(schema: Any) -> Iterator[tuple[str, Any]]:
    """Every (keyword, value) of a schema, nested ones included."""
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            yield str(key), value
            yield from _walk(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _walk(item)


def parse_schema(text_or_value: str | Mapping[str, Any], *, trusted: bool) -> dict[str, Any]:
    """A JSON Schema (Draft 2020-12) object from JSON text or a mapping; SchemaProblem otherwise.

    Untrusted schemas (a task's, from a client) may not hold regexes: jsonschema's `re` is not linear
    time, and the answer check runs on the dispatcher's event loop."""
    if isinstance(text_or_value, str):
        if len(text_or_value.encode()) > MAX_SCHEMA_BYTES:
            raise SchemaProblem(f"must be at most {MAX_SCHEMA_BYTES} bytes")
        try:
            value = json.loads(text_or_value)
        except ValueError as exc:
            raise SchemaProblem(f"is not JSON: {exc}") from None
        surrogate = lone_surrogate_path(text_or_value, value)
        if surrogate is not None:
            # Not valid Unicode: it could be neither stored (UTF-8) nor matched (found by make fuzz).
            raise SchemaProblem(f"holds a lone UTF-16 surrogate escape at {surrogate}")
    else:
        value = json.loads(json.dumps(text_or_value))
    if not isinstance(value, dict):
        raise SchemaProblem("must be a JSON object (a JSON Schema)")
    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        raise SchemaProblem(f"is not a valid JSON Schema: {exc.message}") from None
    if not trusted:
        for key, sub in _walk(value):
            if key in _REGEX_KEYWORDS or (key == "format" and sub == "regex"):
                raise SchemaProblem(f"may not use {key!r} (regexes are refused in a task's schema)")
    return value


def _types(schema: Mapping[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind, "number"} if kind == "integer" else {kind}
    if isinstance(kind, list):
        out = {str(k) for k in kind}
        return out | ({"number"} if "integer" in out else set())
    return None


def narrow(agent: Mapping[str, Any] | None, task: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The schema a task's answer must follow: the agent's, the task's, or both (`allOf`).

    The rule that makes a task's schema only narrow its agent's: an answer must satisfy both, so it
    satisfies the agent's whatever the task's says. A task schema whose top-level `type` allows a type
    the agent's does not (it asks for what the agent can never give) is refused: SchemaProblem."""
    if task is None:
        return dict(agent) if agent is not None else None
    if agent is None:
        return dict(task)
    wanted, allowed = _types(task), _types(agent)
    if allowed is not None:
        if wanted is None:
            raise SchemaProblem(f"must state a top-level type within the agent's ({sorted(allowed)})")
        widened = {t for t in wanted if t not in allowed and not (t == "integer" and "number" in allowed)}
        if widened:
            raise SchemaProblem(
                f"may only narrow the agent's schema: type {sorted(widened)} is not in {sorted(allowed)}"
            )
    if dict(task) == dict(agent):
        return dict(agent)
    return {"allOf": [dict(agent), dict(task)]}


def with_actions(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema with the runtime's `actions` field when it asks for it (`x-agentmesh-actions: true`)."""
    out = dict(schema)
    if out.get(ACTIONS_MARK) is True and out.get("type") == "object":
        props = dict(out.get("properties") or {})
        props.setdefault(ACTIONS_FIELD, ACTIONS_SCHEMA)
        out["properties"] = props
    return out


def strict_compatible(schema: Mapping[str, Any]) -> bool:
    """Whether OpenAI's strict structured output accepts the schema as it is: every object closed
    (`additionalProperties: false`) and all its properties required, no combinators at the top."""
    if schema.get("type") != "object" or "allOf" in schema or "anyOf" in schema or "oneOf" in schema:
        return False
    for key, sub in [("", schema), *_walk(schema)]:
        if key in ("allOf", "oneOf", "not", "if", "patternProperties", "dependentSchemas"):
            return False
        if isinstance(sub, Mapping) and sub.get("type") == "object":
            props = sub.get("properties") or {}
            if sub.get("additionalProperties") is not False or set(sub.get("required") or ()) != set(props):
                return False
    return True


def _clip(text: str, limit: int = _MAX_VALUE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json(value: Any) -> str:
    return _clip(json.dumps(value, ensure_ascii=False, sort_keys=True))


@dataclass(frozen=True)
class AnswerCheck:
    """A final answer read against its schema: the value (None when not JSON) and what it breaks."""

    value: Any = None
    violations: tuple[Violation, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.violations


def parse_answer(text: str) -> tuple[Any, Violation | None]:
    """The answer's JSON value (a ```json fence around it is accepted), or the violation it is."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        return json.loads(body), None
    except json.JSONDecodeError as exc:
        return None, Violation(
            path="$",
            rule="json",
            expected="one JSON value following the output schema",
            actual=_clip(body, 80),
            hint=f"answer with JSON only, no prose around it ({exc.msg} at character {exc.pos})",
        )


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"{path}[{json.dumps(name)}]"


def _violations(err: ValidationError) -> list[Violation]:
    path = err.json_path
    rule = str(err.validator)
    if rule == "required" and isinstance(err.instance, Mapping):
        missing = [p for p in err.validator_value if p not in err.instance and repr(p) in err.message]
        return [
            Violation(
                path=_child(path, str(n)), rule="required", expected="present", hint=f"add the required property {n!r}"
            )
            for n in missing or list(err.validator_value)[:1]
        ]
    if rule in ("anyOf", "oneOf", "allOf") and err.context:
        from jsonschema.exceptions import best_match  # type: ignore[import-untyped, unused-ignore]

        best = best_match(err.context)
        if best is not None:
            return _violations(best)
    if rule == "additionalProperties" and isinstance(err.instance, Mapping):
        props = err.schema.get("properties") or {} if isinstance(err.schema, Mapping) else {}
        allowed = ", ".join(sorted(map(str, props))) or "none"
        return [
            Violation(
                path=_child(path, str(name)),
                rule=rule,
                expected=f"only {allowed}",
                actual=repr(name),
                hint=f"remove property {name!r}; allowed: {allowed}",
            )
            for name in err.instance
            if name not in props
        ]
    value = err.validator_value
    expected = value if isinstance(value, str) else _json(value)
    return [
        Violation(path=path, rule=rule, expected=expected, actual=_json(err.instance), hint=_clip(err.message, 240))
    ]


def check_answer(schema: Mapping[str, Any], text: str) -> AnswerCheck:
    """The answer `text` read as JSON and validated against `schema` (Draft 2020-12)."""
    value, not_json = parse_answer(text)
    if not_json is not None:
        return AnswerCheck(None, (not_json,))
    validator = Draft202012Validator(schema)
    try:
        if validator.is_valid(value):
            return AnswerCheck(value)
        errors = sorted(validator.iter_errors(value), key=lambda e: (e.json_path, str(e.validator)))
    except RecursionError:
        return AnswerCheck(value, (Violation(path="$", rule="depth", hint="the answer is nested too deeply"),))
    found: list[Violation] = []
    for err in errors:
        found.extend(_violations(err))
    return AnswerCheck(value, tuple(found[:MAX_VIOLATIONS]))


def violations_text(violations: Sequence[Violation]) -> str:
    """The violations as the model reads them: one line each, as for tool arguments."""
    return "\n".join(
        f"- {v.path} {v.rule}: expected {v.expected or '-'}, got {v.actual or '(nothing)'}; {v.hint}".rstrip("; ")
        for v in violations
    )


def render(value: Any) -> str:
    """A human rendering of a typed answer (Task.answer): an object's fields as lines, else its JSON."""
    if isinstance(value, Mapping):
        lines = []
        for key, item in value.items():
            shown = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
            lines.append(f"{key}: {shown}")
        return "\n".join(lines)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def canonical(value: Any) -> str:
    """The answer's JSON text as stored (Task.output_json)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
