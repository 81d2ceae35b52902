"""The edge's chain for plain HTTP routes a service adds to its HTTP listener (docs/design.md §11).

A service may serve HTTP APIs of its own beside Connect (provider_svc: the OpenAI- and
Anthropic-compatible endpoints). Each such route runs the host's chain of call interceptors before it
reads its body, exactly as a gRPC or Connect call does: the server span (parented on `traceparent`),
the request id (`x-request-id`, echoed in the response), load shedding (the gRPC port's count: one
budget), authentication (`authorization: Bearer`, `x-agentmesh-identity`, and `x-api-key`, the header
Anthropic's clients send a key in). The route answers errors in its own API's format; the edge only
turns a rejection into the AgentmeshError it stands for.

    call = await edge.enter(request, "/gateway.OpenAI/ChatCompletions")
    try: ...
    finally: edge.leave(call, error)      # after a streamed body is done: the span covers the stream
"""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio
from starlette.requests import Request

from agentmesh import callctx
from agentmesh.errors import AgentmeshError
from agentmesh.rpc.interceptors import CallInterceptor
from agentmesh.rpc.status import GRPC_STATUS, code_for_grpc_status, error_of_status

__all__ = ["HttpCall", "HttpEdge", "HttpRefusal"]

_TIMEOUT_HEADER = "x-stainless-timeout"
"""The official OpenAI and Anthropic SDKs send their request timeout (seconds) in it: our deadline."""


class HttpRefusal(grpc.aio.AbortError):
    """What `HttpCall.abort*` raises: the call ends with `error` (an abort, to the edge's span)."""

    def __init__(self, error: AgentmeshError) -> None:
        super().__init__(error.message)
        self.error = error


class HttpCall:
    """One HTTP request as the grpc.aio ServicerContext the edge's interceptors use."""

    rpc_system = "http"
    """The span's and the RPC metrics' `rpc.system`."""

    def __init__(self, request: Request, method: str) -> None:
        self.request = request
        self.method = method
        headers = [(key.lower(), value) for key, value in request.headers.items()]
        names = {key for key, _ in headers}
        api_key = request.headers.get("x-api-key")
        if api_key and "authorization" not in names and callctx.IDENTITY_HEADER not in names:
            headers.append(("authorization", f"Bearer {api_key.strip()}"))
        self._metadata = tuple(headers)
        self._code: grpc.StatusCode | None = None
        self._details: str | None = None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def time_remaining(self) -> float | None:
        raw = self.request.headers.get(_TIMEOUT_HEADER)
        try:
            value = float(raw) if raw else None
        except ValueError:
            return None
        return value if value is not None and 0 < value < 86400 else None

    def peer(self) -> str:
        client = self.request.client
        if client is None:
            return ""
        host, port = client.host, client.port
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str | None:
        return self._details

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    async def abort_with_status(self, status: grpc.Status) -> None:
        raise HttpRefusal(error_of_status(status))

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> None:
        raise HttpRefusal(AgentmeshError(code_for_grpc_status(code, details), details))


class HttpEdge:
    """The host's chain around a plain HTTP route (module doc)."""

    def __init__(self, chain: CallInterceptor) -> None:
        self.chain = chain

    async def enter(self, request: Request, method: str) -> HttpCall:
        """Runs the chain for `request` as `method` ("/<api>/<Operation>"); raises the AgentmeshError of a
        rejection (no or a bad token, a missing role, the server at its limit), after which `leave` is
        not needed."""
        call = HttpCall(request, method)
        try:
            await self.chain.enter(method, call)  # type: ignore[arg-type]
        except HttpRefusal as refusal:
            raise refusal.error from None
        return call

    def leave(self, call: HttpCall, error: BaseException | None) -> None:
        """Ends the call (span, metrics, the limiter's count) with `error`, None when it succeeded."""
        if isinstance(error, AgentmeshError):
            call.set_code(GRPC_STATUS[error.code])
        elif error is None:
            call.set_code(call.code() or grpc.StatusCode.OK)
        self.chain.leave(call.method, call, error)  # type: ignore[arg-type]
