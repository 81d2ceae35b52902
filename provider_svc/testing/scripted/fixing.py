"""Fixing a failed tool call from its error's violations and hints, and the schema.

`fix_arguments` corrects arguments a CONTRACT error rejected (each violation's path, rule, expected
value and hint, then whatever the schema still rejects is refilled via `filling`);
`adapt_arguments` fits arguments to another tool's schema; `fix_last_call` re-issues the latest
failed call, under the suggested tool for UNKNOWN_TOOL. Policies call `fix_last_call` directly.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from provider_svc.models.base import Role, ToolCall, ToolDef
from provider_svc.testing.scripted.filling import (
    _EXAMPLE,
    _search,
    _synth_value,
    _unanchored,
    _valid,
    synthesize_arguments,
)
from provider_svc.testing.scripted.jsonio import _from_json_text, _repair_json
from provider_svc.testing.scripted.policy import (
    ScriptedReply,
    ScriptedRequest,
    ScriptedToolCall,
    ToolErrorInfo,
    ViolationInfo,
    tool_error_of,
)

_QUOTED = re.compile(r"'([^']+)'")

_PATH_PART = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]|\['((?:[^'\\]|\\.)+)'\]|\[\"((?:[^\"\\]|\\.)+)\"\]")


def _split_path(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for name, index, single, double in _PATH_PART.findall(path.removeprefix("$")):
        quoted = re.sub(r"\\(.)", r"\1", single or double)
        parts.append(int(index) if index else (name or quoted))
    if not parts and path and not path.startswith("$"):
        # A bare field name (e.g. an InvalidRequestError path).
        parts = [p for p in re.split(r"[./]", path) if p]
    return parts


def _sub_schema(schema: Mapping[str, Any], parts: Sequence[str | int]) -> Mapping[str, Any] | None:
    current: Any = schema
    for part in parts:
        if not isinstance(current, Mapping):
            return None
        current = current.get("items") if isinstance(part, int) else (current.get("properties") or {}).get(part)
    return current if isinstance(current, Mapping) else None


def _get(container: Any, parts: Sequence[str | int]) -> Any:
    current = container
    for part in parts:
        in_list = isinstance(part, int) and isinstance(current, list) and part < len(current)
        if in_list or (isinstance(part, str) and isinstance(current, dict) and part in current):
            current = current[part]
        else:
            return None
    return current


def _set(container: Any, parts: Sequence[str | int], value: Any, *, delete: bool = False) -> None:
    current = container
    for part in parts[:-1]:
        nxt = _get(current, [part])
        if nxt is None:
            if not isinstance(current, dict) or not isinstance(part, str):
                return
            current[part] = {}
            nxt = current[part]
        current = nxt
    last = parts[-1]
    if isinstance(current, dict) and isinstance(last, str):
        if delete:
            current.pop(last, None)
        else:
            current[last] = value
    elif isinstance(current, list) and isinstance(last, int) and last < len(current):
        current[last] = value


def _candidates(
    v: ViolationInfo, actual: Any, name: str, schema: Mapping[str, Any] | None, texts: Sequence[str]
) -> list[Any]:
    out: list[Any] = []
    if isinstance(actual, str):
        out += [actual.strip(), actual.upper(), actual.lower()]
        for cast in (int, float):
            with contextlib.suppress(ValueError):
                out.append(cast(actual))
    elif isinstance(actual, int | float) and not isinstance(actual, bool):
        out.append(str(actual))
    expected_pattern = schema.get("pattern") if schema else None
    if not expected_pattern and v.rule == "pattern":
        expected_pattern = v.expected
    if isinstance(expected_pattern, str):
        found = _search(expected_pattern, texts)
        if found is not None:
            out.append(found)
    enum = schema.get("enum") if schema else None
    if isinstance(enum, list) and enum:
        close = difflib.get_close_matches(str(actual), [str(e) for e in enum], n=1, cutoff=0.0)
        out += [e for e in enum if close and str(e) == close[0]]
    for match in _EXAMPLE.finditer(v.hint):
        out.append(_from_json_text(match.group(1)))
    for match in _QUOTED.finditer(v.expected):
        out.append(match.group(1))
    if schema:
        out.append(_synth_value(name, schema, texts))
    return out


def _fix_one(
    v: ViolationInfo, args: dict[str, Any], tool_schema: Mapping[str, Any] | None, texts: Sequence[str]
) -> None:
    parts = _split_path(v.path)
    if v.rule in ("additionalProperties", "additional_properties", "unevaluatedProperties"):
        _drop_unexpected(v, parts, args)
        return
    if v.rule == "required":
        present = parts and _get(args, parts) is not None
        if not parts or present:
            quoted = _QUOTED.findall(f"{v.expected} {v.hint} {v.actual}")
            if quoted:
                parts = [*parts, quoted[0]] if present else [quoted[0]]
        if not parts:
            return
    elif not parts:
        return
    name = str(parts[-1])
    schema = _sub_schema(tool_schema, parts) if tool_schema else None
    actual = _get(args, parts)
    if actual is None and v.actual:
        actual = _from_json_text(v.actual)
    for candidate in _candidates(v, actual, name, schema, texts):
        if candidate is None or candidate == actual:
            continue
        if schema is not None:
            if _valid(candidate, schema):
                _set(args, parts, candidate)
                return
        elif v.rule == "pattern" and v.expected:
            if isinstance(candidate, str) and _search(f"^(?:{_unanchored(v.expected)})$", [candidate]) == candidate:
                _set(args, parts, candidate)
                return
        elif v.rule not in ("pattern", "type") or (
            v.expected in ("integer", "number") and isinstance(candidate, int | float)
        ):
            _set(args, parts, candidate)
            return


_ALLOWED = re.compile(r"allowed:\s*([^;]*)")


def _drop_unexpected(v: ViolationInfo, parts: list[str | int], args: dict[str, Any]) -> None:
    """Removes the property an additionalProperties violation names: by its path (`$.extra`), or,
    when the path is the parent object, by the names quoted (or listed) in `got` / the hint."""
    names = list(dict.fromkeys(_QUOTED.findall(f"{v.actual} {v.hint}")))
    if not names and v.actual:
        names = [n.strip() for n in v.actual.split(",") if n.strip()]
    if parts and isinstance(parts[-1], str) and (not names or parts[-1] in names):
        owner = _get(args, parts[:-1]) if len(parts) > 1 else args
        if isinstance(owner, dict) and parts[-1] in owner:
            del owner[parts[-1]]
            return
    owner = _get(args, parts) if parts else args
    if not isinstance(owner, dict):
        return
    if names:
        for name in names:
            owner.pop(name, None)
        return
    # Only the allowed names are given ("allowed: a, b"): keep those.
    allowed = _ALLOWED.search(v.hint)
    if allowed is None or "matching" in allowed.group(1):
        return
    keep = {a.strip() for a in allowed.group(1).split(",")} - {"none", ""}
    for key in [k for k in owner if k not in keep]:
        del owner[key]


def _prune(value: Any, schema: Mapping[str, Any] | None) -> Any:
    """`value` without the properties `schema` forbids (additionalProperties/unevaluatedProperties
    false), at every level the schema describes."""
    if not isinstance(schema, Mapping):
        return value
    if isinstance(value, list):
        items = schema.get("items")
        return [_prune(v, items if isinstance(items, Mapping) else None) for v in value]
    if not isinstance(value, dict):
        return value
    props = schema.get("properties") or {}
    props = props if isinstance(props, Mapping) else {}
    patterns = schema.get("patternProperties") or {}
    closed = schema.get("additionalProperties") is False or schema.get("unevaluatedProperties") is False
    out: dict[str, Any] = {}
    for key, child in value.items():
        if key in props:
            out[key] = _prune(child, props[key])
        elif not closed or any(_search(str(p), [key]) is not None for p in patterns):
            out[key] = child
    return out


def _refill(args: dict[str, Any], tool: ToolDef, texts: Sequence[str]) -> dict[str, Any]:
    """`args` with what the schema still rejects replaced: forbidden properties dropped, missing or
    invalid properties refilled from the texts and the schema, invalid optional ones dropped."""
    schema = tool.input_schema
    if _valid(args, schema):
        return args
    args = _prune(args, schema)
    props = schema.get("properties") or {}
    props = props if isinstance(props, Mapping) else {}
    required = set(schema.get("required") or ())
    fresh = synthesize_arguments(tool, texts)
    for key, value in fresh.items():
        sub = props.get(key)
        missing = key not in args and key in required
        if missing or (key in args and isinstance(sub, Mapping) and not _valid(args[key], sub)):
            args[key] = value
    for key in list(args):
        sub = props.get(key)
        if key not in required and key not in fresh and isinstance(sub, Mapping) and not _valid(args[key], sub):
            del args[key]
    return args


def adapt_arguments(arguments_json: str, tool: ToolDef | None, texts: Sequence[str]) -> str:
    """Arguments written for one tool, made to fit `tool`'s schema (a renamed call): kept where they
    fit, properties the tool forbids dropped, what it requires filled from the texts and the schema."""
    args = _repair_json(arguments_json)
    if args is None:
        args = {}
    if tool is not None:
        args = _refill(args, tool, texts)
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


def fix_arguments(call: ToolCall, error: ToolErrorInfo, tool: ToolDef | None, texts: Sequence[str]) -> str:
    """`call`'s arguments corrected using `error`'s violations and hints (the tool's schema when
    known, values found in `texts`, and the examples the hints give), as JSON text."""
    args = _repair_json(call.arguments_json)
    if args is None:
        args = synthesize_arguments(tool, texts) if tool is not None else {}
    for violation in error.violations:
        _fix_one(violation, args, tool.input_schema if tool is not None else None, texts)
    if tool is not None:
        # Violations not named by the error (or not fixable from it): refill what the schema rejects.
        args = _refill(args, tool, texts)
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


_DID_YOU_MEAN = re.compile(r"did you mean\s+([\w.-]+(?:\s*(?:,|\bor\b)\s*[\w.-]+)*)", re.IGNORECASE)


def _closest_tool(name: str, error: ToolErrorInfo, tools: Sequence[ToolDef]) -> str:
    """The tool the failed call meant: the error's suggestion (metadata closest_tools, or "did you
    mean X" in a hint or the message), preferring one the model is offered; else the closest offered
    name; "" when there is none other than `name` itself."""
    listed = error.metadata.get("closest_tools") or error.metadata.get("did_you_mean") or ""
    suggested = [c for c in re.split(r"[,\s\[\]'\"]+", listed) if c]
    for text in [*(v.hint for v in error.violations), error.message]:
        match = _DID_YOU_MEAN.search(text)
        if match:
            suggested += [c for c in re.split(r"\s*(?:,|\bor\b)\s*", match.group(1)) if c]
    suggested = [c for c in dict.fromkeys(suggested) if c != name]
    offered = [t.name for t in tools if t.name != name]
    for candidate in suggested:
        if candidate in offered:
            return candidate
    if suggested:
        return suggested[0]
    close = difflib.get_close_matches(name, offered, n=1, cutoff=0.0)
    return close[0] if close else ""


def fix_last_call(req: ScriptedRequest) -> ScriptedReply:
    """Re-issues the failed call of the latest step, corrected with its error's hints.

    UNKNOWN_TOOL: the same arguments under the tool the error suggests (adapted to that tool's
    schema); its violations are about the call's name, never about the arguments.
    """
    err, call = req.last_error, req.failed_call
    if err is None or call is None:
        return ScriptedReply(text="Nothing to fix.")
    texts = _texts(req)
    if err.code == "UNKNOWN_TOOL":
        name = _closest_tool(call.name, err, req.tools)
        if not name:
            # The same name would fail again: say so rather than loop.
            return ScriptedReply(text=f"I could not complete the task: {err.code}: {err.message}".strip())
        return ScriptedReply(
            tool_calls=(ScriptedToolCall(name, adapt_arguments(call.arguments_json, req.tool(name), texts)),)
        )
    arguments = fix_arguments(call, err, req.tool(call.name), texts)
    return ScriptedReply(tool_calls=(ScriptedToolCall(call.name, arguments),))


def _texts(req: ScriptedRequest) -> list[str]:
    # Where values may be found: the goal first, then the latest user message and tool results.
    results = [m.content for m in reversed(req.messages) if m.role == Role.TOOL and tool_error_of(m) is None]
    return [req.goal, req.last_user, *results[:3]]
