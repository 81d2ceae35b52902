# Lint fixture (never imported): copied to dispatcher_svc/_lint_fixture.py, it must break "edge-only".
from agentmesh.v1 import dispatcher_pb2

__all__ = ["dispatcher_pb2"]
