"""URL allowlists: `scheme://host[:port]/path-prefix` patterns, `*` as the port or the leftmost host label.

One implementation for every outgoing HTTP request configuration allows: tool_svc's HTTP tools and
`http_request` (`tools.http_allowlist`, docs/design.md §5) and provider_svc's spend-alert
webhook, which must be on the same list (§6). Domain code only: no grpc, no stubs.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from agentmesh.errors import AgentmeshError, ErrorCode

__all__ = ["Allowlist", "safe_url"]


@dataclass(frozen=True)
class _Pattern:
    scheme: str
    host: str
    port: str  # "" = the scheme's default, "*" = any
    path: str


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


class Allowlist:
    """URL patterns `scheme://host[:port]/path-prefix`; `*` as the port or the leftmost host label."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(self._parse(p) for p in patterns)

    @staticmethod
    def _parse(pattern: str) -> _Pattern:
        port = ""
        if ":*" in pattern:
            pattern, port = pattern.replace(":*", "", 1), "*"
        parts = urllib.parse.urlsplit(pattern)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"allowlist entry {pattern!r} must be http(s)://host[:port]/path")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError(f"allowlist entry {pattern!r} must not have credentials, a query or a fragment")
        if port != "*" and parts.port is not None:
            port = str(parts.port)
        path = parts.path or "/"
        return _Pattern(parts.scheme, parts.hostname.lower(), port, path)

    def allows(self, url: str) -> bool:
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port or _default_port(parts.scheme)
        except ValueError:
            return False
        host = (parts.hostname or "").lower()
        if parts.scheme not in ("http", "https") or not host or parts.username or parts.password:
            return False
        path = parts.path or "/"
        if "/../" in f"{path}/" or "%2e" in path.lower():
            return False
        for p in self.patterns:
            if p.scheme != parts.scheme:
                continue
            if p.host.startswith("*."):
                if not (host.endswith(p.host[1:]) and host != p.host[2:]):
                    continue
            elif host != p.host:
                continue
            if p.port != "*" and port != (int(p.port) if p.port else _default_port(p.scheme)):
                continue
            prefix = p.path
            if path == prefix or path.startswith(prefix if prefix.endswith("/") else prefix + "/"):
                return True
        return False

    def check(self, url: str, tool: str) -> None:
        if not self.allows(url):
            raise AgentmeshError(
                ErrorCode.PERMISSION_DENIED,
                f"{tool}: {safe_url(url)} is not in tools.http_allowlist",
                missing_permission=f"http:{safe_url(url)}",
            )


def safe_url(url: str) -> str:
    """The URL without credentials or query (both may carry secrets)."""
    from agentmesh.redact import redact_str  # detect-secrets is slow to import: only when a URL is shown

    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        # The path may carry a token too (webhook URLs): masked like any text.
        return redact_str(urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")))
    except ValueError:
        return "<invalid url>"
