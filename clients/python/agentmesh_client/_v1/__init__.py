"""Generated protobuf and gRPC modules of agentmesh.v1 for the client (`make protos`; do not edit)."""
