"""The policy interface of the scripted model: what a policy is handed and what it returns.

The FunctionModel half of the split: `ScriptedRequest` (the prompt with views of the conversation),
`ScriptedReply` / `ScriptedToolCall` (the answer), `ToolErrorInfo` / `ViolationInfo` (a tool error
as the model sees it) and the `Policy` callable type. Reading a tool error back from a tool message
lives here too, since the request's views (`last_error`, `succeeded_tools`, ...) are built on it.
Policies in `provider_svc/scenarios/` are written against this module; keep it stable.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from agentmesh.chat import is_answer_correction
from agentmesh.errors import AgentmeshError, ErrorCode
from provider_svc.models.base import Message, ModelRequest, Role, ToolCall, ToolDef


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
    def turn(self) -> tuple[Message, ...]:
        """The current turn: the latest user message and what followed it (the whole conversation when
        it holds no user message). A task's goal is its only user message; a conversation that continues
        (a session's next task) adds one per turn, and the policy works on the latest."""
        for i in range(len(self.messages) - 1, -1, -1):
            message = self.messages[i]
            if message.role == Role.USER and not is_answer_correction(message.role, message.content):
                return self.messages[i:]
        return self.messages

    @property
    def answer_corrections(self) -> int:
        """Final answers of this turn the dispatcher sent back (output schema or claims, issue 41)."""
        return sum(1 for m in self.turn if is_answer_correction(m.role, m.content))

    @property
    def goal(self) -> str:
        """The goal of the current turn: the latest user message (a task's goal)."""
        return self.last_user

    @property
    def last_user(self) -> str:
        """The latest user message."""
        return next(
            (
                m.content
                for m in reversed(self.messages)
                if m.role == Role.USER and not is_answer_correction(m.role, m.content)
            ),
            "",
        )

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
        """Tools called so far in the current turn, in order (with repeats)."""
        return tuple(c.name for m in self.turn if m.role == Role.ASSISTANT for c in m.tool_calls)

    @property
    def succeeded_tools(self) -> tuple[str, ...]:
        """Tools of the current turn whose result was not an error, in order."""
        names: list[str] = []
        for m in self.turn:
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
