"""Helpers for tests that run agentmesh as separate processes."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from agentmesh.cli.supervisor import health_status
from agentmesh.dev.localredis import LocalRedis
from tests.rediscluster import cluster_mode, empty

REPO = Path(__file__).resolve().parents[2]
AUTH_KEY = "e2e-test-key-" + "z" * 32
BASE_CONFIG = REPO / "agentmesh.yaml"
DEMO_CONFIG = REPO / "agentmesh.demo.yaml"
WITH_DEMO = os.pathsep.join(str(path) for path in (BASE_CONFIG, DEMO_CONFIG))
"""AGENTMESH_CONFIG for processes that need the demo's ops tools and agent (the overlay on the base)."""


def service_json(ports: dict[str, int], http_ports: dict[str, int] | None = None) -> str:
    """AGENTMESH_SERVICES for services on 127.0.0.1 at `ports`, with their HTTP listeners at `http_ports`
    (0, off, by default: agentmesh.yaml's fixed HTTP ports would clash between tests)."""
    http = http_ports or {}
    sections = {name: {"host": "127.0.0.1", "port": p, "http_port": http.get(name, 0)} for name, p in ports.items()}
    return json.dumps(sections)


# Ports for servers a test starts later come from below the kernel's ephemeral range (32768-60999 by
# default), one slice per xdist worker: a port bound to 0 (a fake upstream, a client's side of a connection)
# never takes one, and two workers never hand out the same one. A port from bind(0) is only free when asked:
# the parallel worker's next bind(0) may be given it before our server starts.
_PORT_LOW, _PORT_HIGH = 20000, 32000


def _port_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    width = (_PORT_HIGH - _PORT_LOW) // count
    return range(_PORT_LOW + index * width, _PORT_LOW + (index + 1) * width)


_SLICE = _port_slice()
_next_port = itertools.cycle(itertools.chain(_SLICE[random.randrange(len(_SLICE)) :], _SLICE))


def free_port() -> int:
    """A port of this worker's slice that nothing holds now (handed out in turn, so not twice in a row)."""
    for _ in range(len(_SLICE)):
        port = next(_next_port)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {_SLICE}")


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A port nothing listens on for as long as the block runs: the socket stays bound, never listening, so a
    connection is refused and no other test (another xdist worker) can start a server on it. A port from
    `free_port()` is only free when asked: a parallel test may take it before the connection is tried."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def free_ports(names: Iterable[str]) -> dict[str, int]:
    """A free port per name, all different (`free_port` hands its slice out in turn)."""
    return {name: free_port() for name in names}


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0, interval_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout_s}s")
        time.sleep(interval_s)


def wait_serving(target: str, timeout_s: float = 30.0) -> None:
    wait_for(lambda: health_status(target, timeout_s=1.0) == "SERVING", timeout_s)


def children_of(pid: int) -> list[int]:
    """Direct children of a process, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may contain spaces; fields after the closing paren are fixed.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def process_env(tmp_path: Path) -> dict[str, str]:
    """Environment for agentmesh processes: a private key, spans and logs in tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "OTEL_"))}
    env.update(
        {
            "AGENTMESH_AUTH_KEY": AUTH_KEY,
            "AGENTMESH_TELEMETRY_SPAN_FILE": str(tmp_path / "spans.jsonl"),
            "AGENTMESH_CONFIG": str(BASE_CONFIG),
            # The checkout's agentmesh_client too (`agentmesh run` streams with it), as pytest's pythonpath.
            "PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "clients" / "python"))),
        }
    )
    return env


@pytest.fixture
def e2e_redis(request: pytest.FixtureRequest) -> Iterator[LocalRedis]:
    """A dedicated redis-server for one multi-process test; with `--redis=cluster`, the session's
    Redis Cluster, emptied (its nodes are not to be killed)."""
    if cluster_mode(request.config):
        cluster = request.getfixturevalue("redis_cluster")
        empty(cluster)
        yield cluster
        return
    with LocalRedis() as server:
        yield server


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen([sys.executable, *args], env=env, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT)
