"""The Anthropic Messages API as provider_svc serves it (`POST /v1/messages`).

Pydantic models of the request body we accept, its mapping to the domain, and the response bodies and
stream events we send, following the official `anthropic` SDK's types (2.10; tests/contract/gateway
drives the endpoint with the SDK and checks every body and event against its models).

Accepted: `model`, `max_tokens` (required, as the API requires), `messages` (text, `tool_use` and
`tool_result` blocks), `system` (a string or text blocks), `tools` (custom tools), `tool_choice` (auto,
any, tool, none), `stop_sequences`, `temperature`, `top_p`, `stream`, `output_config.format`
(json_schema: structured output), and, ignored, `metadata`, `service_tier`, `cache_control` on blocks.
Refused with `invalid_request_error` naming the field: images and documents, `thinking`, server tools,
`top_k`, and any field the API does not have.

Domain code only: no grpc, no stubs.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentmesh.chat import ToolCall
from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError
from provider_svc.models.base import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    Role,
    Sampling,
    ToolChoice,
    ToolDef,
)

__all__ = ["EventWriter", "MessagesRequest", "error_body", "message_body", "parse_request", "to_domain"]

_IGNORED = frozenset({"metadata", "service_tier", "container", "inference_geo", "speed", "diagnostics"})
_STOP = {
    FinishReason.STOP: "end_turn",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.TOOL_CALLS: "tool_use",
    FinishReason.CONTENT_FILTER: "refusal",
    FinishReason.UNSPECIFIED: "end_turn",
}


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextBlock(_Lenient):
    type: Literal["text"]
    text: str


class ToolUseBlock(_Lenient):
    type: Literal["tool_use"]
    id: str
    name: str
    input: Any = None


class ToolResultBlock(_Lenient):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock] | None = None
    is_error: bool | None = None


Block = TextBlock | ToolUseBlock | ToolResultBlock


class MessageIn(_Lenient):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class ToolIn(_Lenient):
    name: str = Field(min_length=1, max_length=128)
    description: str = ""
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None


class ToolChoiceIn(_Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class OutputFormat(_Lenient):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Lenient):
    format: OutputFormat | None = None
    effort: str | None = None


class MessagesRequest(BaseModel):
    """The request body of `POST /v1/messages` (what this gateway reads of it)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=256)
    max_tokens: int = Field(ge=1)
    messages: list[MessageIn] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[ToolIn] | None = None
    tool_choice: ToolChoiceIn | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    stream: bool | None = None
    output_config: OutputConfig | None = None


def parse_request(body: Any) -> MessagesRequest:
    """The request of a parsed JSON body; InvalidRequestError naming the field otherwise."""
    if not isinstance(body, dict):
        raise InvalidRequestError("body", "the request body must be a JSON object")
    for name in ("thinking", "top_k"):
        if body.get(name) is not None:
            raise InvalidRequestError(name, f"{name}: not supported by this gateway")
    unknown = [k for k in body if k not in MessagesRequest.model_fields and k not in _IGNORED]
    if unknown:
        raise InvalidRequestError(unknown[0], f"{unknown[0][:64]}: Extra inputs are not permitted")
    try:
        return MessagesRequest.model_validate({k: v for k, v in body.items() if k not in _IGNORED})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidRequestError(where, f"{first['msg']}") from None


def _arguments(value: Any) -> str:
    return json.dumps(value if value is not None else {}, ensure_ascii=False, separators=(",", ":"))


def _result_text(content: str | list[TextBlock] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(block.text for block in content)


def to_domain(request: MessagesRequest) -> ModelRequest:
    """The domain request: `system` first, tool results as tool messages, tool uses as tool calls."""
    messages: list[Message] = []
    system = request.system if isinstance(request.system, str) else "".join(b.text for b in request.system or ())
    if system:
        messages.append(Message(role=Role.SYSTEM, content=system))
    for m in request.messages:
        blocks = [TextBlock(type="text", text=m.content)] if isinstance(m.content, str) else m.content
        texts = [b.text for b in blocks if isinstance(b, TextBlock)]
        if m.role == "assistant":
            calls = tuple(
                ToolCall(id=b.id, name=b.name, arguments_json=_arguments(b.input))
                for b in blocks
                if isinstance(b, ToolUseBlock)
            )
            messages.append(Message(role=Role.ASSISTANT, content="".join(texts), tool_calls=calls))
            continue
        for b in blocks:
            if isinstance(b, ToolResultBlock):
                messages.append(Message(role=Role.TOOL, content=_result_text(b.content), tool_call_id=b.tool_use_id))
            elif isinstance(b, ToolUseBlock):
                raise InvalidRequestError("messages", "tool_use blocks belong to assistant messages")
        if texts:
            messages.append(Message(role=Role.USER, content="".join(texts)))
    choice: ToolChoice | None = None
    if request.tool_choice is not None:
        kind = request.tool_choice.type
        if kind == "tool":
            if not request.tool_choice.name:
                raise InvalidRequestError("tool_choice.name", "required for tool_choice type tool")
            choice = ToolChoice(mode="tool", tool_name=request.tool_choice.name)
        else:
            choice = ToolChoice(mode={"auto": "auto", "any": "required", "none": "none"}[kind])  # type: ignore[arg-type]
    fmt = request.output_config.format if request.output_config is not None else None
    return ModelRequest(
        messages=tuple(messages),
        tools=tuple(
            ToolDef(name=t.name, description=t.description, input_schema=t.input_schema) for t in request.tools or ()
        ),
        tool_choice=choice,
        sampling=Sampling(
            temperature=request.temperature,
            top_p=request.top_p,
            max_tokens=request.max_tokens,
            stop=tuple(request.stop_sequences or ()),
        ),
        response_schema=fmt.schema_ if fmt is not None else None,
    )


def _tool_input(arguments_json: str) -> Any:
    """A tool call's arguments as the API's object (text that is not one is kept readable, wrapped)."""
    try:
        value = json.loads(arguments_json) if arguments_json.strip() else {}
    except ValueError:
        return {"_unparsed_arguments": arguments_json}
    return value if isinstance(value, dict) else {"_value": value}


def message_body(response: ModelResponse, message_id: str) -> dict[str, Any]:
    """A `message` object for a reply (`model` is the model that answered)."""
    content: list[dict[str, Any]] = []
    if response.message.content:
        content.append({"type": "text", "text": response.message.content})
    for call in response.message.tool_calls:
        content.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call.arguments_json)}
        )
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": response.model,
        "content": content,
        "stop_reason": _STOP[response.finish_reason],
        "stop_sequence": None,
        "usage": {"input_tokens": response.usage.input_tokens, "output_tokens": response.usage.output_tokens},
    }


class EventWriter:
    """The server-sent events of one streamed reply: (event name, data) pairs in the API's order."""

    def __init__(self, message_id: str, model: str, input_estimate: int) -> None:
        self.message_id = message_id
        self.model = model
        self.input_estimate = input_estimate
        self._index = -1
        self._open: str = ""
        self._calls: dict[int, int] = {}

    def _event(self, name: str, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return name, {"type": name, **data}

    def start(self) -> list[tuple[str, dict[str, Any]]]:
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_estimate, "output_tokens": 0},
        }
        return [self._event("message_start", {"message": message})]

    def _close(self) -> list[tuple[str, dict[str, Any]]]:
        if not self._open:
            return []
        self._open = ""
        return [self._event("content_block_stop", {"index": self._index})]

    def text(self, piece: str) -> list[tuple[str, dict[str, Any]]]:
        events = []
        if self._open != "text":
            events += self._close()
            self._index += 1
            self._open = "text"
            events.append(
                self._event(
                    "content_block_start", {"index": self._index, "content_block": {"type": "text", "text": ""}}
                )
            )
        events.append(
            self._event("content_block_delta", {"index": self._index, "delta": {"type": "text_delta", "text": piece}})
        )
        return events

    def tool_call(self, index: int, call_id: str, name: str, arguments: str) -> list[tuple[str, dict[str, Any]]]:
        events = []
        if index not in self._calls:
            events += self._close()
            self._index += 1
            self._open = "tool_use"
            self._calls[index] = self._index
            block = {"type": "tool_use", "id": call_id or f"toolu_{index}", "name": name, "input": {}}
            events.append(self._event("content_block_start", {"index": self._index, "content_block": block}))
        if arguments:
            delta = {"type": "input_json_delta", "partial_json": arguments}
            events.append(self._event("content_block_delta", {"index": self._calls[index], "delta": delta}))
        return events

    def finish(self, response: ModelResponse) -> list[tuple[str, dict[str, Any]]]:
        events = self._close()
        usage = {"input_tokens": response.usage.input_tokens, "output_tokens": response.usage.output_tokens}
        delta = {"stop_reason": _STOP[response.finish_reason], "stop_sequence": None}
        events.append(self._event("message_delta", {"delta": delta, "usage": usage}))
        events.append(self._event("message_stop", {}))
        return events


# --- errors ----------------------------------------------------------------------------------------

_STATUS: dict[ErrorCode, tuple[int, str]] = {
    ErrorCode.INVALID_REQUEST: (400, "invalid_request_error"),
    ErrorCode.SCHEMA_INVALID: (400, "invalid_request_error"),
    ErrorCode.UPSTREAM_REJECTED: (400, "invalid_request_error"),
    ErrorCode.CONTEXT_LENGTH_EXCEEDED: (400, "invalid_request_error"),
    ErrorCode.CONTENT_FILTERED: (400, "invalid_request_error"),
    ErrorCode.UNAUTHENTICATED: (401, "authentication_error"),
    ErrorCode.BUDGET_EXCEEDED: (402, "billing_error"),
    ErrorCode.PERMISSION_DENIED: (403, "permission_error"),
    ErrorCode.NOT_FOUND: (404, "not_found_error"),
    ErrorCode.UPSTREAM_NOT_FOUND: (404, "not_found_error"),
    # The API's docs name this `request_too_large`; the SDK's ErrorType (2.10) does not know it.
    ErrorCode.PAYLOAD_TOO_LARGE: (413, "invalid_request_error"),
    ErrorCode.RATE_LIMITED: (429, "rate_limit_error"),
    ErrorCode.OVERLOADED: (529, "overloaded_error"),
    ErrorCode.UNAVAILABLE: (503, "api_error"),
    ErrorCode.UPSTREAM_UNAVAILABLE: (529, "overloaded_error"),
    ErrorCode.PROVIDER_AUTH_FAILED: (502, "api_error"),
    ErrorCode.UPSTREAM_TIMEOUT: (504, "timeout_error"),
    ErrorCode.DEADLINE_EXCEEDED: (504, "timeout_error"),
    ErrorCode.CANCELLED: (499, "api_error"),
}


def error_status(err: AgentmeshError) -> int:
    return _STATUS.get(err.code, (500, "api_error"))[0]


def error_body(err: AgentmeshError, request_id: str) -> dict[str, Any]:
    """The API's error object for `err` (agentmesh's code and class beside it)."""
    kind = _STATUS.get(err.code, (500, "api_error"))[1]
    return {
        "type": "error",
        "error": {
            "type": kind,
            "message": err.message,
            "agentmesh_code": err.code.name,
            "agentmesh_class": err.error_class.name,
        },
        "request_id": request_id,
    }
