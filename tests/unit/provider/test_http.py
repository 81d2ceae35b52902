"""HTTP plumbing of the adapters: verbatim JSON numbers and credential scrubbing."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from provider_svc.models._http import HttpBackend, dumps_raw, environment_proxy, loads_raw
from provider_svc.models.base import CallContext


def test_numbers_survive_a_round_trip_verbatim() -> None:
    text = (
        '{"id":123456789012345678901234567890,"price":19.990,"tiny":1e-7,'
        '"s":"caf\\u00e9","n":null,"ok":true,"l":[1,2.50]}'
    )
    value = loads_raw(text)
    assert value["id"] == 123456789012345678901234567890
    assert (
        dumps_raw(value)
        == '{"id":123456789012345678901234567890,"price":19.990,"tiny":1e-7,"s":"café","n":null,"ok":true,"l":[1,2.50]}'
    )
    assert json.loads(dumps_raw(value)) == json.loads(text)


async def test_scrub_removes_our_credentials_and_key_like_tokens() -> None:
    key = "sk-proj-REAL-secret-0123456789"
    backend = HttpBackend("up", "http://127.0.0.1:1/v1", auth_headers={"authorization": f"Bearer {key}"},
                          static_headers={"openai-organization": "org-very-private-1234"})  # fmt: skip
    try:
        text = f"Incorrect API key provided: {key}; org org-very-private-1234; other sk-abcdef123456; plain words"
        scrubbed = backend.scrub(text)
        assert key not in scrubbed and "org-very-private-1234" not in scrubbed and "sk-abcdef123456" not in scrubbed
        assert scrubbed.endswith("plain words") and "Incorrect API key provided" in scrubbed
    finally:
        await backend.aclose()
    short = HttpBackend("up", "http://127.0.0.1:1/v1", auth_headers={"authorization": "Bearer k"})
    try:
        assert short.scrub("keep every k in the text") == "keep every k in the text"
    finally:
        await short.aclose()


class _ForwardProxy(BaseHTTPRequestHandler):
    """A plain-HTTP forward proxy that answers itself: records the absolute-form request line."""

    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        type(self).seen.append(self.path)
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def test_the_environment_proxy_is_honoured_and_no_proxy_exempts(monkeypatch: pytest.MonkeyPatch) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ForwardProxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.server_port}")
        backend = HttpBackend("up", "http://upstream.invalid/v1", auth_headers={"authorization": "Bearer k"})
        try:
            assert backend.proxy == f"http://127.0.0.1:{server.server_port}"
            status, data, _ = await backend.post_json("chat/completions", b"{}", CallContext())
            assert (status, data) == (200, {"ok": True})
            assert _ForwardProxy.seen == ["http://upstream.invalid/v1/chat/completions"]
        finally:
            await backend.aclose()
        monkeypatch.setenv("NO_PROXY", "upstream.invalid")
        assert environment_proxy("http://upstream.invalid/v1/") is None
        assert environment_proxy("http://other.invalid/v1/") == f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
