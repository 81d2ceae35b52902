# Lint fixture (never imported): appended to context_svc/facts/numbers.py, it must break "facts-layers".
from context_svc.facts.facts import Fact as _Fact  # noqa: F401  (numbers is the bottom layer)
