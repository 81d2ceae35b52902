"""The conversation types every service shares: who wrote a message, a model's tool call, token usage,
and the dispatcher's typed correction of a failed call with the one place it is rendered to text.

One definition each, so the RPC edge maps them to protobuf in one place (`agentmesh.rpc.codec`).
Core: no grpc, no stubs.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from agentmesh.errors import AgentmeshError, ErrorCode, model_text

__all__ = [
    "DEFAULT_MAX_JSON_DEPTH",
    "Correction",
    "NextStep",
    "Role",
    "ToolCall",
    "Usage",
    "json_depth_exceeds",
    "lone_surrogate_path",
    "tool_error_text",
]

DEFAULT_MAX_JSON_DEPTH = 64
MAX_GOAL_CHARS = 8192
ANSWER_CORRECTION_PREFIX = "[agentmesh] Your final answer was not accepted"
"""How the dispatcher's correction of a final answer begins (issue 41): a user message that continues the
turn rather than starting one (a policy such as the scripted model keeps working on the turn's goal)."""


def is_answer_correction(role: Role, content: str) -> bool:
    """Whether a message is the dispatcher's correction of a rejected final answer."""
    return role == Role.USER and content.startswith(ANSWER_CORRECTION_PREFIX)


"""The one limit on a task's goal: StartTask refuses a longer one, and DiscoverTools / ExecuteTool take
the same (issue 39: StartTask took 32,000 and the task then FAILED at DiscoverTools' 8,192)."""
"""`server.max_json_depth`'s default: the deepest JSON nesting a request's JSON text may have."""

# A JSON string (escapes included) or one bracket; possessive, so an unterminated string costs one pass.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"|[\[\]{}]')
# A \u escape of a UTF-16 surrogate (D800-DFFF): the only way JSON text from a protobuf string (valid
# UTF-8) can decode to a string that is not valid Unicode.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def json_depth_exceeds(text: str, max_depth: int) -> bool:
    """Whether JSON text nests arrays/objects deeper than `max_depth`, found without parsing it.

    Brackets inside strings do not count. Linear in the text, never recursive: it runs before a
    parser whose recursion (or a later walk of the value) a deep text would exhaust.
    """
    if text.count("[") + text.count("{") <= max_depth:
        return False
    depth = 0
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > max_depth:
                return True
        elif token in "]}":
            depth = max(0, depth - 1)
    return False


def lone_surrogate_path(text: str, value: Any) -> str | None:
    """The JSON path of the first string (or key) of `value`, parsed from `text`, that holds a lone
    surrogate escape such as "\\ud800" (not valid Unicode, so not encodable as UTF-8); None if none."""
    if not _SURROGATE_ESCAPE.search(text):
        return None

    def bad(s: str) -> bool:
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False

    def walk(node: Any, path: str) -> str | None:
        if isinstance(node, str):
            return path if bad(node) else None
        if isinstance(node, dict):
            for key, child in node.items():
                if bad(key):
                    return f"{path} (a key)"
                found = walk(child, f"{path}.{key}")
                if found is not None:
                    return found
        elif isinstance(node, list):
            for i, child in enumerate(node):
                found = walk(child, f"{path}[{i}]")
                if found is not None:
                    return found
        return None

    return walk(value, "$")


class Role(enum.StrEnum):
    """The author of a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call as the model produced it; `arguments_json` is the raw text (never re-encoded)."""

    id: str
    name: str
    arguments_json: str

    def to_json(self) -> dict[str, Any]:
        """The compact form stored in Redis (task checkpoints and events)."""
        return {"id": self.id, "name": self.name, "args": self.arguments_json}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolCall:
        return cls(id=data["id"], name=data["name"], arguments_json=data["args"])

    def canonical_arguments(self) -> str:
        """The arguments with key order and spacing normalised (raw text when not JSON)."""
        try:
            parsed = json.loads(self.arguments_json)
            return json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except (ValueError, RecursionError):
            # Not JSON, or nested too deeply to parse: a model's text is hashed as it came.
            return self.arguments_json

    def arguments_sha256(self) -> str:
        # surrogatepass: a lone surrogate escape ("\\ud800") decodes to a string UTF-8 cannot encode;
        # the hash of every other text is unchanged.
        return hashlib.sha256(self.canonical_arguments().encode("utf-8", "surrogatepass")).hexdigest()

    def signature(self) -> str:
        """Same tool + same arguments, whatever the call id: what loop detection counts."""
        return f"{self.name}:{self.arguments_sha256()[:32]}"


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one or more model calls."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens)

    def to_json(self) -> list[int]:
        """The compact form stored in Redis."""
        return [self.input_tokens, self.output_tokens]

    @classmethod
    def from_json(cls, data: list[int] | None) -> Usage:
        return cls(*data) if data else cls()


class NextStep(enum.IntEnum):
    """What the model should do after a failed tool call (the numbers of agentmesh.v1.NextStep)."""

    UNSPECIFIED = 0
    FIX_ARGUMENTS = 1
    """CONTRACT: the call was not run; fix its arguments from the hints and call it again."""
    STOP_CORRECTING = 2
    """CONTRACT, corrections used up: use the fallback tool or another way."""
    USE_FALLBACK = 3
    """ENGINEERING: a fault outside the model's control; do not repeat the call."""
    NOT_REPEATED = 4
    """The model repeated a call that had failed; it was not run again."""


@dataclass(frozen=True, slots=True)
class Correction:
    """The dispatcher's note to the model on a failed tool call, as data (agentmesh.v1.Correction).

    `text` is the only place it becomes words; nothing parses the words back.
    """

    next_step: NextStep
    attempt: int = 0
    """FIX_ARGUMENTS: which correction (1-based); STOP_CORRECTING: the contract failures so far."""
    max_attempts: int = 0
    fallback_tool: str = ""
    failed_with: ErrorCode | None = None
    """NOT_REPEATED: the code the earlier identical call failed with."""

    def text(self, tool_name: str, error: AgentmeshError | None = None) -> str:
        """The note as the model reads it."""
        advice = (
            f"Use the fallback tool {self.fallback_tool} instead."
            if self.fallback_tool
            else "No fallback tool exists: use another tool, or answer with what you know and say what failed."
        )
        if self.next_step is NextStep.FIX_ARGUMENTS:
            return (
                f"correction {self.attempt} of {self.max_attempts}: the call to {tool_name} was not run. "
                "Fix the arguments using the hints above and call it again."
            )
        if self.next_step is NextStep.STOP_CORRECTING:
            return f"the call to {tool_name} failed its contract {self.attempt} times; stop correcting it. " + advice
        if self.next_step is NextStep.NOT_REPEATED:
            failed = self.failed_with.name if self.failed_with is not None else "an error"
            return f"you already made this exact call and it failed with {failed}; it was not run again. " + (
                f"Use the fallback tool {self.fallback_tool} instead."
                if self.fallback_tool
                else "Choose another approach."
            )
        what = f" with {error.code.name} ({error.error_class.name})" if error is not None else ""
        return (
            f"{tool_name} failed{what}: a fault outside your control. "
            f"Do not call {tool_name} again with the same arguments. " + advice
        )

    def to_json(self) -> dict[str, Any]:
        """The compact form stored in Redis (task checkpoints, session logs)."""
        data: dict[str, Any] = {"n": int(self.next_step)}
        if self.attempt:
            data["a"] = self.attempt
        if self.max_attempts:
            data["m"] = self.max_attempts
        if self.fallback_tool:
            data["f"] = self.fallback_tool
        if self.failed_with is not None:
            data["w"] = self.failed_with.name
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Correction:
        failed = data.get("w")
        return cls(
            next_step=NextStep(data["n"]),
            attempt=int(data.get("a", 0)),
            max_attempts=int(data.get("m", 0)),
            fallback_tool=str(data.get("f", "")),
            failed_with=ErrorCode.__members__.get(failed) if failed else None,
        )


def tool_error_text(error: AgentmeshError, tool_name: str, correction: Correction | None = None) -> str:
    """A failed call's tool message as the model reads it: the error's fields, then the note."""
    text = model_text(error)
    if correction is not None:
        text += f"\nnext step: {correction.text(tool_name, error)}"
    return text
