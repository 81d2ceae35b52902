"""The container setup without a container engine: the image's install and Compose's processes.

`install_image` builds what deploy/Dockerfile builds: the build stage's COPY instructions (parsed)
into a fresh build context, its stub generation, and a non-editable `pip install --no-deps` into a
new virtualenv (the pinned dependencies come from the test environment, one .pth line away), so a
module or data file missing from the package fails here as it would in the image.

`start_stack` runs docker-compose.yml's four services with their exact commands and environment,
changing only what only Docker provides: container host names become 127.0.0.1, ports become free
ones (the same remapping in every place a port appears), the mounted config is read from its host
path, and OTLP export is off (there is no Jaeger; spans go to a file).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from agentmesh.cli.supervisor import health_status
from tests.e2e.conftest import free_ports, wait_for
from tests.unit.deploy.manifests import (
    REPO,
    SERVICES,
    agentmesh_compose_services,
    compose_config_files,
    compose_environment,
    dockerfile_instructions,
    load_compose,
)


@dataclass(frozen=True)
class Image:
    """An installed image: its virtualenv's bin directory stands for /opt/agentmesh/bin."""

    venv: Path
    workdir: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def argv(self, command: list[str]) -> list[str]:
        """An image command with its executable resolved in the image's PATH."""
        executable = self.bin / command[0]
        assert executable.exists(), f"{command[0]} is not on the image's PATH"
        return [str(executable), *command[1:]]


def _run(args: list[str], cwd: Path | None = None) -> None:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}{result.stderr}"


def install_image(root: Path) -> Image:
    """Builds the image's virtualenv under `root` (see the module docstring)."""
    context = root / "src"
    instructions = dockerfile_instructions()
    for ins in instructions:
        if ins.stage != "build" or ins.cmd != "COPY" or ins.flags:
            continue
        *sources, dest = ins.value
        for source in sources:
            target = context / dest if not dest.endswith("/") else context / dest / Path(source).name
            target.parent.mkdir(parents=True, exist_ok=True)
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(REPO / source, target)
    runs = " && ".join(i.value[0] for i in instructions if i.stage == "build" and i.cmd == "RUN")
    assert "python -m agentmesh.dev.codegen agentmesh/v1" in runs
    _run([sys.executable, "-m", "agentmesh.dev.codegen", "agentmesh/v1"], cwd=context)
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    site = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    # The pinned dependencies: the test environment's site-packages as a plain path entry (its own
    # .pth files, among them the editable agentmesh, are not processed from there).
    (site / "agentmesh-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    _run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet", "--no-deps",
         "--no-build-isolation", "--no-index", str(context)],
    )  # fmt: skip
    workdir = root / "app"
    (workdir / "var").mkdir(parents=True)
    return Image(venv=venv, workdir=workdir)


@dataclass
class Stack:
    """The four services started as docker-compose.yml starts them."""

    image: Image
    ports: dict[str, int]
    http_ports: dict[str, int]
    envs: dict[str, dict[str, str]]
    logs: dict[str, Path]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    compose: dict[str, dict[str, Any]] = field(default_factory=dict)

    def target(self, key: str) -> str:
        return f"127.0.0.1:{self.ports[key]}"

    def remap(self, text: str) -> str:
        """A string of docker-compose.yml with every service port replaced by its free port."""
        moved = {}
        for key, service in self.compose.items():
            section = json.loads(service["environment"]["AGENTMESH_SERVICES"])[key]
            moved[str(section["port"])] = str(self.ports[key])
            moved[str(section["http_port"])] = str(self.http_ports[key])
        return re.sub(r":(\d+)\b", lambda m: ":" + moved.get(m.group(1), m.group(1)), text)

    def health_command(self, key: str) -> list[str]:
        test = self.compose[key]["healthcheck"]["test"]
        assert test[0] == "CMD"
        return self.image.argv([self.remap(part) for part in test[1:]])

    def log(self, key: str) -> str:
        return self.logs[key].read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout_s: float) -> dict[str, int | None]:
        """SIGTERM every service, as `docker compose stop` does; SIGKILL after `timeout_s`."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for key, process in self.processes.items():
            try:
                codes[key] = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                codes[key] = None
        return codes


def _start_waves(services: Mapping[str, dict[str, Any]]) -> list[list[str]]:
    """Services in the order `depends_on` allows, as waves that Compose starts together."""
    by_name = {service["compose_name"]: key for key, service in services.items()}
    started: list[str] = []
    waves = []
    while len(started) < len(services):
        ready = [
            key
            for key, service in services.items()
            if key not in started and all(by_name.get(dep) in (None, *started) for dep in service.get("depends_on", {}))
        ]
        assert ready, "depends_on has a cycle"
        waves.append(sorted(ready))
        started.extend(ready)
    return waves


def container_env(
    service: Mapping[str, Any],
    shell: Mapping[str, str],
    ports: Mapping[str, int],
    http_ports: Mapping[str, int],
    redis_url: str,
) -> dict[str, str]:
    """The compose environment of `service`, with only Docker's own facts replaced."""
    env = compose_environment(service, shell)
    sections = json.loads(env["AGENTMESH_SERVICES"])
    for key, section in sections.items():
        section["host"] = "127.0.0.1"
        section["port"] = ports[key]
        section["http_port"] = http_ports[key]
        section["target"] = f"127.0.0.1:{ports[key]}"
    env["AGENTMESH_SERVICES"] = json.dumps(sections)
    assert urlparse(env["AGENTMESH_REDIS_URL"]).hostname == "redis"
    env["AGENTMESH_REDIS_URL"] = redis_url
    env["AGENTMESH_CONFIG"] = os.pathsep.join(str(path) for path in compose_config_files(service, env))
    assert env.pop("OTEL_EXPORTER_OTLP_ENDPOINT").startswith("http://jaeger:")
    return env


def start_stack(
    image: Image,
    shell: Mapping[str, str],
    redis_url: str,
    logs: Path,
    *,
    extra_env: Mapping[str, str] | None = None,
    ready_s: float = 90,
) -> Stack:
    """Starts the services in depends_on order, each once the ones it depends on are SERVING.

    `extra_env` is a test's own addition to every container's environment (not from the compose
    file), e.g. an `AGENTMESH_AGENTS` override; the compose tests pass none.
    """
    services = agentmesh_compose_services(load_compose())
    assert sorted(services) == sorted(SERVICES)
    every = free_ports([*services, *(f"{key}-http" for key in services)])
    ports = {key: every[key] for key in services}
    http_ports = {key: every[f"{key}-http"] for key in services}
    # Docker gives a container only its own environment; keep just what a process needs to run.
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "OTEL_"))}
    base.update(shell)
    base.pop("PYTHONPATH", None)
    envs = {
        key: base | container_env(service, shell, ports, http_ports, redis_url) | dict(extra_env or {})
        for key, service in services.items()
    }
    stack = Stack(image=image, ports=ports, http_ports=http_ports, envs=envs, logs={}, compose=services)
    try:
        for wave in _start_waves(services):
            for key in wave:
                stack.logs[key] = logs / f"{key}.log"
                with stack.logs[key].open("wb") as out:
                    stack.processes[key] = subprocess.Popen(
                        image.argv(services[key]["command"]),
                        env=envs[key],
                        cwd=image.workdir,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
            wait_for(lambda w=wave: all(_serving_or_exited(stack, k) for k in w), timeout_s=ready_s, interval_s=0.2)  # type: ignore[misc]
            for key in wave:
                code = stack.processes[key].poll()
                assert code is None, f"{key}_svc exited with {code}:\n{stack.log(key)}"
    except BaseException:
        stack.stop(timeout_s=5)
        raise
    return stack


def _serving_or_exited(stack: Stack, key: str) -> bool:
    return stack.processes[key].poll() is not None or health_status(stack.target(key), timeout_s=1.0) == "SERVING"
