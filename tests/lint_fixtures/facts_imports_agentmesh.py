# Lint fixture (never imported): appended to context_svc/facts/numbers.py, it must break "facts-alone".
from agentmesh.errors import InvalidRequestError as _Invalid  # noqa: F401  (the core)
