"""The web console's files and configuration, served at `/console` by the dispatcher's HTTP listener
(agentmesh/rpc/http.py mounts it; docs/design.md §17).

What is served: the built console (`agentmesh/console_dist/`, made by scripts/build-console.sh from
console/ and committed) read once at start-up, and `/console/config.json`, the few settings a browser
needs (where tool_svc's and provider_svc's Connect edges are, the Jaeger UI, the OIDC login's public
parameters). Nothing
here reads or changes data: the files are the same for everyone and carry no secret, so, like
`/metrics`, they need no token. The console itself reads data only through the Connect edges with its
user's token.

Every answer carries a Content-Security-Policy that allows scripts, styles and images from this origin
only (no inline script or style, no eval), network calls to this origin, tool_svc's and provider_svc's edges and the
IdP's token endpoint only, no framing, no forms posting anywhere, no base URI; and nosniff, no
referrer, same-origin opener and resource policies.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentmesh import __version__
from agentmesh.config import Settings

__all__ = ["ASSETS_DIR", "ConsoleApp", "console_config", "provider_url", "security_headers", "tool_url"]

log = logging.getLogger("agentmesh.rpc.console")

ASSETS_DIR = Path(__file__).resolve().parents[1] / "console_dist"
"""The built console (scripts/build-console.sh), package data of agentmesh."""

PREFIX = "/console"
_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
# A Host header's name part as it may appear in a CSP source (anything else is left out of the policy).
_HOST = re.compile(r"^(?:[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*|\[[0-9A-Fa-f:.]{2,45}\])$")


@dataclass(frozen=True)
class _Asset:
    body: bytes
    content_type: str
    etag: str


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""


def _request_host(scope: Any) -> str:
    """The host name (without port) the browser used, when it is a plain name or address."""
    for key, value in scope.get("headers") or ():
        if key == b"host":
            text = value.decode("latin-1").strip()
            host = text.rsplit(":", 1)[0] if not text.endswith("]") and text.count(":") == 1 else text
            if host.startswith("[") and "]:" in host:
                host = host.split("]:", 1)[0] + "]"
            return host if _HOST.match(host) else ""
    return ""


def tool_url(settings: Settings, scope: Any) -> str:
    """tool_svc's Connect edge as this browser reaches it: `console.tool_url`, else the host the page
    was loaded from on tool_svc's `http_port` ("" when neither is known)."""
    if settings.console.tool_url:
        return settings.console.tool_url
    port = settings.services.tool.http_port
    host = _request_host(scope)
    if not port or not host:
        return ""
    scheme = "https" if settings.tls.enabled else "http"
    return f"{scheme}://{host}:{port}"


def provider_url(settings: Settings, scope: Any) -> str:
    """provider_svc's Connect edge as this browser reaches it: `console.provider_url`, else the page's host
    on provider_svc's `http_port` ("" when neither is known)."""
    if settings.console.provider_url:
        return settings.console.provider_url
    port = settings.services.provider.http_port
    host = _request_host(scope)
    if not port or not host:
        return ""
    scheme = "https" if settings.tls.enabled else "http"
    return f"{scheme}://{host}:{port}"


def console_config(settings: Settings, scope: Any) -> dict[str, Any]:
    """`/console/config.json`: public values only (no key, no secret)."""
    oidc = settings.console.oidc
    return {
        "environment": settings.environment,
        "version": __version__,
        "tool_url": tool_url(settings, scope),
        "provider_url": provider_url(settings, scope),
        "jaeger_url": settings.console.jaeger_url,
        "oidc": None
        if oidc is None
        else {
            "issuer": oidc.issuer,
            "client_id": oidc.client_id,
            "authorization_endpoint": oidc.authorization_endpoint,
            "token_endpoint": oidc.token_endpoint,
            "scopes": list(oidc.scopes),
            "token": oidc.token,
            "audience": oidc.audience,
        },
    }


def security_headers(settings: Settings, scope: Any) -> list[tuple[bytes, bytes]]:
    """The headers of every console answer (module doc)."""
    connect = ["'self'"]
    oidc_token = settings.console.oidc.token_endpoint if settings.console.oidc else ""
    for url in (tool_url(settings, scope), provider_url(settings, scope), oidc_token):
        origin = _origin(url)
        if origin and origin not in connect:
            connect.append(origin)
    policy = (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        f"connect-src {' '.join(connect)}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return [
        (b"content-security-policy", policy.encode("latin-1")),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
        (b"cross-origin-opener-policy", b"same-origin"),
        (b"cross-origin-resource-policy", b"same-origin"),
        (b"permissions-policy", b"camera=(), microphone=(), geolocation=(), payment=(), usb=()"),
    ]


def load_assets(directory: Path) -> dict[str, _Asset]:
    """The built files, by name; empty when the console was not built (every page then says so)."""
    assets: dict[str, _Asset] = {}
    for name, content_type in _TYPES.items():
        path = directory / name
        if path.is_file():
            body = path.read_bytes()
            assets[name] = _Asset(body, content_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
    if "index.html" not in assets:
        log.warning("the console is not built (%s has no index.html): run scripts/build-console.sh", directory)
    return assets


class ConsoleApp:
    """The ASGI application of `/console` and `/console/<file>` (GET and HEAD; http.py routes them)."""

    def __init__(self, settings: Settings, assets_dir: Path = ASSETS_DIR) -> None:
        self.settings = settings
        self.assets = load_assets(assets_dir)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = str(scope.get("path") or "")
        headers = security_headers(self.settings, scope)
        head = scope.get("method") == "HEAD"
        if path == PREFIX:
            await _send(send, 308, [*headers, (b"location", b"/console/")], b"", head=head)
            return
        name = path[len(PREFIX) + 1 :] or "index.html"
        if name == "config.json":
            body = json.dumps(console_config(self.settings, scope), separators=(",", ":")).encode()
            extra = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
            await _send(send, 200, headers + extra, body, head=head)
            return
        asset = self.assets.get(name)
        if asset is None:
            text = b"not found" if self.assets else b"the console is not built: run scripts/build-console.sh"
            extra = [(b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store")]
            await _send(send, 404 if self.assets else 503, headers + extra, text, head=head)
            return
        extra = [
            (b"content-type", asset.content_type.encode()),
            (b"etag", asset.etag.encode()),
            (b"cache-control", b"no-cache"),  # revalidated by ETag: an upgrade is picked up at once
        ]
        if _none_match(scope, asset.etag):
            await _send(send, 304, headers + extra[1:], b"", head=True)
            return
        await _send(send, 200, headers + extra, asset.body, head=head)


def _none_match(scope: Any, etag: str) -> bool:
    for key, value in scope.get("headers") or ():
        if key == b"if-none-match":
            return etag in {tag.strip() for tag in value.decode("latin-1").split(",")}
    return False


async def _send(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes, *, head: bool) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())] if status != 304 else headers
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})
