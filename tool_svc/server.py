"""tool_svc's gRPC surface: maps protobuf to the tool gateway and back.

The gateway itself is built by the tool_svc issue; until then every RPC answers UNIMPLEMENTED
(the generated base class does that), while health, reflection and auth already work.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentmesh.server import ServiceHost, ServiceSpec
from agentmesh.v1 import tool_pb2, tool_pb2_grpc

SERVICE_NAME = tool_pb2.DESCRIPTOR.services_by_name["ToolService"].full_name


class ToolServicer(tool_pb2_grpc.ToolServiceServicer):
    """The ToolService servicer."""


async def setup(host: ServiceHost) -> Callable[[], Awaitable[None]] | None:
    """Registers ToolService on the host."""
    host.add_servicer(SERVICE_NAME, tool_pb2_grpc.add_ToolServiceServicer_to_server, ToolServicer())
    return None


SPEC = ServiceSpec(
    name="tool",
    setup=setup,
    method_roles={
        f"/{SERVICE_NAME}/RegisterTool": frozenset({"admin"}),
        f"/{SERVICE_NAME}/ResolveApproval": frozenset({"operator", "admin"}),
    },
)
