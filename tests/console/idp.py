"""A local OpenID Connect provider for the console's login test: the authorization endpoint (which signs
the user in at once and sends the browser back with a code), the token endpoint (which checks the PKCE
verifier, answering the console's origin with CORS), and the JWKS (tests/jwks.py's keys and JWTs)."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from tests.jwks import ISSUER, Issuer

CLIENT_ID = "agentmesh-console"
OPERATORS_GROUP = "agentmesh-operators"


@dataclass
class Grant:
    challenge: str
    method: str
    redirect_uri: str
    nonce: str


@dataclass
class Provider:
    """The IdP; `allowed_origin` is the console's origin (CORS of the token endpoint)."""

    allowed_origin: str
    subject: str = "idp-operator"
    issuer: Issuer = field(default_factory=Issuer)
    grants: dict[str, Grant] = field(default_factory=dict)
    exchanges: list[str] = field(default_factory=list)
    """The outcome of every token request: "ok" or the error answered."""
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def auth_settings(self) -> dict[str, Any]:
        """The `auth.oidc` entry: operators by group."""
        return {
            "issuer": ISSUER,
            "audience": "agentmesh",
            "jwks_url": f"{self.url}/jwks",
            "role_map": {OPERATORS_GROUP: ["operator"]},
        }

    def console_settings(self) -> dict[str, Any]:
        """The `console.oidc` entry."""
        return {
            "issuer": ISSUER,
            "client_id": CLIENT_ID,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
        }

    def _authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if query.get("response_type") != "code" or query.get("client_id") != CLIENT_ID:
            return 400, {}, b"bad request"
        if query.get("code_challenge_method") != "S256" or len(query.get("code_challenge", "")) != 43:
            return 400, {}, b"PKCE S256 required"
        code = secrets.token_urlsafe(24)
        self.grants[code] = Grant(query["code_challenge"], "S256", query["redirect_uri"], query.get("nonce", ""))
        target = f"{query['redirect_uri']}?{urlencode({'code': code, 'state': query.get('state', '')})}"
        return 302, {"location": target}, b""

    def _token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        grant = self.grants.pop(form.get("code", ""), None)
        if grant is None or form.get("grant_type") != "authorization_code" or form.get("client_id") != CLIENT_ID:
            return 400, {"error": "invalid_grant"}
        verifier = form.get("code_verifier", "")
        digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if digest != grant.challenge or form.get("redirect_uri") != grant.redirect_uri:
            return 400, {"error": "invalid_grant", "error_description": "PKCE verification failed"}
        access = self.issuer.token(sub=self.subject, roles=[OPERATORS_GROUP])
        identity = self.issuer.token(sub=self.subject, aud=CLIENT_ID, nonce=grant.nonce)
        return 200, {"access_token": access, "id_token": identity, "token_type": "Bearer", "expires_in": 600}

    def __enter__(self) -> Provider:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path == "/jwks":
                    body = json.dumps({"keys": [k.jwk() for k in provider.issuer.keys]}).encode()
                    self._send(200, {"content-type": "application/json"}, body)
                elif parts.path == "/authorize":
                    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                    self._send(*provider._authorize(query))
                else:
                    self._send(404, {}, b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                status, answer = provider._token(form) if self.path == "/token" else (404, {})
                provider.exchanges.append("ok" if status == 200 else str(answer.get("error")))
                cors = {"access-control-allow-origin": provider.allowed_origin, "vary": "origin"}
                self._send(status, {"content-type": "application/json", **cors}, json.dumps(answer).encode())

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
