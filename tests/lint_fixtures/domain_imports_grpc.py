# Lint fixture (never imported): copied to tool_svc/_lint_fixture.py, it must break "edge-only".
import grpc

__all__ = ["grpc"]
