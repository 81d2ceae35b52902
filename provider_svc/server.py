"""provider_svc's gRPC surface: maps protobuf to the provider adapters and back.

Adapters and routing are built by the provider_svc issue; until then every RPC answers
UNIMPLEMENTED (the generated base class does that), while health, reflection and auth already work.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentmesh.server import ServiceHost, ServiceSpec
from agentmesh.v1 import provider_pb2, provider_pb2_grpc

SERVICE_NAME = provider_pb2.DESCRIPTOR.services_by_name["ProviderService"].full_name


class ProviderServicer(provider_pb2_grpc.ProviderServiceServicer):
    """The ProviderService servicer."""


async def setup(host: ServiceHost) -> Callable[[], Awaitable[None]] | None:
    """Registers ProviderService on the host."""
    host.add_servicer(SERVICE_NAME, provider_pb2_grpc.add_ProviderServiceServicer_to_server, ProviderServicer())
    return None


SPEC = ServiceSpec(name="provider", setup=setup)
