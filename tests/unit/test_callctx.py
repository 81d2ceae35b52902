"""Server call interceptors: one wrapper runs a chain in order, and `leave` mirrors `enter`."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from agentmesh import callctx
from agentmesh.callctx import CallInterceptor, ChainedCallInterceptor, intercept_registrations


class Recorder(CallInterceptor):
    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    async def enter(self, method: str, context: Any) -> None:
        self.log.append(f"enter {self.name}")
        if self.fail:
            raise PermissionError(self.name)

    def leave(self, method: str, context: Any, error: BaseException | None) -> None:
        self.log.append(f"leave {self.name}" + (f" after {type(error).__name__}" if error else ""))


class Details:
    method = "/pkg.Svc/Call"
    invocation_metadata = ()


async def run_chain(chain: ChainedCallInterceptor, log: list[str]) -> Any:
    async def behavior(request: bytes, context: Any) -> bytes:
        log.append("servicer")
        return request

    async def continuation(details: Any) -> Any:
        return grpc.unary_unary_rpc_method_handler(behavior)

    handler = await chain.intercept_service(continuation, Details())  # type: ignore[arg-type]
    return await handler.unary_unary(b"x", None)


async def test_chain_runs_enters_in_order_and_leaves_in_reverse() -> None:
    log: list[str] = []
    chain = ChainedCallInterceptor([Recorder("a", log), Recorder("b", log)])
    assert await run_chain(chain, log) == b"x"
    assert log == ["enter a", "enter b", "servicer", "leave b", "leave a"]


async def test_a_rejecting_interceptor_stops_the_chain_and_only_entered_ones_leave() -> None:
    log: list[str] = []
    chain = ChainedCallInterceptor([Recorder("a", log), Recorder("b", log, fail=True), Recorder("c", log)])
    with pytest.raises(PermissionError):
        await run_chain(chain, log)
    # b rejected the call: c and the servicer never ran, and a (already entered) still leaves, so
    # e.g. the load limiter does not keep counting a call that auth refused.
    assert log == ["enter a", "enter b", "leave a after PermissionError"]


async def test_leave_is_told_what_ended_the_call() -> None:
    log: list[str] = []
    chain = ChainedCallInterceptor([Recorder("a", log), Recorder("b", log)])

    async def behavior(request: bytes, context: Any) -> bytes:
        raise LookupError("servicer failed")

    async def continuation(details: Any) -> Any:
        return grpc.unary_unary_rpc_method_handler(behavior)

    handler = await chain.intercept_service(continuation, Details())  # type: ignore[arg-type]
    with pytest.raises(LookupError):
        await handler.unary_unary(b"x", None)
    assert log == ["enter a", "enter b", "leave b after LookupError", "leave a after LookupError"]


async def test_registered_and_generic_handlers_run_inside_the_chain_wrapped_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """intercept_registrations: both ways of registering a handler go through the chain, over a
    real server, and a generic handler's method is wrapped once, not on every call."""
    wraps: list[str] = []
    wrap = callctx.wrap_handler

    def counting_wrap(handler: Any, method: str, *args: Any) -> Any:
        wraps.append(method)
        return wrap(handler, method, *args)

    monkeypatch.setattr(callctx, "wrap_handler", counting_wrap)
    log: list[str] = []
    chain = ChainedCallInterceptor([Recorder("a", log), Recorder("b", log)])
    server: Any = grpc.aio.server()
    intercept_registrations(server, chain)

    async def echo(request: bytes, context: Any) -> bytes:
        log.append("servicer")
        return request

    server.add_registered_method_handlers("pkg.Registered", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})
    generic = grpc.method_handlers_generic_handler("pkg.Generic", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})
    server.add_generic_rpc_handlers((generic,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            untyped: Any = channel  # bytes in, bytes out: no (de)serializers
            for service in ("pkg.Registered", "pkg.Generic", "pkg.Generic"):
                log.clear()
                assert await untyped.unary_unary(f"/{service}/Echo")(b"hi", timeout=10) == b"hi"
                assert log == ["enter a", "enter b", "servicer", "leave b", "leave a"], service
    finally:
        await server.stop(None)
    assert wraps == ["/pkg.Registered/Echo", "/pkg.Generic/Echo"]  # the second generic call reused its wrap
