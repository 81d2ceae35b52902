"""The image's exact commands run as processes, since no Docker engine exists here: the services as
docker-compose.yml and deploy/k8s start them, their health checks, and the image's offline checks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from agentmesh.cli.probe import probe
from agentmesh.dev.localredis import LocalRedis
from tests.e2e.deploy.stack import Image, start_stack
from tests.unit.deploy.manifests import (
    SERVICES,
    dockerfile_instructions,
    duration_s,
    final_stage,
    full_service_name,
    k8s_deployments,
)

pytestmark = pytest.mark.e2e


def test_services_serve_and_pass_compose_and_k8s_health_checks(
    image: Image, shell: dict[str, str], e2e_redis: LocalRedis, tmp_path: Path
) -> None:
    stack = start_stack(image, shell, e2e_redis.url, tmp_path)
    stopped: dict[str, int | None] = {}
    try:
        for key in SERVICES:
            # Docker runs the CMD form of the health check inside the container, with its environment.
            result = subprocess.run(
                stack.health_command(key),
                env=stack.envs[key],
                cwd=image.workdir,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 0, result.stderr + stack.log(key)
            assert result.stdout.strip() == f"SERVING: {stack.target(key)} service {full_service_name(key)}"
            # The image serves /metrics on the HTTP listener compose publishes (uvicorn, prometheus_client).
            scrape = httpx.get(f"http://127.0.0.1:{stack.http_ports[key]}/metrics", timeout=10)
            assert scrape.status_code == 200 and "target_info" in scrape.text, stack.log(key)
        for key, deployment in k8s_deployments().items():
            (container,) = deployment["spec"]["template"]["spec"]["containers"]
            assert container["args"] == stack.compose[key]["command"], "k8s runs what compose runs"
            for name in ("startupProbe", "readinessProbe", "livenessProbe"):
                # What the kubelet's native gRPC probe asks: Health/Check(service) on the port.
                spec = container[name]["grpc"]
                # The probes call the plaintext health port (server.health_port: in the cluster the
                # service's own port requires a client certificate), where the same Health servicer
                # answers; compose runs without mTLS, so its stack answers on the service's port.
                health_ports = [p["containerPort"] for p in container["ports"] if p["name"] == "grpc-health"]
                assert spec["port"] == health_ports[0], f"{key}: {name} port"
                target = stack.target(key)
                answer = probe(
                    target, spec.get("service", ""), timeout_s=float(container[name].get("timeoutSeconds", 1)) + 4
                )
                assert answer.ok, f"{key} {name}: {answer.line()}"
    finally:
        grace = max(duration_s(stack.compose[key]["stop_grace_period"]) for key in SERVICES)
        stopped = stack.stop(timeout_s=grace)
    # `docker compose stop`: SIGTERM, then the drain, well within stop_grace_period.
    for key, code in stopped.items():
        assert code == 0, f"{key}_svc did not drain cleanly ({code}):\n{stack.log(key)}"
    # A stopped service fails its health check with a typed reason, exit 1 (never Docker's reserved 2).
    result = subprocess.run(
        stack.health_command("tool"),
        env=stack.envs["tool"],
        cwd=image.workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith(f"UNREACHABLE: {stack.target('tool')}"), result.stderr


def _can_isolate_network() -> bool:
    unshare = shutil.which("unshare")
    return unshare is not None and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0


def test_runtime_checks_pass_without_any_network(image: Image) -> None:
    """The runtime stage's `RUN --network=none` lines, run literally in a network namespace with
    nothing but loopback (down): the tokenizer data and every service are inside the image."""
    checks = [
        i.value[0] for i in final_stage(dockerfile_instructions()) if i.cmd == "RUN" and "--network=none" in i.flags
    ]
    assert checks
    if not _can_isolate_network():
        pytest.skip("`unshare -n` is not permitted here: cannot take the network away")
    env = {"PATH": f"{image.bin}:/usr/bin:/bin", "HOME": str(image.workdir), "PYTHONDONTWRITEBYTECODE": "1"}
    for command in checks:
        result = subprocess.run(
            ["unshare", "-n", "bash", "-c", command],
            env=env,
            cwd=image.workdir,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, f"{command}\n{result.stdout}{result.stderr}"


MODULES = ("agentmesh", "agentmesh.v1.tool_pb2", *(f"{key}_svc" for key in SERVICES))


def test_image_installs_agentmesh_itself_not_the_source_tree(image: Image) -> None:
    code = f"import {', '.join(MODULES)}; print({', '.join(m + '.__file__' for m in MODULES)})"
    result = subprocess.run(
        [str(image.bin / "python"), "-c", code],
        cwd=image.workdir,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": f"{image.bin}:/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    for path in result.stdout.split():
        assert Path(path).is_relative_to(image.venv), path
