"""Local fakes of the OpenAI chat completions (and embeddings) and Anthropic Messages APIs: real HTTP servers.

Each fake is a `ThreadingHTTPServer` on 127.0.0.1 speaking the real wire format (JSON bodies, SSE
with chunked transfer encoding, error bodies, Retry-After). Behaviour is programmed per request
with `push(Reply(...))`; with nothing queued a fake answers `default`. Every request is recorded
(path, headers, raw body) so tests can count retries and grep headers.

With `validate=True` (the default) every request body is checked against the official SDK's request
parameter TypedDict (unknown top-level keys rejected) and every response body or stream event
against the SDK's response model; failures are collected in `errors` (tests assert it is empty).
The OpenAI fake also answers `POST /v1/embeddings` (issue 51): the body is checked against the SDK's
`EmbeddingCreateParams`, the answer against `CreateEmbeddingResponse`; each vector is a deterministic
function of its text (`fake_embedding`), `EMBEDDING_DIM` long, usage one token per 4 UTF-8 bytes.

`python -m tests.contract.provider.fakes openai|anthropic [--port N] [--no-validate]` runs one
alone (the benchmark starts it in its own process), printing `PORT <n>` when ready.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Kind = Literal["openai", "anthropic"]

EMBEDDING_DIM = 8
EMBEDDINGS_PATH = "/v1/embeddings"


@dataclass
class Reply:
    """One programmed answer."""

    text: str = "Hello from the fake."
    tool_calls: Sequence[tuple[str, str]] = ()
    """(name, raw arguments JSON text): sent byte for byte (OpenAI) or as the raw input object (Anthropic)."""
    status: int = 200
    error_type: str = ""
    error_message: str = ""
    error_code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None
    """Sent as is (malformed-body tests); overrides everything else."""
    delay_s: float = 0.0
    finish_reason: str | None = None
    usage: tuple[int, int] = (11, 7)
    chunk_chars: int = 5
    stream_error: str = ""
    """Stream only: after the first text piece, an error event of this type (Anthropic) / error object (OpenAI)."""
    stream_cut: bool = False
    """Stream only: end the stream after the first text piece without the terminal event."""
    model: str = ""

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "fake upstream error",
        *,
        error_type: str = "",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        return cls(status=status, error_message=message, error_type=error_type, error_code=code, headers=headers or {})


@dataclass
class Received:
    """One request as the fake saw it."""

    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def _pieces(text: str, n: int) -> list[str]:
    return [text[i : i + n] for i in range(0, len(text), n)] if text else []


# --- validators (imported lazily: the SDKs are dev-only and slow to import) ----------------------


class _Validators:
    def __init__(self, kind: Kind) -> None:
        from pydantic import BaseModel, ConfigDict, TypeAdapter

        self.kind = kind
        if kind == "openai":
            from openai.types.chat import ChatCompletion, ChatCompletionChunk, completion_create_params
            from openai.types.shared import ErrorObject

            non_stream = completion_create_params.CompletionCreateParamsNonStreaming
            stream = completion_create_params.CompletionCreateParamsStreaming
            self.response: Any = ChatCompletion
            self.chunk: Any = ChatCompletionChunk
            self.error: Any = ErrorObject
        else:
            from anthropic.types import ErrorResponse, Message, RawMessageStreamEvent, message_create_params

            non_stream = message_create_params.MessageCreateParamsNonStreaming  # type: ignore[assignment]
            stream = message_create_params.MessageCreateParamsStreaming  # type: ignore[assignment]
            self.response = Message
            self.chunk = TypeAdapter(RawMessageStreamEvent)
            self.error = ErrorResponse

        # TypedDicts cannot take a config: a strict wrapper model rejects unknown top-level keys.
        class NonStreaming(BaseModel):
            model_config = ConfigDict(extra="forbid")
            body: non_stream  # type: ignore[valid-type]

        class Streaming(BaseModel):
            model_config = ConfigDict(extra="forbid")
            body: stream  # type: ignore[valid-type]

        self.request_models = {False: NonStreaming, True: Streaming}
        if kind == "openai":
            from openai.types import CreateEmbeddingResponse, embedding_create_params

            class Embeddings(BaseModel):
                model_config = ConfigDict(extra="forbid")
                body: embedding_create_params.EmbeddingCreateParams

            self.embeddings_request: Any = Embeddings
            self.embeddings_response: Any = CreateEmbeddingResponse

    def embeddings(self, body: Any) -> None:
        self.embeddings_request(body=body)

    def embeddings_body(self, body: Any) -> None:
        self.embeddings_response.model_validate(body)

    def request(self, body: Any) -> None:
        streaming = bool(isinstance(body, dict) and body.get("stream"))
        self.request_models[streaming](body=body)

    def response_body(self, body: Any) -> None:
        self.response.model_validate(body)

    def event(self, data: Any) -> None:
        if self.kind == "openai":
            self.chunk.model_validate(data)
        elif data.get("type") != "ping":
            self.chunk.validate_python(data)

    def error_body(self, body: Any) -> None:
        if self.kind == "openai":
            self.error.model_validate(body["error"])
        else:
            self.error.model_validate(body)


# --- wire formats -----------------------------------------------------------------------------------


def _raw_object(text: str) -> str:
    """Raw JSON object text for an Anthropic `input` (invalid JSON is wrapped, never sent broken)."""
    try:
        value = json.loads(text)
    except ValueError:
        return json.dumps({"_raw": text})
    return text if isinstance(value, dict) else json.dumps({"_value": value})


def openai_completion(reply: Reply, model: str) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(reply.tool_calls)
        ]
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    prompt, completion = reply.usage
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model or model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }
    return json.dumps(body).encode()


def openai_chunks(reply: Reply, model: str) -> Iterator[dict[str, Any]]:
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(reply.text, reply.chunk_chars):
        yield chunk({"content": piece})
    for i, (name, args) in enumerate(reply.tool_calls):
        yield chunk(
            {
                "tool_calls": [
                    {"index": i, "id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": ""}}
                ]
            }
        )
        for piece in _pieces(args, reply.chunk_chars):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop"))
    prompt, completion = reply.usage
    yield {
        **base,
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def fake_embedding(text: str) -> list[float]:
    """The fake's vector of `text`: bytes of its SHA-256, centred, `EMBEDDING_DIM` long (not normalized)."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(b - 127.5) / 127.5 for b in digest[:EMBEDDING_DIM]]


def openai_embeddings(body: Any, model: str) -> bytes:
    raw = body.get("input") if isinstance(body, dict) else None
    texts = [raw] if isinstance(raw, str) else [str(t) for t in raw or []]
    tokens = sum(max(1, len(t.encode()) // 4) for t in texts)
    data = [{"object": "embedding", "index": i, "embedding": fake_embedding(t)} for i, t in enumerate(texts)]
    payload = {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return json.dumps(payload).encode()


def anthropic_message(reply: Reply, model: str) -> bytes:
    blocks: list[str] = []
    if reply.text:
        blocks.append(json.dumps({"type": "text", "text": reply.text}))
    for i, (name, args) in enumerate(reply.tool_calls):
        head = json.dumps({"type": "tool_use", "id": f"toolu_{i}", "name": name})[:-1]
        blocks.append(f'{head}, "input": {_raw_object(args)}}}')
    stop = reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn")
    prompt, completion = reply.usage
    rest = json.dumps(
        {
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": completion},
        }
    )[1:]
    head = json.dumps({"id": "msg_fake", "type": "message", "role": "assistant", "model": reply.model or model})[:-1]
    return f'{head}, "content": [{", ".join(blocks)}], {rest}'.encode()


def anthropic_events(reply: Reply, model: str) -> Iterator[tuple[str, str]]:
    prompt, completion = reply.usage

    def event(name: str, data: dict[str, Any]) -> tuple[str, str]:
        return name, json.dumps({"type": name, **data})

    yield event(
        "message_start",
        {
            "message": {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": prompt, "output_tokens": 1},
            }
        },
    )
    index = 0
    if reply.text:
        yield event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
        yield "ping", json.dumps({"type": "ping"})
        for piece in _pieces(reply.text, reply.chunk_chars):
            yield event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": piece}})
        yield event("content_block_stop", {"index": index})
        index += 1
    for i, (name, args) in enumerate(reply.tool_calls):
        yield event(
            "content_block_start",
            {"index": index, "content_block": {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": {}}},
        )
        for piece in _pieces(args, reply.chunk_chars):
            yield event(
                "content_block_delta", {"index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}
            )
        yield event("content_block_stop", {"index": index})
        index += 1
    stop = reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn")
    yield event(
        "message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": completion}}
    )
    yield event("message_stop", {})


def error_body(kind: Kind, reply: Reply) -> bytes:
    if kind == "openai":
        return json.dumps(
            {
                "error": {
                    "message": reply.error_message,
                    "type": reply.error_type or "api_error",
                    "param": None,
                    "code": reply.error_code,
                }
            }
        ).encode()
    return json.dumps(
        {"type": "error", "error": {"type": reply.error_type or "api_error", "message": reply.error_message}}
    ).encode()


# --- the server ---------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog of 5 drops connections opened 32 at a time (each
    # dropped SYN costs a 1 s retransmit); the benchmark opens that many at once.
    request_queue_size = 256


class FakeProvider:
    """A fake upstream; `base_url` is what a backend's `base_url` should be set to."""

    def __init__(self, kind: Kind, *, validate: bool = True, port: int = 0, default: Reply | None = None) -> None:
        self.kind = kind
        self.validators = _Validators(kind) if validate else None
        self.default = default or Reply()
        self.queue: deque[Reply] = deque()
        self.received: list[Received] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        root = f"http://127.0.0.1:{self.port}"
        return f"{root}/v1" if self.kind == "openai" else root

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.kind == "openai" else "/v1/messages"

    def start(self) -> FakeProvider:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), name=f"fake-{self.kind}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.queue.extend(replies)

    def requests(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    def _next(self) -> Reply:
        with self._lock:
            return self.queue.popleft() if self.queue else self.default

    def _check(self, what: str, fn: Any, value: Any) -> None:
        if self.validators is None:
            return
        try:
            fn(value)
        except Exception as exc:
            with self._lock:
                self.errors.append(f"{what}: {exc}")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in separate writes: without this, Nagle + delayed ACK
                # add ~40 ms to every response on a kept-alive connection.
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def do_POST(self) -> None:
                try:
                    self._post()
                except (BrokenPipeError, ConnectionResetError):
                    # The client gave up (a timeout test): nothing to answer.
                    self.close_connection = True

            def _post(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                with fake._lock:
                    fake.received.append(Received(self.path, headers, raw))
                embeddings = fake.kind == "openai" and self.path == EMBEDDINGS_PATH
                if self.path != fake.path and not embeddings:
                    self._send(
                        404,
                        error_body(fake.kind, Reply.error(404, f"no route {self.path}", error_type="not_found_error")),
                        {},
                    )
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                if embeddings:
                    fake._check("request", fake.validators.embeddings if fake.validators else None, body)
                else:
                    fake._check("request", fake.validators.request if fake.validators else None, body)
                reply = fake._next()
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                model = str(body.get("model", "")) if isinstance(body, dict) else ""
                if reply.raw_body is not None:
                    self._send(reply.status, reply.raw_body, reply.headers)
                    return
                if reply.status >= 300:
                    payload = error_body(fake.kind, reply)
                    fake._check(
                        "error body", fake.validators.error_body if fake.validators else None, json.loads(payload)
                    )
                    self._send(reply.status, payload, reply.headers)
                    return
                if embeddings:
                    payload = openai_embeddings(body, model)
                    fake._check(
                        "response", fake.validators.embeddings_body if fake.validators else None, json.loads(payload)
                    )
                    self._send(200, payload, reply.headers)
                    return
                if isinstance(body, dict) and body.get("stream"):
                    self._stream(reply, model)
                    return
                payload = openai_completion(reply, model) if fake.kind == "openai" else anthropic_message(reply, model)
                fake._check("response", fake.validators.response_body if fake.validators else None, json.loads(payload))
                self._send(200, payload, reply.headers)

            def _stream(self, reply: Reply, model: str) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.send_header("cache-control", "no-cache")
                self.end_headers()
                events: list[tuple[str, str]]
                if fake.kind == "openai":
                    events = [("", json.dumps(c)) for c in openai_chunks(reply, model)] + [("", "[DONE]")]
                else:
                    events = list(anthropic_events(reply, model))
                sent_text = False
                for name, data in events:
                    if data != "[DONE]":
                        fake._check(
                            "stream event", fake.validators.event if fake.validators else None, json.loads(data)
                        )
                    frame = (f"event: {name}\n" if name else "") + f"data: {data}\n\n"
                    self._chunk(frame.encode())
                    is_text = '"text_delta"' in data or ('"content": "' in data and '"content": ""' not in data)
                    if is_text and not sent_text:
                        sent_text = True
                        if reply.stream_cut:
                            break
                        if reply.stream_error:
                            self._chunk(self._error_frame(reply).encode())
                            break
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _error_frame(self, reply: Reply) -> str:
                if fake.kind == "openai":
                    return (
                        "data: "
                        + json.dumps({"error": {"message": reply.stream_error, "type": "server_error"}})
                        + "\n\n"
                    )
                data = json.dumps({"type": "error", "error": {"type": reply.stream_error, "message": "Overloaded"}})
                return f"event: error\ndata: {data}\n\n"

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description="run a fake provider")
    parser.add_argument("kind", choices=["openai", "anthropic"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--no-validate", action="store_true")
    args = parser.parse_args()
    fake = FakeProvider(args.kind, validate=not args.no_validate, port=args.port)
    print(f"PORT {fake.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        fake._server.serve_forever()


if __name__ == "__main__":
    main()
