"""agentmesh's RPC edge: everything that touches grpc or the generated stubs (docs/architecture.md).

host (server bootstrap), interceptors (the one edge and its error boundary), auth and telemetry
interceptors, channels (outgoing calls), status (rich gRPC status), codec (shared protobuf mappings).
"""
