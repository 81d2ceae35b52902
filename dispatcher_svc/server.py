"""dispatcher_svc's gRPC surface: maps protobuf to the agent loop and back.

The loop and tasks are built by the dispatcher_svc issue; until then every RPC answers
UNIMPLEMENTED (the generated base class does that), while health, reflection and auth already work.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentmesh.server import ServiceHost, ServiceSpec
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc

SERVICE_NAME = dispatcher_pb2.DESCRIPTOR.services_by_name["DispatcherService"].full_name


class DispatcherServicer(dispatcher_pb2_grpc.DispatcherServiceServicer):
    """The DispatcherService servicer."""


async def setup(host: ServiceHost) -> Callable[[], Awaitable[None]] | None:
    """Registers DispatcherService on the host."""
    host.add_servicer(SERVICE_NAME, dispatcher_pb2_grpc.add_DispatcherServiceServicer_to_server, DispatcherServicer())
    return None


SPEC = ServiceSpec(
    name="dispatcher",
    setup=setup,
    method_roles={f"/{SERVICE_NAME}/ResolveApproval": frozenset({"operator", "admin"})},
)
