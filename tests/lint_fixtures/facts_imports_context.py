# Lint fixture (never imported): appended to context_svc/facts/labels.py, it must break "facts-alone".
from context_svc.model import Message as _Message  # noqa: F401  (the rest of context_svc)
