"""The OpenAI- and Anthropic-compatible endpoints on provider_svc's HTTP listener (docs/design.md §6).

- `POST /v1/chat/completions` (OpenAI; plain, and `stream: true` as server-sent events ending `[DONE]`),
- `GET /v1/models`, `GET /v1/models/{id}` (OpenAI's list; Anthropic's when the request carries
  `anthropic-version`),
- `POST /v1/messages` (Anthropic; plain and streamed events).

Each request runs the edge's chain first (span, request id, load shedding, authentication: any
agentmesh identity token, JWT or API key as `Authorization: Bearer`, or `x-api-key`), then reads its
body (at most `gateway.max_request_bytes`: 413 beyond, before parsing), parses and validates it
(pydantic: `openai_api`, `anthropic_api`), and takes the one generation path every gRPC Generate
takes (`Providers.generate` / `generate_stream`: routing, the key's allowed models, quotas and budgets,
adapters, retries, fallbacks, usage). The caller is billed like a Generate with no `agent_id`
(provider_svc/billing.py). `model` is a model name or alias, or `route:<task tag>` for the tag's
route (a price route picks the cheapest healthy model).

Every error is the API's own error object and status (with agentmesh's code beside it, and
`x-request-id`, `retry-after`, `x-should-retry` headers); a stream that fails after it began ends with
the API's error event. Nothing is sent upstream for a refused request.

The routes touch no grpc and no stubs: the edge is handed in by provider_svc/server.py.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agentmesh import callctx
from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError, PayloadTooLargeError
from agentmesh.identity_value import require_identity
from agentmesh.redacted import traceback_text
from provider_svc.billing import billed_agent
from provider_svc.compat import anthropic_api, openai_api
from provider_svc.models.base import CallContext, TextDelta, ToolCallDelta
from provider_svc.pricing import estimate_input_tokens
from provider_svc.service import Generation, Providers

__all__ = ["CompatApi", "Edge"]

log = logging.getLogger("provider_svc.compat")

ROUTE_PREFIX = "route:"
"""`model: "route:summarize"`: the request is routed by that task tag."""


class Edge(Protocol):
    """The host's edge for plain HTTP routes (agentmesh.rpc.httpedge.HttpEdge)."""

    async def enter(self, request: Request, method: str) -> Any: ...

    def leave(self, call: Any, error: BaseException | None) -> None: ...


class _Outcome:
    """How a streamed answer ended (for the edge's span and metrics): None, or the error its API's error
    event reported."""

    error: BaseException | None = None


class _Stream:
    """A streamed answer: its server-sent events, written once the edge hands over the call."""

    def __init__(self, events: Callable[[_Outcome], AsyncIterator[bytes]]) -> None:
        self.events = events


class _Api:
    """One API's error format."""

    def __init__(self, name: str, status: Callable[[AgentmeshError], int], body: Callable[[AgentmeshError, str], Any]):
        self.name = name
        self.status = status
        self.body = body


OPENAI = _Api("openai", openai_api.error_status, openai_api.error_body)
ANTHROPIC = _Api("anthropic", anthropic_api.error_status, anthropic_api.error_body)


def _headers(err: AgentmeshError | None = None) -> dict[str, str]:
    headers = {"x-request-id": callctx.current_request_id() or ""}
    if err is not None:
        headers["x-agentmesh-error-code"] = err.code.name
        # The official SDKs read it before retrying: a budget or a bad request will not pass on a retry.
        headers["x-should-retry"] = "true" if err.retryable else "false"
        if err.retry_after is not None:
            headers["retry-after"] = str(max(1, round(err.retry_after + 0.499)))
            headers["retry-after-ms"] = str(round(err.retry_after * 1000))
    return {k: v for k, v in headers.items() if v}


def _sse(data: Any, event: str = "") -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n\n").encode()


class CompatApi:
    """The compatible endpoints over one `Providers`."""

    def __init__(self, providers: Providers, edge: Edge, *, max_request_bytes: int) -> None:
        self.providers = providers
        self.edge = edge
        self.max_request_bytes = max_request_bytes

    def routes(self) -> list[Route]:
        return [
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"], name="openai.chat_completions"),
            Route("/v1/messages", self.messages, methods=["POST"], name="anthropic.messages"),
            Route("/v1/models", self.models, methods=["GET"], name="models"),
            Route("/v1/models/{model:path}", self.model, methods=["GET"], name="model"),
        ]

    # -- shared -----------------------------------------------------------------------------------

    def _error(self, api: _Api, err: AgentmeshError) -> Response:
        return JSONResponse(api.body(err, callctx.current_request_id() or ""), api.status(err), _headers(err))

    async def _body(self, request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_request_bytes:
            raise PayloadTooLargeError(f"the request body ({declared} bytes) is over {self.max_request_bytes} bytes")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_request_bytes:
                raise PayloadTooLargeError(f"the request body is over {self.max_request_bytes} bytes")
            chunks.append(chunk)
        raw = b"".join(chunks)
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            raise InvalidRequestError(
                "body",
                "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your "
                "HTTP library correctly. The body must be JSON, sent with Content-Type: application/json.)",
            ) from None

    def _context(self) -> CallContext:
        identity = require_identity()
        return CallContext(
            deadline=callctx.deadline_var.get(),
            agent_id=billed_agent(identity, ""),
            subject=identity.subject,
            key_id=identity.api_key_id,
            model_patterns=identity.model_patterns,
        )

    @staticmethod
    def _target(model: str) -> tuple[str, str]:
        """(model, task tag) of a request's `model`."""
        if model.startswith(ROUTE_PREFIX):
            return "", model[len(ROUTE_PREFIX) :]
        return model, ""

    async def _run(
        self,
        request: Request,
        api: _Api,
        method: str,
        handle: Callable[[Any], Any],
    ) -> Response:
        """The edge around one request; `handle(body)` answers it (a streamed answer leaves the edge itself)."""
        try:
            call = await self.edge.enter(request, method)
        except AgentmeshError as err:
            return self._error(api, err)
        error: BaseException | None = None
        handed_over = False
        try:
            body = await self._body(request) if request.method == "POST" else None
            response = await handle(body)
            if isinstance(response, _Stream):
                outcome = _Outcome()
                body_iterator = self._leaving(response.events(outcome), call, outcome)
                handed_over = True
                return StreamingResponse(body_iterator, media_type="text/event-stream", headers=_sse_headers())
            return response  # type: ignore[no-any-return]
        except AgentmeshError as err:
            error = err
            return self._error(api, err)
        except Exception as exc:
            rid = callctx.current_request_id() or "none"
            log.error("unexpected failure in %s (request id %s)\n%s", method, rid, traceback_text(exc))
            error = AgentmeshError(ErrorCode.INTERNAL, f"internal error in {method} (request id {rid})")
            return self._error(api, error)
        finally:
            if not handed_over:
                self.edge.leave(call, error)

    async def _leaving(self, body: AsyncIterator[bytes], call: Any, outcome: _Outcome) -> AsyncIterator[bytes]:
        try:
            async for chunk in body:
                yield chunk
        except BaseException as exc:
            outcome.error = exc
            raise
        finally:
            self.edge.leave(call, outcome.error)

    # -- OpenAI -----------------------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        return await self._run(request, OPENAI, "/gateway.OpenAI/ChatCompletions", self._chat)

    async def _chat(self, body: Any) -> Response | _Stream:
        parsed = openai_api.parse_request(body)
        domain = openai_api.to_domain(parsed)
        ctx = self._context()
        model, tag = self._target(parsed.model)
        completion_id = f"chatcmpl-{secrets.token_hex(12)}"
        if not parsed.stream:
            generation = await self.providers.generate(domain, ctx, model=model, task_tag=tag)
            return JSONResponse(openai_api.completion_body(generation.response, completion_id), headers=_headers())
        include_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)
        writer = openai_api.stream_chunks(completion_id, parsed.model, include_usage=include_usage)
        events = self.providers.generate_stream(domain, ctx, model=model, task_tag=tag)
        first = await self._first(events)
        return _Stream(lambda outcome: self._openai_events(first, events, writer, outcome))

    async def _openai_events(
        self, first: Any, events: AsyncIterator[Any], writer: openai_api.ChunkWriter, outcome: _Outcome
    ) -> AsyncIterator[bytes]:
        try:
            yield _sse(writer.start())
            event = first
            while True:
                if isinstance(event, TextDelta):
                    yield _sse(writer.text(event.text))
                elif isinstance(event, ToolCallDelta):
                    yield _sse(writer.tool_call(event.index, event.id, event.name, event.arguments_delta))
                elif isinstance(event, Generation):
                    for chunk in writer.finish(event.response):
                        yield _sse(chunk)
                    yield b"data: [DONE]\n\n"
                    return
                event = await anext(events)
        except AgentmeshError as err:
            outcome.error = err
            yield _sse(openai_api.stream_error(err, callctx.current_request_id() or ""))
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    # -- Anthropic --------------------------------------------------------------------------------

    async def messages(self, request: Request) -> Response:
        return await self._run(request, ANTHROPIC, "/gateway.Anthropic/Messages", self._messages)

    async def _messages(self, body: Any) -> Response | _Stream:
        parsed = anthropic_api.parse_request(body)
        domain = anthropic_api.to_domain(parsed)
        ctx = self._context()
        model, tag = self._target(parsed.model)
        message_id = f"msg_{secrets.token_hex(12)}"
        if not parsed.stream:
            generation = await self.providers.generate(domain, ctx, model=model, task_tag=tag)
            return JSONResponse(anthropic_api.message_body(generation.response, message_id), headers=_headers())
        writer = anthropic_api.EventWriter(message_id, parsed.model, estimate_input_tokens(domain))
        events = self.providers.generate_stream(domain, ctx, model=model, task_tag=tag)
        first = await self._first(events)
        return _Stream(lambda outcome: self._anthropic_events(first, events, writer, outcome))

    async def _anthropic_events(
        self, first: Any, events: AsyncIterator[Any], writer: anthropic_api.EventWriter, outcome: _Outcome
    ) -> AsyncIterator[bytes]:
        try:
            for name, data in writer.start():
                yield _sse(data, name)
            event = first
            while True:
                out: list[tuple[str, dict[str, Any]]] = []
                if isinstance(event, TextDelta):
                    out = writer.text(event.text)
                elif isinstance(event, ToolCallDelta):
                    out = writer.tool_call(event.index, event.id, event.name, event.arguments_delta)
                elif isinstance(event, Generation):
                    for name, data in writer.finish(event.response):
                        yield _sse(data, name)
                    return
                for name, data in out:
                    yield _sse(data, name)
                event = await anext(events)
        except AgentmeshError as err:
            outcome.error = err
            yield _sse(anthropic_api.error_body(err, callctx.current_request_id() or ""), "error")
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    @staticmethod
    async def _first(events: AsyncIterator[Any]) -> Any:
        """The stream's first event, read before the response starts: a refusal (quota, budget, unknown
        model, upstream down) is still an HTTP error with its status, not an event."""
        try:
            return await anext(events)
        except BaseException:
            await events.aclose()  # type: ignore[attr-defined]
            raise

    # -- models -----------------------------------------------------------------------------------

    def _listed(self) -> list[tuple[str, str]]:
        identity = require_identity()
        patterns = identity.model_patterns
        names: list[tuple[str, str]] = []
        for m in self.providers.list_models():
            if not m.available:
                continue
            for name in (m.name, *m.aliases):
                resolved = self.providers.router.resolve(name)
                if self.providers.allowed(resolved, patterns, name):
                    names.append((name, m.provider))
        return names

    async def models(self, request: Request) -> Response:
        anthropic = "anthropic-version" in request.headers
        api = ANTHROPIC if anthropic else OPENAI

        async def handle(_: Any) -> Response:
            names = self._listed()
            if anthropic:
                return JSONResponse(_anthropic_models(names), headers=_headers())
            return JSONResponse(openai_api.model_list_body(names), headers=_headers())

        return await self._run(request, api, "/gateway.OpenAI/ListModels", handle)

    async def model(self, request: Request) -> Response:
        wanted = request.path_params["model"]
        anthropic = "anthropic-version" in request.headers
        api = ANTHROPIC if anthropic else OPENAI

        async def handle(_: Any) -> Response:
            for name, owner in self._listed():
                if name == wanted:
                    if anthropic:
                        return JSONResponse(_anthropic_model(name), headers=_headers())
                    return JSONResponse(openai_api.model_body(name, owner), headers=_headers())
            raise AgentmeshError(
                ErrorCode.NOT_FOUND, f"The model '{wanted[:200]}' does not exist or you do not have access to it."
            )

        return await self._run(request, api, "/gateway.OpenAI/RetrieveModel", handle)


def _sse_headers() -> dict[str, str]:
    return {**_headers(), "cache-control": "no-cache", "x-accel-buffering": "no"}


def _anthropic_model(name: str) -> dict[str, Any]:
    return {"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z"}


def _anthropic_models(names: list[tuple[str, str]]) -> dict[str, Any]:
    data = [_anthropic_model(name) for name, _ in names]
    return {
        "data": data,
        "has_more": False,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }
