# Lint fixture (never imported): appended to tool_svc/model.py, it must break "domain-models-light".
from agentmesh.config import Settings as _Settings  # noqa: F401  (the configuration: pydantic, YAML)
