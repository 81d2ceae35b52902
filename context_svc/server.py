"""context_svc's gRPC surface: maps protobuf to the context domain and back.

Sessions, budgets and summaries are built by the context_svc issue; until then every RPC answers
UNIMPLEMENTED (the generated base class does that), while health, reflection and auth already work.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentmesh.server import ServiceHost, ServiceSpec
from agentmesh.v1 import context_pb2, context_pb2_grpc

SERVICE_NAME = context_pb2.DESCRIPTOR.services_by_name["ContextService"].full_name


class ContextServicer(context_pb2_grpc.ContextServiceServicer):
    """The ContextService servicer."""


async def setup(host: ServiceHost) -> Callable[[], Awaitable[None]] | None:
    """Registers ContextService on the host."""
    host.add_servicer(SERVICE_NAME, context_pb2_grpc.add_ContextServiceServicer_to_server, ContextServicer())
    return None


SPEC = ServiceSpec(name="context", setup=setup)
