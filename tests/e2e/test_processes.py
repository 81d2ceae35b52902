"""The services as real processes: `agentmesh up` / `status`, reflection, SIGTERM drain, no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh.cli.demo import list_services
from agentmesh.cli.supervisor import health_status
from agentmesh.dev.localredis import LocalRedis
from tests.e2e.conftest import (
    REPO,
    alive,
    children_of,
    free_port,
    free_ports,
    service_json,
    spawn,
    wait_for,
    wait_serving,
)

pytestmark = pytest.mark.e2e

FULL_NAMES = {
    "dispatcher": "agentmesh.v1.DispatcherService",
    "context": "agentmesh.v1.ContextService",
    "tool": "agentmesh.v1.ToolService",
    "provider": "agentmesh.v1.ProviderService",
}


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentmesh.cli", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def start_up(env: dict[str, str], tmp_path: Path) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    """`agentmesh up` on ports of its own (set in `env`, where `status` reads them too): on the default ones a
    test on the other xdist worker, or anything else on this machine, could already be serving."""
    ports = free_ports(FULL_NAMES)
    env["AGENTMESH_SERVICES"] = service_json(ports)
    env["TMPDIR"] = str(tmp_path)  # its state file (named by its port) and its Redis's directory: not /tmp
    up = spawn(["-m", "agentmesh.cli", "up"], env, tmp_path / "up.log")
    try:
        for port in ports.values():
            wait_serving(f"127.0.0.1:{port}", timeout_s=60)
    except TimeoutError:
        up.kill()
        pytest.fail("agentmesh up did not serve:\n" + (tmp_path / "up.log").read_text())
    return up, ports


def test_up_status_reflection_and_clean_stop(process_env: dict[str, str], tmp_path: Path) -> None:
    up, ports = start_up(process_env, tmp_path)
    try:
        children = children_of(up.pid)
        # four services and the local redis-server (AGENTMESH_REDIS_URL is unset)
        assert len(children) == 5, (tmp_path / "up.log").read_text()

        status = run_cli(["status"], process_env)
        assert status.returncode == 0, status.stdout + status.stderr
        lines = status.stdout.strip().splitlines()
        assert len(lines) == 4
        for name, port in ports.items():
            line = next(line for line in lines if line.startswith(f"{name}_svc"))
            assert f"127.0.0.1:{port}" in line and line.endswith("SERVING")

        for name, port in ports.items():
            assert FULL_NAMES[name] in list_services(f"127.0.0.1:{port}")
    finally:
        up.send_signal(signal.SIGTERM)
        code = up.wait(timeout=60)
    assert code == 0, (tmp_path / "up.log").read_text()
    wait_for(lambda: not any(alive(pid) for pid in children), timeout_s=10)
    log = (tmp_path / "up.log").read_text()
    assert "stopped: " in log
    for name in ports:
        assert f"{name}_svc=0" in log
    # Nothing answers any more.
    assert run_cli(["status"], process_env).returncode == 1


def test_killed_supervisor_leaves_no_children(process_env: dict[str, str], tmp_path: Path) -> None:
    up, _ = start_up(process_env, tmp_path)
    children = children_of(up.pid)
    services = [pid for pid in children if b"_svc" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(services) == 4
    up.kill()  # SIGKILL: no chance to clean up; the services must notice on their own
    up.wait(timeout=10)
    wait_for(lambda: not any(alive(pid) for pid in services), timeout_s=30)
    # The local redis-server, orphaned by SIGKILL, is reaped by its own parent-death check
    # or killed here so the machine stays clean.
    for pid in children:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_sigterm_lets_a_slow_call_finish(process_env: dict[str, str], tmp_path: Path, e2e_redis: LocalRedis) -> None:
    port = free_port()
    env = {
        **process_env,
        "AGENTMESH_REDIS_URL": e2e_redis.url,
        "AGENTMESH_SERVICES": f'{{"tool": {{"port": {port}, "http_port": 0}}}}',
    }
    service = spawn(["-m", "tests.e2e.slow_service"], env, tmp_path / "slow.log")
    target = f"127.0.0.1:{port}"
    try:
        wait_serving(target)
        from agentmesh.authenticator import Authenticator
        from agentmesh.config import load_settings

        token = Authenticator(load_settings(overrides={"auth": {"key": env["AGENTMESH_AUTH_KEY"]}}).auth).mint(
            subject="tester", roles=["agent"]
        )
        result: dict[str, object] = {}

        def slow_call() -> None:
            with grpc.insecure_channel(target) as channel:
                wait = channel.unary_unary("/test.Slow/Wait")  # type: ignore[call-arg]
                try:
                    result["reply"] = wait(b"2.0", metadata=(("x-agentmesh-identity", token),), timeout=30)
                except grpc.RpcError as exc:
                    result["error"] = exc

        caller = threading.Thread(target=slow_call)
        caller.start()
        time.sleep(0.5)  # the call is in flight (it sleeps 2 s)
        service.send_signal(signal.SIGTERM)
        # Health flips to NOT_SERVING while the call drains.
        wait_for(lambda: health_status(target, timeout_s=1.0) == "NOT_SERVING", timeout_s=5, interval_s=0.02)
        caller.join(timeout=30)
        assert result.get("reply") == b"done", result
        assert service.wait(timeout=30) == 0, (tmp_path / "slow.log").read_text()
    finally:
        if service.poll() is None:
            service.kill()


def test_service_refuses_an_evicting_redis(process_env: dict[str, str], tmp_path: Path) -> None:
    with LocalRedis(extra_args=["--maxmemory-policy", "allkeys-lru"]) as evicting:
        env = {**process_env, "AGENTMESH_REDIS_URL": evicting.url}
        result = subprocess.run(
            [sys.executable, "-m", "context_svc"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert "allkeys-lru" in result.stderr and "noeviction" in result.stderr
    assert "Traceback" not in result.stderr


def test_health_watch_sees_not_serving(process_env: dict[str, str], tmp_path: Path, e2e_redis: LocalRedis) -> None:
    """A balancer watching health sees NOT_SERVING before the process goes away."""
    port = free_port()
    env = {
        **process_env,
        "AGENTMESH_REDIS_URL": e2e_redis.url,
        "AGENTMESH_SERVICES": f'{{"tool": {{"port": {port}, "http_port": 0}}}}',
    }
    service = spawn(["-m", "tool_svc"], env, tmp_path / "tool.log")
    try:
        wait_serving(f"127.0.0.1:{port}")
        seen: list[int] = []
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stream = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service="agentmesh.v1.ToolService"), timeout=30
            )
            for reply in stream:
                seen.append(reply.status)
                if len(seen) == 1:
                    service.send_signal(signal.SIGTERM)
                if reply.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                    break
        assert seen[0] == health_pb2.HealthCheckResponse.SERVING
        assert seen[-1] == health_pb2.HealthCheckResponse.NOT_SERVING
        assert service.wait(timeout=30) == 0
    finally:
        if service.poll() is None:
            service.kill()


def test_a_taken_port_is_a_clear_error(process_env: dict[str, str], e2e_redis: LocalRedis) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {
            **process_env,
            "AGENTMESH_REDIS_URL": e2e_redis.url,
            "AGENTMESH_SERVICES": f'{{"tool": {{"port": {port}, "http_port": 0}}}}',
        }
        result = subprocess.run(
            [sys.executable, "-m", "tool_svc"], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 1
    assert f"cannot bind 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_second_copy_on_a_busy_port_fails_naming_the_port(
    process_env: dict[str, str], e2e_redis: LocalRedis, tmp_path: Path
) -> None:
    """grpc binds with SO_REUSEPORT by default, so a second copy of a service took the same port and half its
    connections; with `grpc.so_reuseport` 0 (issue 42) the second start fails, naming the port, and the
    first keeps serving."""
    port = free_port()
    env = {
        **process_env,
        "AGENTMESH_REDIS_URL": e2e_redis.url,
        "AGENTMESH_SERVICES": f'{{"tool": {{"port": {port}, "http_port": 0}}}}',
    }
    first = spawn(["-m", "tool_svc"], env, tmp_path / "first.log")
    try:
        wait_for(lambda: health_status(f"127.0.0.1:{port}", timeout_s=1.0) == "SERVING", timeout_s=60)
        second = subprocess.run(
            [sys.executable, "-m", "tool_svc"], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert second.returncode == 1
        assert f"port {port} is in use" in second.stderr and "Traceback" not in second.stderr
        assert health_status(f"127.0.0.1:{port}", timeout_s=1.0) == "SERVING"
    finally:
        first.terminate()
        first.wait(timeout=30)
