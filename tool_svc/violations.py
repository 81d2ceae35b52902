"""A JSON Schema error as the `Violation`s a model can act on (docs/design.md §3, §5).

Each jsonschema `ValidationError` becomes one Violation per problem: the JSON path, the rule, what was
expected, what was given, and a hint taken from the schema's description / pattern / enum / examples (a
misspelt property names the allowed ones). `tool_svc.validation.SchemaCheck` validates; this module words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

# No py.typed in jsonschema; types-jsonschema may or may not be installed (hence unused-ignore).
from jsonschema.exceptions import ValidationError, best_match  # type: ignore[import-untyped, unused-ignore]

from agentmesh.errors import Violation
from tool_svc.linear_regex import PatternError, search

__all__ = ["clip", "json_text", "violations_for"]

_MAX_VALUE_CHARS = 200


def clip(text: str, limit: int = _MAX_VALUE_CHARS) -> str:
    """`text` cut to `limit` characters, "..." marking the cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def json_text(value: Any) -> str:
    """A value as short JSON text for a violation (never raises)."""
    try:
        return clip(json.dumps(value, ensure_ascii=False, sort_keys=True))
    except (TypeError, ValueError):
        return clip(repr(value))


# The same path syntax jsonschema's `json_path` uses, so every violation path reads alike.
_PLAIN_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]*$")


def _child_path(path: str, name: str) -> str:
    """The JSON path of property `name` of the object at `path` (`$.a`, `$['odd key']`)."""
    if _PLAIN_NAME.match(name):
        return f"{path}.{name}"
    escaped = name.replace("\\", "\\\\").replace("'", "\\'")
    return f"{path}['{escaped}']"


def _last_name(path: str) -> str:
    for sep in (".", "["):
        if sep in path:
            path = path.rsplit(sep, 1)[1]
    return path.rstrip("]").strip("'") or "the arguments"


def _expected(err: ValidationError) -> str:
    value = err.validator_value
    if err.validator == "required":
        return "present"
    if err.validator in ("additionalProperties", "unevaluatedProperties"):
        schema = err.schema if isinstance(err.schema, Mapping) else {}
        allowed = _allowed_names(schema)
        return "no properties" if allowed == "none" else f"only {allowed}"
    if isinstance(value, str):
        return clip(value)
    return json_text(value)


def _describe(sub: Any) -> str:
    if not isinstance(sub, Mapping):
        return ""
    parts = []
    if isinstance(sub.get("description"), str) and sub["description"]:
        parts.append(clip(sub["description"], 160))
    examples = sub.get("examples")
    if isinstance(examples, list) and examples:
        parts.append("e.g. " + ", ".join(json_text(e) for e in examples[:2]))
    return "; ".join(parts)


def _hint(err: ValidationError, path: str) -> str:
    name = _last_name(path)
    sub = err.schema if isinstance(err.schema, Mapping) else {}
    rule = err.validator
    actual = json_text(err.instance)
    text: str
    if rule == "pattern":
        text = f"{name} must match {err.validator_value}"
        examples = sub.get("examples")
        if isinstance(examples, list) and examples:
            text += f" (e.g. {examples[0]})"
        text += f", got {actual}"
        description = sub.get("description")
        return f"{text}; {clip(description, 160)}" if isinstance(description, str) and description else text
    if rule == "enum":
        text = f"{name} must be one of {json_text(err.validator_value)}, got {actual}"
    elif rule == "const":
        text = f"{name} must be {json_text(err.validator_value)}, got {actual}"
    elif rule == "type":
        text = f"{name} must be of type {json_text(err.validator_value)}, got {actual}"
    elif rule == "format":
        text = f"{name} must be a valid {err.validator_value}, got {actual}"
    else:
        text = err.message if len(err.message) < 240 else f"{name} violates {rule} {json_text(err.validator_value)}"
    described = _describe(sub)
    return f"{text}; {described}" if described else text


def _quoted(name: str) -> str:
    # Single quotes, as in the hints: a model (and the scripted policy) copies the name from there.
    return "'" + clip(name, 120) + "'"


def _allowed_names(schema: Mapping[str, Any]) -> str:
    props = schema.get("properties") or {}
    names = sorted(str(p) for p in props) if isinstance(props, Mapping) else []
    patterns = schema.get("patternProperties") or {}
    if isinstance(patterns, Mapping) and patterns:
        names.append("names matching " + " or ".join(str(p) for p in patterns))
    return ", ".join(names) or "none"


def _matches_any(patterns: Any, name: str) -> bool:
    if not isinstance(patterns, Mapping):
        return False
    for pattern in patterns:
        try:
            if search(str(pattern), name):
                return True
        except PatternError:
            continue
    return False


def _unexpected_properties(err: ValidationError) -> list[str]:
    """The property names an additionalProperties / unevaluatedProperties error is about, in call order."""
    instance = err.instance if isinstance(err.instance, Mapping) else {}
    schema = err.schema if isinstance(err.schema, Mapping) else {}
    props = schema.get("properties") or {}
    names = [str(k) for k in instance]
    if err.validator == "additionalProperties":
        # jsonschema's own rule: not a declared property and matching no patternProperties regex.
        extra = [k for k in names if k not in props and not _matches_any(schema.get("patternProperties"), k)]
    else:
        # unevaluatedProperties depends on every applicator; jsonschema's message names the offenders.
        extra = [k for k in names if repr(k) in err.message]
    return extra or [k for k in names if k not in props]


def _property_violations(err: ValidationError, path: str) -> list[Violation] | None:
    """Violations that name the offending property in their path (jsonschema reports them on the
    parent object); None when `err` is not one of those rules."""
    rule = str(err.validator)
    schema = err.schema if isinstance(err.schema, Mapping) else {}
    instance = err.instance
    if rule in ("additionalProperties", "unevaluatedProperties") and isinstance(instance, Mapping):
        allowed = _allowed_names(schema)
        expected = _expected(err)
        return [
            Violation(
                path=_child_path(path, name),
                rule=rule,
                expected=expected,
                actual=_quoted(name),
                hint=f"remove property {_quoted(name)}; allowed: {allowed}",
            )
            for name in _unexpected_properties(err)
        ]
    if rule == "dependentRequired" and isinstance(instance, Mapping) and isinstance(err.validator_value, Mapping):
        for owner, needed in err.validator_value.items():
            if owner not in instance or not isinstance(needed, list):
                continue
            for name in needed:
                if name not in instance and err.message == f"{name!r} is a dependency of {owner!r}":
                    return [
                        Violation(
                            path=_child_path(path, str(name)),
                            rule=rule,
                            expected="present",
                            actual="",
                            hint=f"add property {_quoted(str(name))}: it is required when {_quoted(str(owner))} "
                            f"is given (or remove {_quoted(str(owner))})",
                        )
                    ]
        return None
    if rule == "items" and err.validator_value is False and isinstance(instance, list):
        # `items: false` after prefixItems: the first item past the allowed ones is the offender.
        allowed_items = len(schema.get("prefixItems") or ())
        return [
            Violation(
                path=f"{path}[{allowed_items}]",
                rule=rule,
                expected=f"at most {allowed_items} items",
                actual=clip(f"{len(instance)} items"),
                hint=f"remove the items from index {allowed_items} on; at most {allowed_items} are allowed",
            )
        ]
    if _is_property_name_error(err) and isinstance(instance, str):
        # propertyNames checks each name as a string; jsonschema locates it at the parent object.
        where = _child_path(path, instance)
        return [
            Violation(
                path=where,
                rule=rule,
                expected=_expected(err),
                actual=_quoted(instance),
                hint=f"rename or remove property {_quoted(instance)}: its name breaks the propertyNames rule; "
                f"{_hint(err, where)}",
            )
        ]
    return None


_NAMED_CHILDREN = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependentRequired"}
)


def _is_property_name_error(err: ValidationError) -> bool:
    parts = list(err.relative_schema_path)
    return any(
        part == "propertyNames" and (i == 0 or parts[i - 1] not in _NAMED_CHILDREN) for i, part in enumerate(parts)
    )


def violations_for(err: ValidationError) -> list[Violation]:
    path = err.json_path
    if err.validator == "required" and isinstance(err.instance, Mapping):
        missing = [p for p in err.validator_value if p not in err.instance]
        # jsonschema reports one error per missing property; its message names it.
        names = [p for p in missing if repr(p) in err.message] or missing[:1]
        return [
            Violation(
                path=_child_path(path, str(n)),
                rule="required",
                expected="present",
                actual="",
                hint=_hint_for_required(err, str(n)),
            )
            for n in names
        ]
    if err.validator in ("anyOf", "oneOf") and err.context:
        best = best_match(err.context)
        if best is not None:
            inner = violations_for(best)
            return [
                Violation(
                    v.path, v.rule, v.expected, v.actual, f"{v.hint} (one of {len(err.validator_value)} alternatives)"
                )
                for v in inner
            ]
    named = _property_violations(err, path)
    if named is not None:
        return named
    return [
        Violation(
            path=path,
            rule=str(err.validator),
            expected=_expected(err),
            actual=json_text(err.instance),
            hint=_hint(err, path),
        )
    ]


def _hint_for_required(err: ValidationError, name: str) -> str:
    sub = err.schema if isinstance(err.schema, Mapping) else {}
    props = sub.get("properties", {})
    child = props.get(name, {}) if isinstance(props, Mapping) else {}
    described = _describe(child)
    return f"add the required property {name!r}" + (f" ({described})" if described else "")
