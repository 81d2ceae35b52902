"""The OpenAI chat completions API as provider_svc serves it (`POST /v1/chat/completions`, `GET /v1/models`).

Pydantic models of the request body we accept and the bodies we answer, and their mapping to and from
the domain (`provider_svc.models.base`). The shapes follow the official `openai` SDK's types (3.51);
tests/contract/gateway checks every body we send against them and drives the endpoint with the SDK.

Accepted: `model`, `messages` (system, developer, user, assistant with tool calls, tool; text content
as a string or text parts), `tools` (functions), `tool_choice`, `response_format` (text, json_object,
json_schema), `temperature`, `top_p`, `max_tokens` / `max_completion_tokens`, `stop`, `seed`, `stream`
with `stream_options.include_usage`, and, ignored, `user`, `metadata`, `store`, `parallel_tool_calls`,
`service_tier`, `prompt_cache_key`, `safety_identifier`, `reasoning_effort`, `verbosity`. Refused with
`invalid_request_error` naming the parameter: `n` > 1, `logprobs`, non-zero penalties, `logit_bias`,
audio, images, `prediction`, `web_search_options`, and any argument the API does not have (the API's
own "Unrecognized request argument supplied").

Domain code only: no grpc, no stubs.
"""

from __future__ import annotations

import json
import time
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

__all__ = [
    "ChatCompletionRequest",
    "completion_body",
    "model_list_body",
    "parse_request",
    "stream_chunks",
    "to_domain",
]

_IGNORED = frozenset(
    {
        "user", "metadata", "store", "parallel_tool_calls", "service_tier", "prompt_cache_key", "safety_identifier",
        "reasoning_effort", "verbosity", "prompt_cache_retention", "prompt_cache_options",
    }
)  # fmt: skip
_FINISH = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.TOOL_CALLS: "tool_calls",
    FinishReason.CONTENT_FILTER: "content_filter",
    FinishReason.UNSPECIFIED: "stop",
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Lenient(BaseModel):
    # Nested objects: the SDK may add fields we need not read (e.g. `cache_control`); kept, not refused.
    model_config = ConfigDict(extra="allow")


class TextPart(_Lenient):
    type: Literal["text", "refusal"]
    text: str = ""
    refusal: str = ""


class FunctionCall(_Lenient):
    name: str
    arguments: str = ""


class ToolCallIn(_Lenient):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class MessageIn(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None


class FunctionDef(_Lenient):
    name: str = Field(min_length=1, max_length=128)
    description: str = ""
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolIn(_Lenient):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(_Lenient):
    name: str = "response"
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None
    description: str | None = None


class ResponseFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(_Lenient):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class ChatCompletionRequest(_Model):
    """The request body of `POST /v1/chat/completions` (what this gateway reads of it)."""

    model: str = Field(min_length=1, max_length=256)
    messages: list[MessageIn] = Field(min_length=1)
    tools: list[ToolIn] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    response_format: ResponseFormat | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=1)
    logprobs: bool | None = None
    top_logprobs: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    modalities: list[Literal["text"]] | None = None


def parse_request(body: Any) -> ChatCompletionRequest:
    """The request of a parsed JSON body; InvalidRequestError naming the parameter otherwise."""
    if not isinstance(body, dict):
        raise InvalidRequestError("body", "the request body must be a JSON object")
    unknown = [k for k in body if k not in ChatCompletionRequest.model_fields and k not in _IGNORED]
    if unknown:
        raise InvalidRequestError(unknown[0], f"Unrecognized request argument supplied: {unknown[0][:64]}")
    known = {k: v for k, v in body.items() if k not in _IGNORED}
    try:
        request = ChatCompletionRequest.model_validate(known)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidRequestError(where, f"{first['msg']}") from None
    if request.logprobs or request.top_logprobs:
        raise InvalidRequestError("logprobs", "logprobs are not supported by this gateway")
    if request.logit_bias:
        raise InvalidRequestError("logit_bias", "logit_bias is not supported by this gateway")
    for name in ("frequency_penalty", "presence_penalty"):
        if getattr(request, name):
            raise InvalidRequestError(name, f"{name} is not supported by this gateway (send 0 or leave it out)")
    return request


def _text(content: str | list[TextPart] | None, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(part.text or part.refusal for part in content)


def to_domain(request: ChatCompletionRequest) -> ModelRequest:
    """The domain request; InvalidRequestError naming the field it cannot take."""
    messages: list[Message] = []
    for i, m in enumerate(request.messages):
        text = _text(m.content, f"messages[{i}].content")
        if m.role in ("system", "developer"):
            messages.append(Message(role=Role.SYSTEM, content=text))
        elif m.role == "user":
            messages.append(Message(role=Role.USER, content=text, name=m.name or ""))
        elif m.role == "assistant":
            calls = tuple(
                ToolCall(id=c.id, name=c.function.name, arguments_json=c.function.arguments) for c in m.tool_calls or ()
            )
            messages.append(Message(role=Role.ASSISTANT, content=text or (m.refusal or ""), tool_calls=calls))
        else:
            if not m.tool_call_id:
                raise InvalidRequestError(f"messages[{i}].tool_call_id", "required for a tool message")
            messages.append(Message(role=Role.TOOL, content=text, tool_call_id=m.tool_call_id, name=m.name or ""))
    tools = tuple(
        ToolDef(
            name=t.function.name,
            description=t.function.description,
            input_schema=t.function.parameters or {"type": "object", "properties": {}},
        )
        for t in request.tools or ()
    )
    choice: ToolChoice | None = None
    if isinstance(request.tool_choice, str):
        choice = ToolChoice(mode=request.tool_choice)
    elif request.tool_choice is not None:
        choice = ToolChoice(mode="tool", tool_name=request.tool_choice.function.name)
    schema: dict[str, Any] | None = None
    fmt = request.response_format
    if fmt is not None and fmt.type == "json_object":
        schema = {"type": "object"}
    elif fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None or fmt.json_schema.schema_ is None:
            raise InvalidRequestError(
                "response_format.json_schema.schema", "a json_schema response format needs a schema"
            )
        schema = fmt.json_schema.schema_
    stop = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
    return ModelRequest(
        messages=tuple(messages),
        tools=tools,
        tool_choice=choice,
        sampling=Sampling(
            temperature=request.temperature,
            top_p=request.top_p,
            max_tokens=request.max_completion_tokens or request.max_tokens,
            stop=stop,
            seed=request.seed,
        ),
        response_schema=schema,
    )


# --- responses ------------------------------------------------------------------------------------


def _usage(response: ModelResponse) -> dict[str, int]:
    usage = response.usage
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def completion_body(response: ModelResponse, completion_id: str, created: int | None = None) -> dict[str, Any]:
    """A `chat.completion` object for a reply (`model` is the model that answered: routing shows)."""
    message: dict[str, Any] = {"role": "assistant", "content": response.message.content or None, "refusal": None}
    if response.message.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
            for c in response.message.tool_calls
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": response.model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": _FINISH[response.finish_reason], "logprobs": None}
        ],
        "usage": _usage(response),
        "system_fingerprint": None,
    }


class ChunkWriter:
    """The `chat.completion.chunk` objects of one streamed reply, in order."""

    def __init__(self, completion_id: str, model: str, *, include_usage: bool) -> None:
        self.base = {"id": completion_id, "object": "chat.completion.chunk", "created": int(time.time())}
        self.model = model
        self.include_usage = include_usage
        self._started = False

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            **self.base,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def start(self) -> dict[str, Any]:
        self._started = True
        return self._chunk({"role": "assistant", "content": ""})

    def text(self, piece: str) -> dict[str, Any]:
        return self._chunk({"content": piece})

    def tool_call(self, index: int, call_id: str, name: str, arguments: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"index": index}
        if call_id or name:
            entry |= {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        else:
            entry["function"] = {"arguments": arguments}
        return self._chunk({"tool_calls": [entry]})

    def finish(self, response: ModelResponse) -> list[dict[str, Any]]:
        self.model = response.model
        chunks = [self._chunk({}, _FINISH[response.finish_reason])]
        if self.include_usage:
            chunks.append({**self.base, "model": self.model, "choices": [], "usage": _usage(response)})
        return chunks


def stream_chunks(completion_id: str, model: str, *, include_usage: bool) -> ChunkWriter:
    """A writer of one reply's chunks."""
    return ChunkWriter(completion_id, model, include_usage=include_usage)


def model_list_body(names: list[tuple[str, str]]) -> dict[str, Any]:
    """`GET /v1/models`: (id, owner) pairs as the API's list."""
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": 0, "owned_by": owner} for name, owner in names],
    }


def model_body(name: str, owner: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": owner}


# --- errors ----------------------------------------------------------------------------------------

_STATUS: dict[ErrorCode, tuple[int, str, str | None]] = {
    ErrorCode.INVALID_REQUEST: (400, "invalid_request_error", None),
    ErrorCode.SCHEMA_INVALID: (400, "invalid_request_error", None),
    ErrorCode.UPSTREAM_REJECTED: (400, "invalid_request_error", "upstream_rejected"),
    ErrorCode.CONTEXT_LENGTH_EXCEEDED: (400, "invalid_request_error", "context_length_exceeded"),
    ErrorCode.CONTENT_FILTERED: (400, "invalid_request_error", "content_filter"),
    ErrorCode.UNAUTHENTICATED: (401, "invalid_request_error", "invalid_api_key"),
    ErrorCode.PERMISSION_DENIED: (403, "permission_error", "model_not_allowed"),
    ErrorCode.NOT_FOUND: (404, "invalid_request_error", "model_not_found"),
    ErrorCode.UPSTREAM_NOT_FOUND: (404, "invalid_request_error", "model_not_found"),
    ErrorCode.PAYLOAD_TOO_LARGE: (413, "invalid_request_error", "request_too_large"),
    ErrorCode.RATE_LIMITED: (429, "requests", "rate_limit_exceeded"),
    ErrorCode.BUDGET_EXCEEDED: (429, "insufficient_quota", "insufficient_quota"),
    ErrorCode.OVERLOADED: (503, "server_error", "overloaded"),
    ErrorCode.UNAVAILABLE: (503, "server_error", "service_unavailable"),
    ErrorCode.UPSTREAM_UNAVAILABLE: (502, "server_error", "upstream_unavailable"),
    ErrorCode.PROVIDER_AUTH_FAILED: (502, "server_error", "upstream_auth_failed"),
    ErrorCode.UPSTREAM_TIMEOUT: (504, "server_error", "upstream_timeout"),
    ErrorCode.DEADLINE_EXCEEDED: (504, "server_error", "timeout"),
    ErrorCode.CANCELLED: (499, "server_error", "cancelled"),
}


def error_status(err: AgentmeshError) -> int:
    return _STATUS.get(err.code, (500, "server_error", None))[0]


def error_body(err: AgentmeshError, request_id: str) -> dict[str, Any]:
    """The API's error object for `err` (agentmesh's code and class beside it, which the SDK keeps)."""
    _, kind, code = _STATUS.get(err.code, (500, "server_error", None))
    if err.code == ErrorCode.RATE_LIMITED and err.metadata.get("limit") == "tpm":
        kind = "tokens"
    param = err.violations[0].path if err.violations else None
    return {
        "error": {
            "message": err.message,
            "type": kind,
            "param": param,
            "code": code,
            "agentmesh_code": err.code.name,
            "agentmesh_class": err.error_class.name,
            "request_id": request_id,
        }
    }


def stream_error(err: AgentmeshError, request_id: str) -> dict[str, Any]:
    """An error after the stream began: the API sends it as one more data event."""
    return error_body(err, request_id)


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
