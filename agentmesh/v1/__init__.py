"""Generated protobuf and gRPC modules of the agentmesh.v1 contracts (`make protos`; do not edit)."""
