"""The edge interceptor: one wrapper runs a chain in order, `leave` mirrors `enter`, handlers wrap once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.rpc import interceptors
from agentmesh.rpc.interceptors import CallInterceptor, ChainedCallInterceptor, EdgeInterceptor


class Recorder(CallInterceptor):
    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    async def enter(self, method: str, context: Any) -> None:
        self.log.append(f"enter {self.name}")
        if self.fail:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, self.name)

    def leave(self, method: str, context: Any, error: BaseException | None) -> None:
        self.log.append(f"leave {self.name}" + (f" after {type(error).__name__}" if error else ""))


Behaviour = Callable[[bytes, Any], Awaitable[bytes]]


async def _serve(chain: CallInterceptor, behaviour: Behaviour) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(interceptors=[EdgeInterceptor(chain)])
    untyped: Any = server
    untyped.add_registered_method_handlers("pkg.Registered", {"Echo": grpc.unary_unary_rpc_method_handler(behaviour)})
    generic = grpc.method_handlers_generic_handler(
        "pkg.Generic", {"Echo": grpc.unary_unary_rpc_method_handler(behaviour)}
    )
    server.add_generic_rpc_handlers((generic,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


@pytest.fixture
async def call() -> AsyncIterator[Callable[[CallInterceptor, Behaviour, str], Awaitable[bytes]]]:
    servers: list[grpc.aio.Server] = []

    async def _call(chain: CallInterceptor, behaviour: Behaviour, service: str = "pkg.Registered") -> bytes:
        server, port = await _serve(chain, behaviour)
        servers.append(server)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            untyped: Any = channel  # bytes in, bytes out: no (de)serializers
            result: bytes = await untyped.unary_unary(f"/{service}/Echo")(b"x", timeout=10)
            return result

    yield _call
    for server in servers:
        await server.stop(None)


async def test_chain_runs_enters_in_order_and_leaves_in_reverse(call: Any) -> None:
    log: list[str] = []
    chain = ChainedCallInterceptor([Recorder("a", log), Recorder("b", log)])

    async def echo(request: bytes, context: Any) -> bytes:
        log.append("servicer")
        return request

    assert await call(chain, echo) == b"x"
    assert log == ["enter a", "enter b", "servicer", "leave b", "leave a"]


async def test_a_rejecting_interceptor_stops_the_chain_and_only_entered_ones_leave(call: Any) -> None:
    log: list[str] = []
    chain = ChainedCallInterceptor([Recorder("a", log), Recorder("b", log, fail=True), Recorder("c", log)])

    async def echo(request: bytes, context: Any) -> bytes:
        log.append("servicer")
        return request

    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(chain, echo)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # b rejected the call: c and the servicer never ran, and a (already entered) still leaves, so
    # e.g. the load limiter does not keep counting a call that auth refused.
    assert log == ["enter a", "enter b", "leave a after AbortError"]


async def test_leave_is_told_what_ended_the_call(call: Any) -> None:
    log: list[str] = []
    chain = ChainedCallInterceptor([Recorder("a", log), Recorder("b", log)])

    async def failing(request: bytes, context: Any) -> bytes:
        raise LookupError("servicer failed at /secret/path")

    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(chain, failing)
    # The boundary answered INTERNAL without the exception's text; leave saw the abort it made.
    assert info.value.code() == grpc.StatusCode.INTERNAL
    assert "secret" not in (info.value.details() or "")
    assert "LookupError" not in (info.value.details() or "")
    assert log == ["enter a", "enter b", "leave b after AbortError", "leave a after AbortError"]


async def test_registered_and_generic_handlers_run_inside_the_chain_wrapped_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both ways of registering a handler go through the edge, over a real server, and a method is
    wrapped once, not on every call."""
    wraps: list[str] = []
    wrap = interceptors.wrap_handler

    def counting_wrap(handler: Any, method: str, *args: Any) -> Any:
        wraps.append(method)
        return wrap(handler, method, *args)

    monkeypatch.setattr(interceptors, "wrap_handler", counting_wrap)
    log: list[str] = []
    chain = ChainedCallInterceptor([Recorder("a", log), Recorder("b", log)])

    async def echo(request: bytes, context: Any) -> bytes:
        log.append("servicer")
        return request

    server, port = await _serve(chain, echo)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            untyped: Any = channel
            for service in ("pkg.Registered", "pkg.Registered", "pkg.Generic", "pkg.Generic"):
                log.clear()
                assert await untyped.unary_unary(f"/{service}/Echo")(b"hi", timeout=10) == b"hi"
                assert log == ["enter a", "enter b", "servicer", "leave b", "leave a"], service
    finally:
        await server.stop(None)
    # The second call of each method reused its wrap.
    assert wraps == ["/pkg.Registered/Echo", "/pkg.Generic/Echo"]
