"""The internal request/response types every model adapter and wrapper speaks, and the Model protocol.

Plain Python (no grpc, no protobuf, no SDK): `provider_svc/server.py` maps protobuf to these, each
adapter maps these to one wire protocol, and wrappers (retry, rate limit, ...) take any Model and
are a Model themselves (docs/design.md §6, after Pydantic AI's `models/`).
"""

from __future__ import annotations

import enum
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from agentmesh.chat import Correction, Role, ToolCall, Usage
from agentmesh.errors import AgentmeshError

__all__ = [
    "Attempt",
    "CallContext",
    "FinishReason",
    "Message",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ProviderInfo",
    "Role",
    "Sampling",
    "SentRequest",
    "StreamEvent",
    "StreamFinal",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "ToolDef",
    "Usage",
]


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    """For Role.TOOL: the call this message answers."""
    name: str = ""
    """For Role.TOOL: the tool's name."""
    tool_error: AgentmeshError | None = None
    """For Role.TOOL: the call's typed error when it failed (content holds it rendered)."""
    correction: Correction | None = None
    """For Role.TOOL: the dispatcher's note on a failed call (content holds it rendered)."""


@dataclass(frozen=True, slots=True)
class ToolDef:
    """A tool the model may call: what providers need of our ToolSpec."""

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """How the model may use tools; `tool_name` only for mode "tool"."""

    mode: Literal["auto", "none", "required", "tool"] = "auto"
    tool_name: str = ""


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling parameters; None / empty means "not sent" (the provider's default applies)."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One generation request, independent of any provider."""

    messages: tuple[Message, ...]
    tools: tuple[ToolDef, ...] = ()
    tool_choice: ToolChoice | None = None
    """None: the provider default (auto when tools are given)."""
    sampling: Sampling = Sampling()
    response_schema: Mapping[str, Any] | None = None
    """A JSON Schema the reply must follow (OpenAI response_format json_schema)."""


class FinishReason(enum.StrEnum):
    """Why the model stopped, normalized across providers."""

    UNSPECIFIED = "unspecified"
    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CONTENT_FILTER = "content_filter"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One upstream attempt, failed or not; listed on every response so a caller sees what was tried."""

    model: str
    """"provider/model" tried."""
    error: AgentmeshError | None
    http_status: int = 0
    duration_s: float = 0.0


FORMAT_OPENAI_CHAT = "openai.chat.completions"
"""SentRequest.format of a chat completions body (the scripted model records one too)."""
FORMAT_ANTHROPIC_MESSAGES = "anthropic.messages"
"""SentRequest.format of a Messages API body."""


@dataclass(frozen=True, slots=True)
class SentRequest:
    """The upstream request a reply answers: its wire format and its body as sent.

    `body` renders the exact bytes (an HTTP adapter's are already built; the scripted model renders
    the chat completions body it stands for only when asked)."""

    format: str
    body: Callable[[], bytes]


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """The assistant's reply with its accounting."""

    message: Message
    finish_reason: FinishReason
    usage: Usage
    model: str
    """"provider/model" that answered."""
    latency_s: float = 0.0
    """Upstream latency of the successful attempt."""
    http_status: int = 0
    provider_model: str = ""
    """The model name the upstream reported (e.g. a dated snapshot), when it reported one."""
    sent: SentRequest | None = None
    """The request this reply answers, as sent (GenerateRequest.include_request returns it)."""


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    """Who serves a model: the configured provider name and its type."""

    name: str
    type: Literal["openai", "anthropic", "scripted"]


# --- streaming ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A fragment of the reply's text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a tool call; id and name come with the first fragment of a call."""

    index: int
    id: str = ""
    name: str = ""
    arguments_delta: str = ""


@dataclass(frozen=True, slots=True)
class StreamFinal:
    """The complete reply: the last event of every successful stream."""

    response: ModelResponse


StreamEvent = TextDelta | ToolCallDelta | StreamFinal


# --- the call context ------------------------------------------------------------------------------


@dataclass
class CallContext:
    """What one call knows beyond the request: its deadline, whom it is accounted to, what was tried.

    `attempts` is appended to by the retry wrapper (one entry per upstream attempt, across the whole
    fallback chain), so it is complete whether the call succeeds or fails.
    """

    deadline: float | None = None
    """Absolute `time.monotonic()` at which the caller stops waiting; None: no deadline."""
    agent_id: str = ""
    attempts: list[Attempt] = field(default_factory=list)
    subject: str = ""
    """The caller's subject (its tenant is the part before `gateway.tenant_separator`)."""
    key_id: str = ""
    """The API key the call was made with ("" for identity tokens): its quotas apply."""
    model_patterns: tuple[str, ...] = ()
    """The models the caller's API key may use (fnmatch patterns); empty: any."""
    metric_agent: str | None = None
    """The `agent` label of the usage metrics: from the verified identity only (its agent id, "" for a
    token without one), never from a request field (issue 39: unbounded label values); None (no
    identity: in-process callers) falls back to `agent_id`."""
    route: Mapping[str, Any] = field(default_factory=dict)
    """How the model was chosen (task tag, `cheapest`, the candidates): set on every GenAI span."""

    def remaining(self) -> float | None:
        """Seconds left before the deadline (may be negative), or None without one."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    @classmethod
    def with_timeout(cls, timeout_s: float | None, agent_id: str = "") -> CallContext:
        """A context whose deadline is `timeout_s` from now (None: no deadline)."""
        return cls(deadline=None if timeout_s is None else time.monotonic() + timeout_s, agent_id=agent_id)


# --- the protocol ----------------------------------------------------------------------------------


@runtime_checkable
class Model(Protocol):
    """A model: an adapter (translates one wire protocol) or a wrapper around another Model.

    `request_stream` yields TextDelta / ToolCallDelta events and ends with exactly one StreamFinal;
    failures are raised as AgentmeshError (never a raw httpx or KeyError). A wrapper may only retry
    or fall back before the first event has been yielded.
    """

    @property
    def name(self) -> str:
        """ "provider/model"."""
        ...

    @property
    def provider(self) -> ProviderInfo: ...

    async def request(self, request: ModelRequest, ctx: CallContext) -> ModelResponse: ...

    def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]: ...


def final_of(events: Sequence[StreamEvent]) -> ModelResponse:
    """The StreamFinal's response in `events` (helper for tests and the non-streaming fallback)."""
    for event in reversed(events):
        if isinstance(event, StreamFinal):
            return event.response
    raise ValueError("stream ended without a final response")
