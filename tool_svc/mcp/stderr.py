"""What an MCP server says reaches our logs through the redactor only (docs/design.md §16).

`StderrPump`: a stdio server's stderr, line by line.

The server writes to the write end of a pipe (handed to the SDK's `stdio_client` as its `errlog`); a task
reads the other end. Lines are redacted (`agentmesh.redact`), cut to 1000 characters and rate-limited
per server (100 lines per 10 s, then one "suppressed N lines" note), so a chatty or hostile server can
neither leak a secret into the logs nor flood them. End of file means the process (and every child
holding the pipe) has gone.

`redact_sdk_logs`: the SDK logs what a server sends that it cannot parse (a non-JSON line on a stdio
server's stdout, with the offending text in the traceback); its records are redacted, tracebacks reduced
to their redacted last line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import TextIO

from agentmesh.redact import redact_str

log = logging.getLogger("tool_svc.mcp.stderr")

MAX_LINE_CHARS = 1000
WINDOW_S = 10.0
LINES_PER_WINDOW = 100
_READ_LIMIT = 64 * 1024


class StderrPump:
    """The pipe a stdio server's stderr goes to, and the task that logs what arrives."""

    def __init__(self, server: str, *, on_eof: Callable[[], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.server = server
        self.on_eof = on_eof
        self.clock = clock
        read_fd, write_fd = os.pipe()
        self._read = os.fdopen(read_fd, "rb", buffering=0)
        self.errlog: TextIO = open(write_fd, "w", encoding="utf-8", errors="replace")  # noqa: SIM115
        """The write end: the server process's stderr (ours is closed once the process has it)."""
        self._task: asyncio.Task[None] | None = None
        self._window_start = clock()
        self._in_window = 0
        self._suppressed = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._pump(), name=f"mcp stderr {self.server}")

    def release_write_end(self) -> None:
        """Called once the process has started: from then on end of file means it has gone."""
        with contextlib.suppress(OSError):
            self.errlog.close()

    async def aclose(self) -> None:
        self.release_write_end()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(OSError):
            self._read.close()

    def emit(self, raw: bytes) -> None:
        """Logs one line (redacted, cut, rate-limited)."""
        now = self.clock()
        if now - self._window_start >= WINDOW_S:
            if self._suppressed:
                log.warning("MCP server %s: suppressed %d stderr lines", self.server, self._suppressed)
            self._window_start, self._in_window, self._suppressed = now, 0, 0
        if self._in_window >= LINES_PER_WINDOW:
            self._suppressed += 1
            return
        self._in_window += 1
        text = redact_str(raw.decode("utf-8", "replace").rstrip("\r\n"))
        if len(text) > MAX_LINE_CHARS:
            text = text[: MAX_LINE_CHARS - 1] + "…"
        if text.strip():
            log.info("MCP server %s stderr: %s", self.server, text, extra={"mcp_server": self.server})

    async def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_READ_LIMIT)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), self._read)
        try:
            while True:
                try:
                    line = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        self.emit(exc.partial)
                    break
                except asyncio.LimitOverrunError as exc:
                    # A line longer than the buffer: logged in pieces (each cut to MAX_LINE_CHARS).
                    self.emit(await reader.readexactly(exc.consumed))
                    continue
                self.emit(line)
        finally:
            transport.close()
        self.on_eof()


class _RedactRecords(logging.Filter):
    """Redacts a record's message and replaces its traceback by the redacted last line of it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            message = f"{message}: {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        text = redact_str(message)
        record.msg = text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        return True


_SDK_FILTER = _RedactRecords()


def redact_sdk_logs() -> None:
    """Puts the redacting filter on every logger of the MCP SDK (filters do not inherit: each one, by name)."""
    names = [n for n in logging.Logger.manager.loggerDict if n == "mcp" or n.startswith(("mcp.", "mcp_types"))]
    for name in names:
        sdk_logger = logging.getLogger(name)
        if _SDK_FILTER not in sdk_logger.filters:
            sdk_logger.addFilter(_SDK_FILTER)
