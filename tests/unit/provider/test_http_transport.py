"""Edge cases of the upstream transport the HTTP adapters use: httpx's AsyncHTTPTransport (httpcore).

HttpBackend (provider_svc.models._http) sends every upstream request through it; these tests pin the
behaviour the adapters rely on, so an httpx or httpcore upgrade that changes it fails here.

Every test goes through the public transport API against a small raw HTTP/1.1 server started in
the test (asyncio.start_server on 127.0.0.1, port 0), so the bytes on the wire are ours to shape:
keep-alive, idle closes, large and chunked bodies, silence, truncation, resets and TLS. The happy
path through the adapters is tests/contract/provider's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import socket
import ssl
import struct
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

# A backstop only: each exchange has its own asyncio.timeout, so a hang fails fast and says where.
pytestmark = pytest.mark.timeout(30)

_GUARD = 5.0
_LIMITS = httpx.Limits(max_connections=10, max_keepalive_connections=10, keepalive_expiry=30)
# 8x the transport's 256 KiB read high-water mark, so a slow reader makes it pause and resume.
_BIG = random.Random(7).randbytes(2 * 1024 * 1024)


@dataclass
class _Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Handler = Callable[["_Server", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class _Server:
    """What a test server saw: accepted connections, parsed requests, client EOFs, own closes."""

    handler: Handler
    port: int = 0
    accepted: int = 0
    requests: list[_Received] = field(default_factory=list)
    client_eof: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.writers.append(writer)
        try:
            await self.handler(self, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away mid-exchange: some tests do exactly that
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self.closed.set()


@contextlib.asynccontextmanager
async def _serve(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[_Server]:
    state = _Server(handler)
    server = await asyncio.start_server(state.on_connect, "127.0.0.1", 0, ssl=ssl_context)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()
        for writer in state.writers:  # ends handlers still waiting on a kept-alive connection
            writer.close()
        if state.tasks:
            await asyncio.wait(state.tasks, timeout=_GUARD)
        for task in state.tasks:  # only a failed test leaves one waiting (on an event)
            task.cancel()
        await server.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> _Received | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # the client closed the connection between requests
    request_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    method, path, _version = request_line.split(" ")
    headers = {name.strip().lower(): value.strip() for name, value in (line.split(":", 1) for line in lines)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return _Received(method, path, headers, body)


def _response(body: bytes, *headers: str) -> bytes:
    head = ["HTTP/1.1 200 OK", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _echo(srv: _Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Keep-alive: answer each request with its own body, until the client closes."""
    while (request := await _read_request(reader)) is not None:
        srv.requests.append(request)
        writer.write(_response(b"echo:" + request.body, "Content-Type: text/plain", "X-Test: yes"))
        await writer.drain()
    srv.client_eof.set()


async def _big(srv: _Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while await _read_request(reader) is not None:
        writer.write(_response(_BIG))
        await writer.drain()


def _send_then_close(payload: bytes, *, reset: bool = False) -> Handler:
    """Answer one request with `payload` verbatim, then close the connection (FIN, or RST if `reset`)."""

    async def handler(srv: _Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if request := await _read_request(reader):
            srv.requests.append(request)
        writer.write(payload)
        await writer.drain()
        if reset:  # SO_LINGER 0: close with a RST rather than a FIN
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

    return handler


async def _fetch(
    transport: httpx.AsyncHTTPTransport,
    url: str,
    method: str = "GET",
    content: bytes | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> tuple[httpx.Response, bytes]:
    request = httpx.Request(method, url, content=content, extensions=extensions)
    async with asyncio.timeout(_GUARD):
        response = await transport.handle_async_request(request)
        try:
            return response, await response.aread()
        finally:
            await response.aclose()


async def _read_streamed(transport: httpx.AsyncHTTPTransport, url: str, *, slow: bool) -> bytes:
    async with asyncio.timeout(_GUARD):
        response = await transport.handle_async_request(httpx.Request("GET", url))
        received = bytearray()
        try:
            async for chunk in response.aiter_bytes():
                received += chunk
                if slow:  # the server outpaces us: the read buffer fills past its high-water mark
                    await asyncio.sleep(0.002)
        finally:
            await response.aclose()
    return bytes(received)


@pytest.fixture
async def transport() -> AsyncIterator[httpx.AsyncHTTPTransport]:
    transport = httpx.AsyncHTTPTransport(limits=_LIMITS)
    yield transport
    await transport.aclose()


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context, client context trusting it) for a fresh self-signed 127.0.0.1 certificate."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl CLI is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))


async def test_post_round_trip(transport: httpx.AsyncHTTPTransport) -> None:
    async with _serve(_echo) as srv:
        url = f"http://127.0.0.1:{srv.port}/v1/chat?stream=0"
        response, body = await _fetch(transport, url, "POST", b'{"q": 1}')
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain" and response.headers["x-test"] == "yes"
    assert body == b'echo:{"q": 1}'
    [seen] = srv.requests
    assert (seen.method, seen.path, seen.body) == ("POST", "/v1/chat?stream=0", b'{"q": 1}')
    assert seen.headers["host"] == f"127.0.0.1:{srv.port}"
    assert seen.headers["content-length"] == "8"


async def test_sequential_requests_reuse_one_connection(transport: httpx.AsyncHTTPTransport) -> None:
    async with _serve(_echo) as srv:
        for n in (b"1", b"2", b"3"):
            _, body = await _fetch(transport, f"http://127.0.0.1:{srv.port}/", "POST", n)
            assert body == b"echo:" + n
    assert srv.accepted == 1 and len(srv.requests) == 3


async def test_connection_closed_by_server_while_idle_is_not_reused(transport: httpx.AsyncHTTPTransport) -> None:
    # No `Connection: close`: the client may keep the connection, which the server then closes,
    # as its idle timeout would.
    async with _serve(_send_then_close(_response(b"once"))) as srv:
        url = f"http://127.0.0.1:{srv.port}/"
        _, first = await _fetch(transport, url)
        await asyncio.wait_for(srv.closed.wait(), _GUARD)
        await asyncio.sleep(0.05)  # the FIN is on its way: let the loop deliver it to the idle connection
        _, second = await _fetch(transport, url)
    assert first == second == b"once"
    assert srv.accepted == 2 and len(srv.requests) == 2


@pytest.mark.parametrize("slow", [False, True], ids=["fast-reader", "slow-reader"])
async def test_large_body_arrives_intact(transport: httpx.AsyncHTTPTransport, slow: bool) -> None:
    async with _serve(_big) as srv:
        url = f"http://127.0.0.1:{srv.port}/big"
        assert await _read_streamed(transport, url, slow=slow) == _BIG
        # the connection goes back to the pool reading again (resumed), and serves the next one
        _, again = await _fetch(transport, url)
    assert again == _BIG and srv.accepted == 1


_EVENTS = [f"data: {i}\n\n".encode() for i in range(4)]


def _sse(acks: list[asyncio.Event]) -> Handler:
    async def handler(srv: _Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for event, ack in zip(_EVENTS, acks, strict=True):
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            # The next chunk waits until the client has read this one: a transport that delivered
            # the body only at its end would deadlock here (and fail on the guard).
            await ack.wait()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    return handler


async def test_chunked_stream_is_delivered_incrementally(transport: httpx.AsyncHTTPTransport) -> None:
    acks = [asyncio.Event() for _ in _EVENTS]
    chunks: list[bytes] = []
    async with _serve(_sse(acks)) as srv, asyncio.timeout(_GUARD):
        response = await transport.handle_async_request(httpx.Request("GET", f"http://127.0.0.1:{srv.port}/sse"))
        try:
            assert response.headers["transfer-encoding"] == "chunked"
            async for chunk in response.aiter_bytes():
                chunks.append(chunk)
                for ack in acks[: b"".join(chunks).count(b"\n\n")]:
                    ack.set()
        finally:
            await response.aclose()
    assert chunks == _EVENTS


async def _silent(srv: _Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)
    await reader.read()  # never answers; returns once the client closes the connection
    srv.client_eof.set()


async def test_read_timeout(transport: httpx.AsyncHTTPTransport) -> None:
    timeout = {"connect": 1, "read": 0.2, "write": 1, "pool": 1}
    async with _serve(_silent) as srv:
        with pytest.raises(httpx.ReadTimeout):
            await _fetch(transport, f"http://127.0.0.1:{srv.port}/", extensions={"timeout": timeout})
        # the timed-out connection is closed, not handed back to the pool
        await asyncio.wait_for(srv.client_eof.wait(), _GUARD)


async def _deaf(srv: _Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while not writer.is_closing():  # never reads (the client's send buffer fills up) until teardown
        await asyncio.sleep(0.01)


async def test_write_timeout_when_the_server_stops_reading(transport: httpx.AsyncHTTPTransport) -> None:
    timeout = {"connect": 1, "read": 1, "write": 0.2, "pool": 1}
    async with _serve(_deaf) as srv:
        with pytest.raises(httpx.WriteTimeout):
            # Far more than the kernel buffers hold: the transport pauses writing and must time out.
            await _fetch(transport, f"http://127.0.0.1:{srv.port}/", "POST", b"x" * (64 * 1024 * 1024),
                         extensions={"timeout": timeout})  # fmt: skip


async def test_nothing_listening_is_a_connect_error(transport: httpx.AsyncHTTPTransport) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago, and is closed now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        await _fetch(transport, f"http://127.0.0.1:{port}/")


_TRUNCATED = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10


@pytest.mark.parametrize(
    ("payload", "reset", "error", "message"),
    [
        (_TRUNCATED, False, httpx.RemoteProtocolError, "received 10 bytes, expected 100"),
        (_TRUNCATED[:-10], False, httpx.RemoteProtocolError, "received 0 bytes, expected 100"),
        (b"", False, httpx.RemoteProtocolError, "Server disconnected without sending a response"),
        (_TRUNCATED[:25], False, httpx.RemoteProtocolError, "Server disconnected without sending a response"),
        # httpx raises ReadError with no text on a reset (the adapters name the type in their error).
        (_TRUNCATED, True, httpx.ReadError, None),
    ],
    ids=["mid-body", "after-headers", "before-response", "mid-headers", "reset-mid-body"],
)
async def test_server_dropping_the_connection_mid_response(
    transport: httpx.AsyncHTTPTransport, payload: bytes, reset: bool, error: type[httpx.HTTPError], message: str | None
) -> None:
    async with _serve(_send_then_close(payload, reset=reset)) as srv:
        with pytest.raises(error, match=message):
            await _fetch(transport, f"http://127.0.0.1:{srv.port}/")


async def test_tls(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_context, client_context = tls
    async with _serve(_echo, server_context) as srv:
        url = f"https://127.0.0.1:{srv.port}/secure"
        trusting = httpx.AsyncHTTPTransport(limits=_LIMITS, verify=client_context)
        try:
            for n in (b"1", b"2"):
                response, body = await _fetch(trusting, url, "POST", b"hi" + n)
                assert body == b"echo:hi" + n
                assert response.extensions["network_stream"].get_extra_info("ssl_object") is not None
        finally:
            await trusting.aclose()
        assert srv.accepted == 1  # kept alive over TLS too
        default = httpx.AsyncHTTPTransport(limits=_LIMITS)
        try:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await _fetch(default, url)
        finally:
            await default.aclose()
    assert len(srv.requests) == 2  # the untrusted attempt never got as far as a request


async def test_large_body_over_tls_with_a_slow_reader(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_context, client_context = tls
    transport = httpx.AsyncHTTPTransport(limits=_LIMITS, verify=client_context)
    try:
        async with _serve(_big, server_context) as srv:
            url = f"https://127.0.0.1:{srv.port}/big"
            assert await _read_streamed(transport, url, slow=True) == _BIG
            _, again = await _fetch(transport, url)
        assert again == _BIG and srv.accepted == 1
    finally:
        await transport.aclose()


async def test_aclose_closes_pooled_connections() -> None:
    transport = httpx.AsyncHTTPTransport(limits=_LIMITS)
    async with _serve(_echo) as srv:
        await _fetch(transport, f"http://127.0.0.1:{srv.port}/")
        await asyncio.sleep(0.01)
        assert not srv.client_eof.is_set()  # kept alive in the pool until now
        await transport.aclose()
        await asyncio.wait_for(srv.client_eof.wait(), _GUARD)
