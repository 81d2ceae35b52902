"""httpx over httpcore on plain asyncio: the upstream transport of the HTTP adapters.

httpx's default transport drives httpcore through anyio, whose stream, cancel-scope and
`fail_after` layers cost a measurable share of a call's CPU here (py-spy of a Generate against a
local fake: ~0.2 ms per call). httpcore lets us plug in its network layer (`AsyncNetworkBackend`),
and httpx lets us plug in its transport (`AsyncBaseTransport`); both are public extension points.
So the pool, HTTP/1.1 parsing (h11), keep-alive and TLS stay httpcore's; only the socket layer is
ours, an asyncio protocol with a read buffer. Forward proxies keep httpx's own transport (HttpBackend).
"""

# The `timeout` parameters are httpcore's network interface, not ours to replace with asyncio.timeout.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Coroutine, Iterable
from typing import Any

import httpcore
import httpx

__all__ = ["AsyncioBackend", "AsyncioTransport"]

# Reading stops once this much is buffered unread (a slow consumer of a long SSE stream).
_HIGH_WATER = 256 * 1024


class _StreamProtocol(asyncio.Protocol):
    """A connection's buffer, EOF/error state and flow control, for one AsyncioStream."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self._reader: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._reading_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _HIGH_WATER and self.transport is not None and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        return False  # close the transport: HTTP/1.1 has no use for a half-open socket

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake_reader()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def _wake_reader(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(None)

    def take(self, max_bytes: int) -> bytes:
        data = bytes(self.buffer[:max_bytes])
        del self.buffer[:max_bytes]
        if self._reading_paused and len(self.buffer) <= _HIGH_WATER // 2 and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        return data

    async def wait_readable(self) -> None:
        self._reader = asyncio.get_running_loop().create_future()
        try:
            await self._reader
        finally:
            self._reader = None

    @property
    def write_paused(self) -> bool:
        return self._writable is not None and not self._writable.done()

    async def wait_writable(self) -> None:
        if self._writable is not None and not self._writable.done():
            await self._writable


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One TCP (or TLS) connection as httpcore's network stream."""

    def __init__(self, transport: asyncio.Transport, protocol: _StreamProtocol) -> None:
        self._transport = transport
        self._protocol = protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        protocol = self._protocol
        if not protocol.buffer and not protocol.eof:
            try:
                async with asyncio.timeout(timeout):
                    await protocol.wait_readable()
            except TimeoutError:
                raise httpcore.ReadTimeout(f"no data within {timeout}s") from None
        if protocol.buffer:
            return protocol.take(max_bytes)
        if protocol.error is not None:
            raise httpcore.ReadError(str(protocol.error) or type(protocol.error).__name__)
        return b""  # EOF: h11 reports a connection closed mid-response itself

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._transport.is_closing():
            raise httpcore.WriteError("connection closed")
        self._transport.write(buffer)
        if self._protocol.write_paused:  # the kernel buffer is full: wait for it to drain
            try:
                async with asyncio.timeout(timeout):
                    await self._protocol.wait_writable()
            except TimeoutError:
                raise httpcore.WriteTimeout(f"could not send within {timeout}s") from None
        if self._protocol.error is not None:
            raise httpcore.WriteError(str(self._protocol.error))

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                tls = await loop.start_tls(
                    self._transport, self._protocol, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError:
            self._transport.close()
            raise httpcore.ConnectTimeout(f"TLS handshake took longer than {timeout}s") from None
        except (OSError, ssl.SSLError, ConnectionError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc)) from exc
        if tls is None:  # only for a transport that is closing
            raise httpcore.ConnectError("connection closed during the TLS handshake")
        assert isinstance(tls, asyncio.Transport)
        self._protocol.transport = tls
        return AsyncioStream(tls, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "is_readable":
            # httpcore asks before reusing an idle connection: anything buffered, or EOF, means
            # the server closed it (or broke the protocol), so it must not be reused.
            return bool(self._protocol.buffer) or self._protocol.eof
        return None


async def _connect(
    connecting: Coroutine[Any, Any, tuple[asyncio.BaseTransport, _StreamProtocol]], where: str, timeout: float | None
) -> tuple[asyncio.BaseTransport, _StreamProtocol]:
    """Awaits a connection within `timeout`, failing as httpcore's connect errors do."""
    try:
        async with asyncio.timeout(timeout):
            return await connecting
    except TimeoutError:
        raise httpcore.ConnectTimeout(f"could not connect to {where} within {timeout}s") from None
    except OSError as exc:
        raise httpcore.ConnectError(str(exc)) from exc


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network layer on the running asyncio loop (TCP_NODELAY, as asyncio sets it)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        connecting = loop.create_connection(
            _StreamProtocol, host, port, local_addr=(local_address, 0) if local_address else None
        )
        transport, protocol = await _connect(connecting, f"{host}:{port}", timeout)
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():
            if sock is not None:
                sock.setsockopt(*option)
        assert isinstance(transport, asyncio.Transport)
        return AsyncioStream(transport, protocol)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        transport, protocol = await _connect(loop.create_unix_connection(_StreamProtocol, path), path, timeout)
        assert isinstance(transport, asyncio.Transport)
        return AsyncioStream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


# httpcore's exceptions as httpx raises them (most specific first: a ReadTimeout is a TimeoutException).
_EXCEPTIONS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


def _as_httpx(exc: Exception) -> Exception:
    for source, target in _EXCEPTIONS:
        if isinstance(exc, source):
            return target(str(exc))
    return exc


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterator[bytes] | Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except Exception as exc:
            mapped = _as_httpx(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    async def aclose(self) -> None:
        if hasattr(self._stream, "aclose"):
            await self._stream.aclose()


class AsyncioTransport(httpx.AsyncBaseTransport):
    """An httpx transport: an httpcore connection pool on AsyncioBackend (HTTP/1.1, verified TLS)."""

    def __init__(self, limits: httpx.Limits, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=AsyncioBackend(),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        url = request.url
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core_request)
        except Exception as exc:
            mapped = _as_httpx(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()
