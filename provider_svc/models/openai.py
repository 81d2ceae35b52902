"""`openai`: the chat completions protocol (OpenAI, and vLLM, Ollama, DeepSeek, llama.cpp servers).

Only translates: our ModelRequest -> `POST {base_url}/chat/completions` -> our ModelResponse, with
SSE streaming (`stream_options.include_usage` for the usage of the final chunk). Tool-call
arguments are JSON text on this wire and are passed through byte for byte.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from agentmesh.answers import strict_compatible
from agentmesh.errors import AgentmeshError, ErrorCode
from provider_svc.exceptions import UpstreamError, malformed
from provider_svc.models._http import HttpBackend, dumps_raw, event_json
from provider_svc.models.base import (
    FORMAT_OPENAI_CHAT,
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

__all__ = ["FINISH_REASONS", "OpenAIModel", "build_body", "parse_response"]

log = logging.getLogger("provider_svc.openai")

FINISH_REASONS: Mapping[str, FinishReason] = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "content_filter": FinishReason.CONTENT_FILTER,
}


def _message(m: Message) -> dict[str, Any]:
    if m.role == Role.TOOL:
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
    if m.role == Role.ASSISTANT:
        out: dict[str, Any] = {"role": "assistant", "content": m.content or None}
        if m.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
                for c in m.tool_calls
            ]
        return out
    return {"role": m.role.value, "content": m.content}


def build_body(
    model_id: str,
    request: ModelRequest,
    *,
    stream: bool,
    on_unsupported: Literal["drop", "reject"] = "drop",
) -> dict[str, Any]:
    """The chat completions request body for `request`."""
    body: dict[str, Any] = {"model": model_id, "messages": [_message(m) for m in request.messages]}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": dict(t.input_schema)},
            }
            for t in request.tools
        ]
    choice = map_tool_choice("openai", request.tool_choice, {t.name for t in request.tools})
    if choice is not None:
        body["tool_choice"] = choice
    if request.response_schema is not None:
        json_schema: dict[str, Any] = {"name": "response", "schema": dict(request.response_schema)}
        if strict_compatible(request.response_schema):
            # Strict decoding guarantees the schema; OpenAI accepts it only for closed, all-required objects.
            json_schema["strict"] = True
        body["response_format"] = {"type": "json_schema", "json_schema": json_schema}
    body.update(map_sampling("openai", request.sampling, on_unsupported=on_unsupported).params)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _usage(provider: str, raw: Any) -> Usage:
    if raw is None:
        return Usage()
    if not isinstance(raw, dict):
        raise malformed(provider, "usage is not an object")
    prompt, completion = raw.get("prompt_tokens", 0), raw.get("completion_tokens", 0)
    if not isinstance(prompt, int) or not isinstance(completion, int):
        raise malformed(provider, "usage token counts are not integers")
    return Usage(input_tokens=prompt, output_tokens=completion)


def _finish(provider: str, reason: Any) -> FinishReason:
    if reason is None:
        return FinishReason.UNSPECIFIED
    if not isinstance(reason, str):
        raise malformed(provider, "finish_reason is not a string")
    return FINISH_REASONS.get(reason, FinishReason.UNSPECIFIED)


def _content_filtered(provider: str, name: str) -> UpstreamError:
    return UpstreamError(
        ErrorCode.CONTENT_FILTERED,
        f"{provider} filtered the reply of {name} (finish_reason content_filter)",
        provider=provider,
    )


def parse_response(
    provider: str, name: str, data: Mapping[str, Any], *, status: int, latency_s: float
) -> ModelResponse:
    """Our response from a chat completion body; malformed-response errors, never KeyError."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise malformed(provider, "no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise malformed(provider, "choices[0].message is not an object")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise malformed(provider, "message.content is not a string")
    calls: list[ToolCall] = []
    for i, raw in enumerate(message.get("tool_calls") or []):
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise malformed(provider, f"tool_calls[{i}] has no function name")
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            # Some compatible servers send an object; keep its numbers verbatim.
            arguments = dumps_raw(arguments)
        calls.append(ToolCall(id=str(raw.get("id") or f"call_{i}"), name=function["name"], arguments_json=arguments))
    finish = _finish(provider, choice.get("finish_reason"))
    if finish == FinishReason.CONTENT_FILTER and not content and not calls:
        raise _content_filtered(provider, name)
    return ModelResponse(
        message=Message(role=Role.ASSISTANT, content=content or "", tool_calls=tuple(calls)),
        finish_reason=finish,
        usage=_usage(provider, data.get("usage")),
        model=name,
        latency_s=latency_s,
        http_status=status,
        provider_model=str(data.get("model") or ""),
    )


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class OpenAIModel:
    """A model on an OpenAI-compatible chat completions endpoint."""

    def __init__(
        self,
        backend: HttpBackend,
        provider_name: str,
        model_id: str,
        *,
        on_unsupported: Literal["drop", "reject"] = "drop",
        default_max_tokens: int | None = None,
    ) -> None:
        self._backend = backend
        self._provider = ProviderInfo(provider_name, "openai")
        self.default_max_tokens = default_max_tokens
        self.model_id = model_id
        self._name = f"{provider_name}/{model_id}"
        self.on_unsupported = on_unsupported

    @property
    def name(self) -> str:
        return self._name

    @property
    def provider(self) -> ProviderInfo:
        return self._provider

    def _body(self, request: ModelRequest, stream: bool) -> bytes:
        body = build_body(self.model_id, request, stream=stream, on_unsupported=self.on_unsupported)
        if self.default_max_tokens is not None:
            body.setdefault("max_tokens", self.default_max_tokens)
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    async def request(self, request: ModelRequest, ctx: CallContext) -> ModelResponse:
        body = self._body(request, False)
        status, data, latency = await self._backend.post_json("chat/completions", body, ctx)
        try:
            if isinstance(data.get("error"), dict):
                message = str(data["error"].get("message"))[:200]
                raise malformed(self._provider.name, f"error in a {status} body: {message}")
            response = parse_response(self._provider.name, self._name, data, status=status, latency_s=latency)
        except AgentmeshError as err:
            raise self._backend.scrubbed(err) from None
        return replace(response, sent=SentRequest(FORMAT_OPENAI_CHAT, lambda: body))

    async def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        try:
            async for event in self._stream(request, ctx):
                yield event
        except AgentmeshError as err:
            raise self._backend.scrubbed(err) from None

    async def _stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        provider = self._provider.name
        text: list[str] = []
        calls: dict[int, _PartialCall] = {}
        finish: FinishReason = FinishReason.UNSPECIFIED
        usage = Usage()
        upstream_model = ""
        done = False
        started = time.monotonic()
        body = self._body(request, True)
        async with self._backend.stream_sse("chat/completions", body, ctx) as events:
            async for event in events:
                if event.data.strip() == "[DONE]":
                    done = True
                    break
                chunk = event_json(provider, event)
                if not isinstance(chunk, dict):
                    raise malformed(provider, "stream chunk is not an object")
                if isinstance(chunk.get("error"), dict):
                    err = chunk["error"]
                    raise UpstreamError(
                        ErrorCode.UPSTREAM_UNAVAILABLE,
                        f"{provider} failed mid-stream: {str(err.get('message', ''))[:200]}",
                        provider=provider,
                        retryable=False,
                    )
                upstream_model = str(chunk.get("model") or upstream_model)
                if chunk.get("usage") is not None:
                    usage = _usage(provider, chunk["usage"])
                for choice in chunk.get("choices") or []:
                    if not isinstance(choice, dict):
                        raise malformed(provider, "stream choice is not an object")
                    if choice.get("finish_reason") is not None:
                        finish = _finish(provider, choice["finish_reason"])
                    delta = choice.get("delta") or {}
                    if not isinstance(delta, dict):
                        raise malformed(provider, "stream delta is not an object")
                    piece = delta.get("content")
                    if isinstance(piece, str) and piece:
                        text.append(piece)
                        yield TextDelta(piece)
                    for raw in delta.get("tool_calls") or []:
                        out = self._call_delta(raw, calls)
                        if out is not None:
                            yield out
        if not done and finish == FinishReason.UNSPECIFIED:
            raise malformed(provider, "stream ended before [DONE]")
        tool_calls = tuple(
            ToolCall(id=c.id or f"call_{i}", name=c.name, arguments_json="".join(c.arguments))
            for i, c in sorted(calls.items())
        )
        if finish == FinishReason.CONTENT_FILTER and not text and not tool_calls:
            raise _content_filtered(provider, self._name)
        yield StreamFinal(
            ModelResponse(
                message=Message(role=Role.ASSISTANT, content="".join(text), tool_calls=tool_calls),
                finish_reason=finish,
                usage=usage,
                model=self._name,
                latency_s=time.monotonic() - started,
                http_status=200,
                provider_model=upstream_model,
                sent=SentRequest(FORMAT_OPENAI_CHAT, lambda: body),
            )
        )

    def _call_delta(self, raw: Any, calls: dict[int, _PartialCall]) -> ToolCallDelta | None:
        provider = self._provider.name
        if not isinstance(raw, dict) or not isinstance(raw.get("index", 0), int):
            raise malformed(provider, "tool call delta is not an object with an index")
        index = raw.get("index", 0)
        partial = calls.setdefault(index, _PartialCall())
        function = raw.get("function") or {}
        if not isinstance(function, dict):
            raise malformed(provider, "tool call delta function is not an object")
        new_id = str(raw.get("id") or "")
        new_name = function.get("name") or ""
        arguments = function.get("arguments") or ""
        if not isinstance(new_name, str) or not isinstance(arguments, str):
            raise malformed(provider, "tool call delta has non-string name or arguments")
        if new_id:
            partial.id = new_id
        if new_name:
            partial.name += new_name
        if arguments:
            partial.arguments.append(arguments)
        if not (new_id or new_name or arguments):
            return None
        return ToolCallDelta(index=index, id=new_id, name=new_name, arguments_delta=arguments)
