"""ListTasks' and ListApprovals' page tokens: agentmesh/pagetoken.py (shared with provider_svc's spend lists)."""

from __future__ import annotations

from agentmesh.pagetoken import (
    MAX_TOKEN_CHARS,
    REASONS,
    TOKEN_TTL_S,
    PageCursor,
    PageTokens,
    filter_hash,
    page_token_error,
)

__all__ = ["MAX_TOKEN_CHARS", "REASONS", "TOKEN_TTL_S", "PageCursor", "PageTokens", "filter_hash", "page_token_error"]
