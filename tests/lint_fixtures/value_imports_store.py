# Lint fixture (never imported): appended to agentmesh/chat.py, it must break "light-core".
from agentmesh.store import Store as _Store  # noqa: F401  (infrastructure: Redis)
