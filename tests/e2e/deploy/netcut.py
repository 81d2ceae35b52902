"""A TCP proxy that cuts a gRPC connection in the middle of a stream, as a failing network does.

The first connection through it is cut right after the server sent its first HTTP/2 DATA frame,
i.e. the first message of the first call (or, with `before_response`, just before the server's
first response HEADERS, so the call got nothing at all): the client gets what was forwarded, then
its connection closes (FIN, after the data, so a frame is never lost to a reset) and the server's is
reset. The client holds the start of its stream and nothing more, whatever the server did
meanwhile. Later connections pass untouched, so a client that reconnects and resumes gets the rest.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType

_FRAME_HEADER = 9
_DATA = 0x0
_HEADERS = 0x1


def _reset(sock: socket.socket) -> None:
    """Closes with a TCP RST (linger 0), as a dropped link or a killed peer looks to the other end."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _hang_up(sock: socket.socket) -> None:
    """Ends what this side sends (FIN after any data in flight) and reads nothing more."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class CuttingProxy:
    """127.0.0.1:<free port> -> `upstream`; see the module docstring."""

    def __init__(self, upstream: str, *, before_response: bool = False) -> None:
        self._before_response = before_response
        host, port = upstream.rsplit(":", 1)
        self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.target = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self.connections = 0
        self.cuts = 0
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._closed = False

    def __enter__(self) -> CuttingProxy:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._closed = True
        # shutdown wakes the thread blocked in accept() (close alone does not, on Linux).
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in self._sockets:
            _hang_up(sock)  # wakes a thread blocked in recv() on it, as close alone does not
            sock.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._upstream, timeout=10)
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            self.connections += 1
            cut = self.connections == 1
            self._spawn(self._pump, client, upstream)
            self._spawn(self._answers, upstream, client, cut)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        """Client to server, byte for byte, until either side closes; then the other side is hung up."""
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        _hang_up(sink)

    def _answers(self, server: socket.socket, client: socket.socket, cut: bool) -> None:
        """Server to client, frame by frame; on a cut connection, reset both after the first DATA frame."""
        buffer = b""
        try:
            while data := server.recv(65536):
                if not cut:
                    client.sendall(data)
                    continue
                buffer += data
                while len(buffer) >= _FRAME_HEADER:
                    length = int.from_bytes(buffer[:3], "big")
                    if len(buffer) < _FRAME_HEADER + length:
                        break
                    frame, buffer = buffer[: _FRAME_HEADER + length], buffer[_FRAME_HEADER + length :]
                    kind, stream = frame[3], int.from_bytes(frame[5:9], "big") & 0x7FFFFFFF
                    before = self._before_response and kind == _HEADERS and stream != 0
                    if not before:
                        client.sendall(frame)
                    if before or (kind == _DATA and length > 0):
                        self.cuts += 1
                        _hang_up(client)
                        _reset(server)
                        return
        except OSError:
            pass
        _hang_up(client)
