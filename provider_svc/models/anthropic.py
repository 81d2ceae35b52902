"""`anthropic`: the Messages API (`POST {base_url}/v1/messages`).

Only translates: system messages go to the top-level `system`; tool calls and results become
`tool_use` / `tool_result` content blocks (consecutive messages of one role are merged, as the API
requires alternation); `max_tokens` is always sent (the request's, else the configured default);
temperature is mapped into 0-1 where the backend enables it (`extra_params`: the current API, as
the pinned SDK types it, has no temperature/top_p); response_schema becomes
`output_config.format` (structured outputs), or with `structured_output="tool"` a forced final tool
(`final_answer`, its input schema the response schema; tool_choice names it, or `any` beside other
tools) whose input comes back as the reply's text (issue 41). Streaming reads `message_start`,
`content_block_start/delta/stop` (`text_delta`, `input_json_delta`), `message_delta`, `message_stop`
and mid-stream `error` events.

Tool inputs are JSON objects on this wire: they are parsed and written with their numbers verbatim
(no float round trip), so large integer ids survive both ways.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from agentmesh.errors import AgentmeshError, ErrorCode
from provider_svc.exceptions import UpstreamError, error_from_status, malformed
from provider_svc.models._http import HttpBackend, dumps_raw, event_json, loads_raw
from provider_svc.models.base import (
    FORMAT_ANTHROPIC_MESSAGES,
    CallContext,
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    ProviderInfo,
    Role,
    SentRequest,
    StreamEvent,
    StreamFinal,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from provider_svc.params import map_sampling, map_tool_choice

__all__ = ["STOP_REASONS", "AnthropicModel", "build_body", "parse_response"]

log = logging.getLogger("provider_svc.anthropic")

STOP_REASONS: Mapping[str, FinishReason] = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "pause_turn": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "refusal": FinishReason.CONTENT_FILTER,
}

# Mid-stream `error` events carry an error type instead of an HTTP status.
_STREAM_ERROR_STATUS: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


def _error_status(data: Mapping[str, Any]) -> int:
    """The HTTP status an `error` body or event stands for (by its error type)."""
    err = data.get("error")
    kind = err.get("type") if isinstance(err, dict) else None
    return _STREAM_ERROR_STATUS.get(str(kind), 500)


def _tool_input(arguments_json: str) -> Any:
    # The API wants an object; text that is not one (a malformed call the model made earlier) is
    # kept readable for the model rather than silently replaced.
    try:
        value = loads_raw(arguments_json) if arguments_json.strip() else {}
    except ValueError:
        return {"_unparsed_arguments": arguments_json}
    return value if isinstance(value, dict) else {"_value": value}


def _blocks(m: Message) -> list[dict[str, Any]]:
    if m.role == Role.TOOL:
        return [{"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}]
    blocks: list[dict[str, Any]] = []
    if m.content:
        blocks.append({"type": "text", "text": m.content})
    for call in m.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call.arguments_json)})
    return blocks


def build_body(
    model_id: str,
    request: ModelRequest,
    *,
    stream: bool,
    default_max_tokens: int,
    on_unsupported: Literal["drop", "reject"] = "drop",
    extra_params: frozenset[str] = frozenset(),
    structured_output: Literal["native", "tool"] = "native",
) -> dict[str, Any]:
    """The Messages API request body for `request` (tool inputs hold RawNumber: write with dumps_raw)."""
    system = "\n\n".join(m.content for m in request.messages if m.role == Role.SYSTEM and m.content)
    messages: list[dict[str, Any]] = []
    for m in request.messages:
        if m.role == Role.SYSTEM:
            continue
        role = "assistant" if m.role == Role.ASSISTANT else "user"
        blocks = _blocks(m)
        if not blocks:
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})
    body: dict[str, Any] = {"model": model_id, "messages": messages}
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)} for t in request.tools
        ]
    choice = map_tool_choice("anthropic", request.tool_choice, {t.name for t in request.tools})
    if choice is not None:
        body["tool_choice"] = choice
    params = map_sampling("anthropic", request.sampling, on_unsupported=on_unsupported, enabled=extra_params).params
    params.setdefault("max_tokens", default_max_tokens)
    body.update(params)
    if final_tool(request, structured_output):
        assert request.response_schema is not None
        tools = list(body.get("tools", []))
        tools.append(
            {
                "name": FINAL_ANSWER_TOOL,
                "description": FINAL_ANSWER_DESCRIPTION,
                "input_schema": dict(request.response_schema),
            }
        )
        body["tools"] = tools
        # Forced: the final tool alone, or some tool (never prose) beside the others.
        body["tool_choice"] = {"type": "tool", "name": FINAL_ANSWER_TOOL} if len(tools) == 1 else {"type": "any"}
    elif request.response_schema is not None:
        body["output_config"] = {"format": {"type": "json_schema", "schema": dict(request.response_schema)}}
    if stream:
        body["stream"] = True
    return body


FINAL_ANSWER_TOOL = "final_answer"
FINAL_ANSWER_DESCRIPTION = (
    "Give your final answer with this tool, once, when you are done: its input is the answer, following "
    "its schema. Call the other tools first if you need them."
)


def final_tool(request: ModelRequest, structured_output: str) -> bool:
    """Whether the schema is asked for as a forced final tool: tool mode, an object schema (a tool's input
    is an object), no tool of that name already, and a tool choice that lets the model call it."""
    schema = request.response_schema
    choice = request.tool_choice
    return (
        structured_output == "tool"
        and schema is not None
        and schema.get("type", "object") == "object"
        and all(t.name != FINAL_ANSWER_TOOL for t in request.tools)
        and (choice is None or choice.mode == "auto")
    )


def _usage(provider: str, raw: Any, base: Usage | None = None) -> Usage:
    if raw is None:
        return base or Usage()
    if not isinstance(raw, dict):
        raise malformed(provider, "usage is not an object")
    counts: dict[str, int] = {}
    for key in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        value = raw.get(key)
        if value is not None and not isinstance(value, int):
            raise malformed(provider, f"usage.{key} is not an integer")
        counts[key] = value or 0
    # Cached prompt tokens are still prompt tokens (they are billed, at other rates).
    prompt = counts["input_tokens"] + counts["cache_creation_input_tokens"] + counts["cache_read_input_tokens"]
    if base is not None:
        return Usage(
            input_tokens=prompt if "input_tokens" in raw and raw["input_tokens"] is not None else base.input_tokens,
            output_tokens=counts["output_tokens"] if raw.get("output_tokens") is not None else base.output_tokens,
        )
    return Usage(input_tokens=prompt, output_tokens=counts["output_tokens"])


def _stop(provider: str, reason: Any) -> FinishReason:
    if reason is None:
        return FinishReason.UNSPECIFIED
    if not isinstance(reason, str):
        raise malformed(provider, "stop_reason is not a string")
    return STOP_REASONS.get(reason, FinishReason.UNSPECIFIED)


def _refused(provider: str, name: str) -> UpstreamError:
    return UpstreamError(
        ErrorCode.CONTENT_FILTERED, f"{provider} refused to answer on {name} (stop_reason refusal)", provider=provider
    )


def parse_response(
    provider: str, name: str, data: Mapping[str, Any], *, status: int, latency_s: float, final: str = ""
) -> ModelResponse:
    """Our response from a Messages API body; malformed-response errors, never KeyError."""
    if data.get("type") == "error":
        raise error_from_status(provider, _error_status(data), json.dumps(data))
    content = data.get("content")
    if not isinstance(content, list):
        raise malformed(provider, "content is not a list")
    text: list[str] = []
    calls: list[ToolCall] = []
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            raise malformed(provider, f"content[{i}] is not an object")
        kind = block.get("type")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise malformed(provider, f"content[{i}].text is not a string")
            text.append(block["text"])
        elif kind == "tool_use":
            if not isinstance(block.get("name"), str) or not isinstance(block.get("input"), dict):
                raise malformed(provider, f"content[{i}] tool_use lacks name or input")
            if final and block["name"] == final:
                # The forced final tool: its input is the answer.
                text.append(dumps_raw(block["input"]))
                continue
            calls.append(
                ToolCall(
                    id=str(block.get("id") or f"toolu_{i}"),
                    name=block["name"],
                    arguments_json=dumps_raw(block["input"]),
                )
            )
        # thinking / redacted_thinking / server tool blocks are not part of our reply.
    finish = _stop(provider, data.get("stop_reason"))
    if final and not calls and finish == FinishReason.TOOL_CALLS:
        finish = FinishReason.STOP
    if finish == FinishReason.CONTENT_FILTER and not text and not calls:
        raise _refused(provider, name)
    return ModelResponse(
        message=Message(role=Role.ASSISTANT, content="".join(text), tool_calls=tuple(calls)),
        finish_reason=finish,
        usage=_usage(provider, data.get("usage")),
        model=name,
        latency_s=latency_s,
        http_status=status,
        provider_model=str(data.get("model") or ""),
    )


@dataclass
class _Block:
    kind: str
    call_index: int = -1
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    initial_input: Any = None


class AnthropicModel:
    """A model on the Anthropic Messages API."""

    def __init__(
        self,
        backend: HttpBackend,
        provider_name: str,
        model_id: str,
        *,
        default_max_tokens: int = 1024,
        on_unsupported: Literal["drop", "reject"] = "drop",
        extra_params: frozenset[str] = frozenset(),
        structured_output: Literal["native", "tool"] = "native",
    ) -> None:
        self.extra_params = extra_params
        self.structured_output = structured_output
        self._backend = backend
        self._provider = ProviderInfo(provider_name, "anthropic")
        self.model_id = model_id
        self._name = f"{provider_name}/{model_id}"
        self.default_max_tokens = default_max_tokens
        self.on_unsupported = on_unsupported

    @property
    def name(self) -> str:
        return self._name

    @property
    def provider(self) -> ProviderInfo:
        return self._provider

    def _body(self, request: ModelRequest, stream: bool) -> bytes:
        body = build_body(
            self.model_id,
            request,
            stream=stream,
            default_max_tokens=self.default_max_tokens,
            on_unsupported=self.on_unsupported,
            extra_params=self.extra_params,
            structured_output=self.structured_output,
        )
        return dumps_raw(body).encode()

    def _final(self, request: ModelRequest) -> str:
        return FINAL_ANSWER_TOOL if final_tool(request, self.structured_output) else ""

    async def request(self, request: ModelRequest, ctx: CallContext) -> ModelResponse:
        body = self._body(request, False)
        status, data, latency = await self._backend.post_json("v1/messages", body, ctx)
        try:
            response = parse_response(
                self._provider.name, self._name, data, status=status, latency_s=latency, final=self._final(request)
            )
        except AgentmeshError as err:
            raise self._backend.scrubbed(err) from None
        return replace(response, sent=SentRequest(FORMAT_ANTHROPIC_MESSAGES, lambda: body))

    async def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        try:
            async for event in self._stream(request, ctx):
                yield event
        except AgentmeshError as err:
            raise self._backend.scrubbed(err) from None

    async def _stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        provider = self._provider.name
        blocks: dict[int, _Block] = {}
        usage = Usage()
        finish = FinishReason.UNSPECIFIED
        upstream_model = ""
        stopped = False
        calls_seen = 0
        started = time.monotonic()
        body = self._body(request, True)
        final = self._final(request)
        async with self._backend.stream_sse("v1/messages", body, ctx) as events:
            async for event in events:
                kind = event.event
                if kind == "ping":
                    continue
                data = event_json(provider, event)
                if not isinstance(data, dict):
                    raise malformed(provider, f"{kind} event is not an object")
                kind = kind or str(data.get("type", ""))
                if kind == "error":
                    raise error_from_status(provider, _error_status(data), json.dumps(data))
                if kind == "message_start":
                    message = data.get("message")
                    if not isinstance(message, dict):
                        raise malformed(provider, "message_start without a message")
                    upstream_model = str(message.get("model") or "")
                    usage = _usage(provider, message.get("usage"))
                elif kind == "content_block_start":
                    index, block = data.get("index"), data.get("content_block")
                    if not isinstance(index, int) or not isinstance(block, dict):
                        raise malformed(provider, "content_block_start without index or content_block")
                    current = _Block(kind=str(block.get("type")))
                    blocks[index] = current
                    if current.kind == "tool_use" and final and block.get("name") == final:
                        # The forced final tool streams the answer as text.
                        current.kind, current.initial_input = "final", block.get("input")
                    elif current.kind == "tool_use":
                        current.call_index, calls_seen = calls_seen, calls_seen + 1
                        current.id, current.name = str(block.get("id") or ""), str(block.get("name") or "")
                        current.initial_input = block.get("input")
                        yield ToolCallDelta(index=current.call_index, id=current.id, name=current.name)
                    elif current.kind == "text" and block.get("text"):
                        current.parts.append(str(block["text"]))
                        yield TextDelta(str(block["text"]))
                elif kind == "content_block_delta":
                    index, delta = data.get("index"), data.get("delta")
                    current_block = blocks.get(index) if isinstance(index, int) else None
                    if current_block is None or not isinstance(delta, dict):
                        raise malformed(provider, "content_block_delta for an unknown block")
                    if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                        current_block.parts.append(delta["text"])
                        yield TextDelta(delta["text"])
                    elif delta.get("type") == "input_json_delta" and isinstance(delta.get("partial_json"), str):
                        current_block.parts.append(delta["partial_json"])
                        if delta["partial_json"] and current_block.kind == "final":
                            yield TextDelta(delta["partial_json"])
                        elif delta["partial_json"]:
                            yield ToolCallDelta(index=current_block.call_index, arguments_delta=delta["partial_json"])
                elif kind == "message_delta":
                    delta = data.get("delta")
                    if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                        finish = _stop(provider, delta["stop_reason"])
                    usage = _usage(provider, data.get("usage"), base=usage)
                elif kind == "message_stop":
                    stopped = True
                    break
        if not stopped:
            raise malformed(provider, "stream ended before message_stop")
        text = "".join(
            "".join(b.parts) if b.kind == "text" else self._arguments(b)
            for _, b in sorted(blocks.items())
            if b.kind in ("text", "final")
        )
        calls = tuple(
            ToolCall(id=b.id or f"toolu_{b.call_index}", name=b.name, arguments_json=self._arguments(b))
            for _, b in sorted(blocks.items())
            if b.kind == "tool_use"
        )
        if final and not calls and finish == FinishReason.TOOL_CALLS:
            finish = FinishReason.STOP
        if finish == FinishReason.CONTENT_FILTER and not text and not calls:
            raise _refused(provider, self._name)
        yield StreamFinal(
            ModelResponse(
                message=Message(role=Role.ASSISTANT, content=text, tool_calls=calls),
                finish_reason=finish,
                usage=usage,
                model=self._name,
                latency_s=time.monotonic() - started,
                http_status=200,
                provider_model=upstream_model,
                sent=SentRequest(FORMAT_ANTHROPIC_MESSAGES, lambda: body),
            )
        )

    @staticmethod
    def _arguments(block: _Block) -> str:
        joined = "".join(block.parts)
        if joined:
            return joined  # the model's own text, byte for byte
        return dumps_raw(block.initial_input) if isinstance(block.initial_input, dict) else "{}"
