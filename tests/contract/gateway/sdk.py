"""Strict checks of what the compatible endpoints send, against the official SDKs' own models.

The SDKs build their response objects without validating them (pydantic `construct`), so a wrong
field would pass unnoticed through a plain SDK call: these helpers validate the raw bodies and events."""

from __future__ import annotations

import json
from typing import Any

import httpx
from anthropic.types import ErrorResponse, Message, RawMessageStreamEvent
from openai.types import Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.shared import ErrorObject
from pydantic import TypeAdapter

_ANTHROPIC_EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


def openai_completion(body: Any) -> ChatCompletion:
    return ChatCompletion.model_validate(body, strict=False)


def openai_error(body: Any) -> ErrorObject:
    assert set(body) == {"error"}, body
    return ErrorObject.model_validate(body["error"])


def openai_model(body: Any) -> Model:
    return Model.model_validate(body)


def anthropic_message(body: Any) -> Message:
    return Message.model_validate(body)


def anthropic_error(body: Any) -> ErrorResponse:
    return ErrorResponse.model_validate(body)


def sse_events(text: str) -> list[tuple[str, str]]:
    """(event name, data) of a server-sent event stream."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name, data = "", []
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        events.append((name, "\n".join(data)))
    return events


def openai_stream(text: str) -> list[ChatCompletionChunk]:
    """Every chunk of an OpenAI stream, validated; the stream must end with `[DONE]`."""
    events = sse_events(text)
    assert events and events[-1][1] == "[DONE]", events[-3:]
    return [ChatCompletionChunk.model_validate(json.loads(data)) for _, data in events[:-1]]


def anthropic_stream(text: str) -> list[Any]:
    """Every event of a Messages stream, validated, each named as its type."""
    out = []
    for name, data in sse_events(text):
        parsed = json.loads(data)
        assert parsed["type"] == name, (name, parsed)
        out.append(_ANTHROPIC_EVENT.validate_python(parsed))
    return out


async def post(base_url: str, path: str, key: str | None, body: Any, **headers: str) -> httpx.Response:
    """A raw POST (what no SDK would send: malformed JSON, unknown fields, huge bodies)."""
    send = {"content-type": "application/json", **headers}
    if key:
        send["authorization"] = f"Bearer {key}"
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(base_url + path, content=content, headers=send)
