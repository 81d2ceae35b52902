# Lint fixture (never imported): copied to provider_svc/_lint_fixture.py, it must break "dev-tools-apart".
from agentmesh.dev.localredis import LocalRedis

__all__ = ["LocalRedis"]
