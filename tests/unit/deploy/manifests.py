"""Reads the deployment files the way their tools do, for the deploy tests (unit and e2e).

Commands, ports, probes and environment are always parsed from docker-compose.yml, deploy/k8s/ and
deploy/Dockerfile, never repeated in the tests, so what the tests run is what a container runs.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dockerfile  # type: ignore[import-not-found]  # no type information; the Go (BuildKit) parser
import yaml

from agentmesh.config import interpolate

REPO = Path(__file__).resolve().parents[3]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
K8S_DIR = REPO / "deploy" / "k8s"
SERVICES = ("dispatcher", "context", "tool", "provider")
"""agentmesh's four services by configuration key; the process is `python -m <key>_svc`."""


# --- docker-compose.yml ----------------------------------------------------------------------------


def load_compose() -> dict[str, Any]:
    """docker-compose.yml as Compose reads it (YAML merge keys resolved, `${...}` left as is)."""
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def agentmesh_compose_services(compose: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The compose services that run the agentmesh image, by configuration key."""
    found = {}
    for name, service in compose["services"].items():
        command = service.get("command") or []
        if len(command) == 3 and command[:2] == ["python", "-m"] and command[2].endswith("_svc"):
            found[command[2].removesuffix("_svc")] = service | {"compose_name": name}
    return found


def compose_environment(service: Mapping[str, Any], shell: Mapping[str, str]) -> dict[str, str]:
    """The environment Compose gives a container: `${VAR:-default}` interpolated from `shell`, and
    variables listed without a value passed through from `shell` (or left unset)."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, None) for item in raw)
    env: dict[str, str] = {}
    for key, value in raw.items():
        if value is None:
            if key in shell:
                env[key] = shell[key]
            continue
        env[key] = interpolate(str(value), shell, where=str(COMPOSE_FILE), path=f"environment.{key}")
    return env


def compose_mounts(service: Mapping[str, Any]) -> dict[str, Path]:
    """Container path -> host path of the service's bind mounts."""
    mounts = {}
    for volume in service.get("volumes") or []:
        source, target, *_ = volume.split(":")
        if source.startswith((".", "/")):
            mounts[target] = (REPO / source).resolve()
    return mounts


def duration_s(text: str) -> float:
    """A Compose duration ("15s", "1m30s", "500ms") in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    total, number, rest = 0.0, "", text.strip()
    while rest:
        if rest[0].isdigit() or rest[0] == ".":
            number, rest = number + rest[0], rest[1:]
            continue
        unit = next(u for u in ("ms", "us", "h", "m", "s") if rest.startswith(u))
        total, number, rest = total + float(number) * units[unit], "", rest[len(unit) :]
    assert not number, f"duration without unit: {text!r}"
    return total


# --- deploy/k8s ------------------------------------------------------------------------------------


def k8s_files() -> list[Path]:
    return sorted(path for path in K8S_DIR.glob("*.yaml") if path.name != "kustomization.yaml")


def k8s_documents() -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every resource of deploy/k8s, with the file it is in."""
    for path in k8s_files():
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is not None:
                yield path, doc


def k8s_resources(kind: str) -> dict[str, dict[str, Any]]:
    """Resources of one kind by metadata.name."""
    return {doc["metadata"]["name"]: doc for _, doc in k8s_documents() if doc["kind"] == kind}


def k8s_deployments() -> dict[str, dict[str, Any]]:
    """The agentmesh Deployments by configuration key (from the container's `args`)."""
    found = {}
    for deployment in k8s_resources("Deployment").values():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        args = container.get("args") or []
        assert len(args) == 3 and args[:2] == ["python", "-m"], f"unexpected args {args}"
        found[args[2].removesuffix("_svc")] = deployment
    return found


def k8s_env(deployment: Mapping[str, Any], secrets: Mapping[str, str]) -> dict[str, str]:
    """The environment a Deployment's container gets: envFrom ConfigMaps, then env (values, and
    secretKeyRef read from `secrets`, keyed "secret-name/key"; optional ones may be missing)."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    config_maps = k8s_resources("ConfigMap")
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        env.update(config_maps[source["configMapRef"]["name"]]["data"])
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = item["value"]
            continue
        ref = item["valueFrom"]["secretKeyRef"]
        key = f"{ref['name']}/{ref['key']}"
        if key in secrets:
            env[item["name"]] = secrets[key]
        else:
            assert ref.get("optional"), f"required secret {key} not provided"
    return env


# --- deploy/Dockerfile -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    cmd: str
    flags: tuple[str, ...]
    value: tuple[str, ...]
    json: bool
    stage: str


def dockerfile_instructions() -> list[Instruction]:
    """The Dockerfile as BuildKit's own parser reads it, each instruction with its stage name."""
    parsed = []
    stage = ""
    for command in dockerfile.parse_file(str(DOCKERFILE)):
        cmd = command.cmd.upper()
        if cmd == "FROM":
            value = command.value
            stage = value[2] if len(value) == 3 and value[1].upper() == "AS" else value[0]
        parsed.append(Instruction(cmd, tuple(command.flags), tuple(command.value), bool(command.json), stage))
    return parsed


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    last = max(i for i, ins in enumerate(instructions) if ins.cmd == "FROM")
    return instructions[last:]


def services_json(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The AGENTMESH_SERVICES section of an environment, parsed."""
    data = json.loads(env["AGENTMESH_SERVICES"])
    assert isinstance(data, dict)
    return data


def full_service_name(key: str) -> str:
    """The gRPC service a process serves (e.g. tool -> agentmesh.v1.ToolService), from the contracts."""
    module = importlib.import_module(f"agentmesh.v1.{key}_pb2")
    (service,) = module.DESCRIPTOR.services_by_name.values()
    return str(service.full_name)
