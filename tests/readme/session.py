"""Runs a README's shell blocks in order as one bash session, as a reader would type them.

One `bash` process runs a script made of the blocks (skipped ones left out) under `set -e`, each between
two marker lines, so shell variables, `cd`, `source .venv/bin/activate` and background jobs (`agentmesh
up &`, `kill %1`) carry from one block to the next, and the first failing command stops the session at
its block. What differs from a reader's terminal, so that the test never collides with anything else:

- the services' ports: the test picks a free range and sets `AGENTMESH_SERVICES_<SVC>` (JSON) in the
  session's environment, and rewrites the well-known default ports in the blocks' text to the test's
  (`PORT_DEFAULTS`: gRPC 50051-50054, HTTP 50061-50064, plaintext health 51051-51054, `mcp serve`'s
  8765) where they are ports (after `host:` or `--port`), so `curl localhost:50061/...` reaches the
  test's dispatcher; the README itself is never edited;
- `grpcurl` is tests/readme/grpcurl.py (gRPC server reflection in Python), first on PATH;
- the span file is the test's (`AGENTMESH_TELEMETRY_SPAN_FILE`), no `AGENTMESH_*` variable of the
  caller's environment leaks in, and stdin is /dev/null.

At the end every process of the session's process group gets SIGTERM (`agentmesh up` stops its
services and its Redis), then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.readme.blocks import Block

HERE = Path(__file__).resolve().parent
SERVICES = ("dispatcher", "context", "tool", "provider")
PORT_DEFAULTS: dict[int, int] = {
    **{50051 + i: i for i in range(4)},  # gRPC
    **{50061 + i: 10 + i for i in range(4)},  # HTTP (/metrics)
    **{51051 + i: 20 + i for i in range(4)},  # plaintext health (TLS)
    8765: 30,  # agentmesh mcp serve --transport http
    8766: 31,  # "Your first agent": the stand-in HTTP API
}
"""Default port -> offset in the test's range."""
_PORT = re.compile(r"(?:(?<=:)|(?<=--port )|(?<=--port=))(" + "|".join(str(p) for p in PORT_DEFAULTS) + r")(?!\d)")
"""A default port where it is a port: after `host:` or `--port`."""
START, OK = "@@readme-block-start", "@@readme-block-ok"


def free_port_base(span: int = 40, low: int = 20000, high: int = 32000) -> int:
    """A base port whose next `span` ports are all free now (bind-tested), chosen from the pid; below
    Linux's ephemeral range (32768-60999), so no outgoing connection takes one meanwhile."""
    start = low + (os.getpid() * 97) % (high - low - span)
    for base in range(start, high - span, span):
        sockets = []
        try:
            for port in range(base, base + span):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError("no free port range")


def rewrite_ports(text: str, base: int) -> str:
    """The block with every well-known default port replaced by the test's."""
    return _PORT.sub(lambda match: str(base + PORT_DEFAULTS[int(match.group(1))]), text)


def service_environment(base: int) -> dict[str, str]:
    """`AGENTMESH_SERVICES_<SVC>` for every service on the test's ports."""
    env = {}
    for i, name in enumerate(SERVICES):
        endpoint = {"host": "127.0.0.1", "port": base + i, "http_port": base + 10 + i}
        env[f"AGENTMESH_SERVICES_{name.upper()}"] = json.dumps(endpoint)
    return env


def build_script(blocks: Sequence[Block], base: int) -> str:
    """One bash script: every block that runs, between its markers, ports rewritten."""
    parts = ["set -e"]
    for number, block in enumerate(blocks):
        if block.skip is not None:
            continue
        parts.append(f"printf '\\n{START} {number} line {block.line}\\n'")
        parts.append(rewrite_ports(block.text, base).rstrip("\n"))
        parts.append(f"printf '\\n{OK} {number}\\n'")
    return "\n".join(parts) + "\n"


@dataclass
class SessionResult:
    """What the session printed, block by block, and where it stopped."""

    returncode: int
    output: str
    outputs: dict[int, str] = field(default_factory=dict)
    """Block number -> what it printed."""
    succeeded: list[int] = field(default_factory=list)
    failed: int | None = None
    """The block that was running when the session stopped with an error."""


def split_output(output: str) -> tuple[dict[int, str], list[int], int | None]:
    """Per-block output, the blocks that ended, and the one that started without ending."""
    outputs: dict[int, str] = {}
    succeeded: list[int] = []
    current: int | None = None
    for line in output.splitlines():
        if line.startswith(START):
            current = int(line.split()[1])
            outputs[current] = ""
        elif line.startswith(OK):
            number = int(line.split()[1])
            succeeded.append(number)
            if outputs.get(number, "").endswith("\n\n"):  # the marker's own leading newline
                outputs[number] = outputs[number][:-1]
            current = None
        elif current is not None:
            outputs[current] += line + "\n"
    return outputs, succeeded, current


def grpcurl_shim(directory: Path) -> Path:
    """A directory holding `grpcurl`: tests/readme/grpcurl.py run by this Python."""
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "grpcurl"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "grpcurl.py"}" "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    return directory


def session_environment(base: int, work: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without AGENTMESH_*/virtualenv variables, plus the test's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMESH_") and k != "VIRTUAL_ENV"}
    venv_bin = str(Path(sys.executable).parent)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    env["PATH"] = os.pathsep.join([str(grpcurl_shim(work / "bin")), *path])
    env.update(service_environment(base))
    env["AGENTMESH_TELEMETRY_SPAN_FILE"] = str(work / "spans.jsonl")
    env.update(extra or {})
    return env


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, grace_s: float = 30.0) -> None:
    """SIGTERM the session's process group, wait for it to empty, SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def run_session(
    blocks: Sequence[Block], cwd: Path, work: Path, *, timeout_s: float, extra_env: Mapping[str, str] | None = None
) -> SessionResult:
    """Runs the blocks in `cwd` as one bash session; stops everything it started before returning."""
    work.mkdir(parents=True, exist_ok=True)
    base = free_port_base()
    script = work / "readme-session.sh"
    script.write_text(build_script(blocks, base), encoding="utf-8")
    log = work / "readme-session.log"
    # Output to a file, not a pipe: background jobs (`agentmesh up &`) keep their stdout open.
    with log.open("wb") as sink:
        process = subprocess.Popen(
            ["bash", str(script)],
            cwd=cwd,
            env=session_environment(base, work, extra_env),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            returncode = -1
        finally:
            stop_group(process.pid)
            process.wait()
    output = log.read_text(encoding="utf-8", errors="replace")
    outputs, succeeded, failed = split_output(output)
    return SessionResult(returncode, output, outputs, succeeded, failed)
