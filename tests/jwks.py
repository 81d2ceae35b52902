"""A local OIDC issuer for tests: signing keys the tests make, a JWKS served over real HTTP, JWT minting."""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

ISSUER = "https://idp.test.example/"
AUDIENCE = "agentmesh"

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: PrivateKey

    def jwk(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            jwt.algorithms.get_default_algorithms()[self.alg].to_jwk(self.private.public_key())
        )
        data.update({"kid": self.kid, "alg": self.alg, "use": "sig"})
        return data


def new_key(alg: str = "RS256", kid: str | None = None) -> SigningKey:
    private: PrivateKey
    if alg == "RS256":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    elif alg == "EdDSA":
        private = ed25519.Ed25519PrivateKey.generate()
    else:
        raise ValueError(alg)
    return SigningKey(kid or f"{alg.lower()}-{uuid.uuid4().hex[:8]}", alg, private)


@dataclass
class Issuer:
    """An identity provider: its published keys (change them to rotate) and a JWKS endpoint counting fetches."""

    keys: list[SigningKey] = field(default_factory=lambda: [new_key("RS256")])
    fetches: int = 0
    body: bytes | None = None
    """When set, served instead of the JWKS (garbage, for the error paths)."""
    status: int = 200
    location: str | None = None
    """When set, sent as the response's Location header (a redirect, with a 3xx status)."""
    stall_s: float = 0.0
    """How long the endpoint waits before it answers (a slow identity provider)."""
    accepts: list[str | None] = field(default_factory=list)
    """The Accept header of each request, in order."""
    _server: ThreadingHTTPServer | None = None

    @property
    def jwks_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/.well-known/jwks.json"

    def settings(self, **extra: Any) -> dict[str, Any]:
        """An `auth.oidc` entry for this issuer."""
        return {"issuer": ISSUER, "audience": AUDIENCE, "jwks_url": self.jwks_url, **extra}

    def token(self, key: SigningKey | None = None, *, headers: dict[str, Any] | None = None, **claims: Any) -> str:
        """A JWT signed by `key` (default: the first published), with sensible claims unless overridden."""
        key = key or self.keys[0]
        now = int(time.time())
        body: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 600}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, key.private, algorithm=key.alg, headers={"kid": key.kid, **(headers or {})})

    def __enter__(self) -> Issuer:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.fetches += 1
                issuer.accepts.append(self.headers.get("accept"))
                if issuer.stall_s:
                    time.sleep(issuer.stall_s)
                payload = (
                    issuer.body
                    if issuer.body is not None
                    else json.dumps({"keys": [k.jwk() for k in issuer.keys]}).encode()
                )
                self.send_response(issuer.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                if issuer.location is not None:
                    self.send_header("location", issuer.location)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
