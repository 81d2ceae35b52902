# Lint fixture (never imported): copied to context_svc/_lint_fixture.py, it must break "services-independent".
from tool_svc.model import Caller

__all__ = ["Caller"]
