"""A service process for drain tests: the real run_service bootstrap plus one slow method.

`python -m tests.e2e.slow_service` serves tool_svc's ToolService and `test.Slow/Wait`, which
sleeps for the seconds given in its request and answers b"done".
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from agentmesh.rpc.host import ServiceHost, ServiceSpec, run_service
from tool_svc.server import setup as tool_setup


async def _wait(request: bytes, context: Any) -> bytes:
    await asyncio.sleep(float(request.decode()))
    return b"done"


async def setup(host: ServiceHost) -> Callable[[], Awaitable[None]] | None:
    await tool_setup(host)
    handler = grpc.unary_unary_rpc_method_handler(
        _wait, request_deserializer=lambda b: b, response_serializer=lambda b: b
    )
    host.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Slow", {"Wait": handler}),))
    return None


if __name__ == "__main__":
    sys.exit(run_service(ServiceSpec(name="tool", setup=setup)))
