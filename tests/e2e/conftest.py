"""Helpers for tests that run agentmesh as separate processes."""

from __future__ import annotations

import json
import os
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_ports(names: Iterable[str]) -> dict[str, int]:
    """A free port per name, all different: the sockets stay bound until every port is chosen (one at a
    time, the kernel may hand the same free port out twice)."""
    sockets = []
    try:
        for _ in names:
            sock = socket.socket()
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
        return {name: int(sock.getsockname()[1]) for name, sock in zip(names, sockets, strict=True)}
    finally:
        for sock in sockets:
            sock.close()


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
