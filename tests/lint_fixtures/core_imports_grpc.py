# Lint fixture (never imported): appended to agentmesh/semconv.py, it must break "core-grpc-free".
from agentmesh.rpc import status as _status  # noqa: F401  (the edge, and through it grpc)
