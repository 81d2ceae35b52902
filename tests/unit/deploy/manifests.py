"""Reads the deployment files the way their tools do, for the deploy tests (unit and e2e).

Commands, ports, probes and environment are always parsed from docker-compose.yml, deploy/k8s/ (as
`kubectl kustomize` renders it) and deploy/Dockerfile, never repeated in the tests, so what the tests
run is what a container runs.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import dockerfile  # type: ignore[import-not-found]  # no type information; the Go (BuildKit) parser
import yaml

from agentmesh.config import Settings

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


_COMPOSE_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-+?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def compose_interpolate(text: str, shell: Mapping[str, str]) -> str:
    """Compose's interpolation of `text` from `shell`: `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`,
    `${VAR:+alternative}`, `${VAR+alternative}`, `$$` for a literal `$` (`:?` / `?` fail when unset)."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        operator, word = match.group(2), match.group(3) or ""
        value = shell.get(name)
        if operator in (":-", "-"):
            use_default = value is None or (operator == ":-" and value == "")
            return word if use_default else str(value)
        if operator in (":+", "+"):
            present = value is not None and (operator == "+" or value != "")
            return word if present else ""
        if operator in (":?", "?"):
            assert value is not None and (operator == "?" or value), f"{name} is required: {word}"
        return value or ""

    return _COMPOSE_VARIABLE.sub(substitute, text)


def compose_environment(service: Mapping[str, Any], shell: Mapping[str, str]) -> dict[str, str]:
    """The environment Compose gives a container: values interpolated from `shell`, and variables listed
    without a value passed through from `shell` (or left unset)."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, None) for item in raw)
    env: dict[str, str] = {}
    for key, value in raw.items():
        if value is None:
            if key in shell:
                env[key] = shell[key]
            continue
        env[key] = compose_interpolate(str(value), shell)
    return env


def compose_config_files(service: Mapping[str, Any], env: Mapping[str, str]) -> list[Path]:
    """The host files a container's AGENTMESH_CONFIG names (a list joined by ":"), through its mounts."""
    mounts = compose_mounts(service)
    return [mounts[part] for part in env["AGENTMESH_CONFIG"].split(":")]


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

K8S_BASE = K8S_DIR / "base"
K8S_OVERLAYS = {"dev": K8S_DIR / "overlays" / "dev", "prod": K8S_DIR / "overlays" / "prod"}


def kubectl() -> str:
    """The kubectl binary (its built-in kustomize renders the manifests); a missing one fails the test."""
    found = shutil.which("kubectl")
    if found is None:
        raise AssertionError(
            "kubectl not found on PATH: the deploy tests render deploy/k8s with `kubectl kustomize` "
            "(kubectl 1.27 or newer; e.g. `apt-get install kubectl` from the Kubernetes apt repository)"
        )
    return found


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize <directory>`: what `kubectl apply -k` would apply, as documents (fresh copies;
    the repository's trees are rendered once per test session)."""
    resolved = directory.resolve()
    render = _rendered if resolved.is_relative_to(REPO) else _rendered.__wrapped__
    return copy.deepcopy(list(render(str(resolved))))


@functools.cache
def _rendered(directory: str) -> tuple[dict[str, Any], ...]:
    result = subprocess.run(
        [kubectl(), "kustomize", directory], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc is not None)


def k8s_files() -> list[Path]:
    """The base's hand-written manifests (the resources its kustomization lists)."""
    return sorted(path for path in K8S_BASE.glob("*.yaml") if path.name != "kustomization.yaml")


def k8s_documents(directory: Path = K8S_BASE) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every resource kustomize renders from `directory` (the base by default), with its kind/name."""
    for doc in kustomize(directory):
        yield f"{doc['kind']}/{doc['metadata']['name']}", doc


def k8s_resources(kind: str, directory: Path = K8S_BASE) -> dict[str, dict[str, Any]]:
    """Rendered resources of one kind by metadata.name (generated ConfigMaps carry a content hash)."""
    return {doc["metadata"]["name"]: doc for _, doc in k8s_documents(directory) if doc["kind"] == kind}


def config_map(name: str, directory: Path = K8S_BASE) -> dict[str, Any]:
    """The generated ConfigMap `name` (rendered as `<name>-<hash>`)."""
    found = [
        doc
        for found_name, doc in k8s_resources("ConfigMap", directory).items()
        if found_name == name or found_name.rsplit("-", 1)[0] == name
    ]
    assert len(found) == 1, f"{len(found)} ConfigMaps named {name}[-hash]"
    return found[0]


def k8s_deployments(directory: Path = K8S_BASE) -> dict[str, dict[str, Any]]:
    """The agentmesh Deployments by configuration key (from the container's `args`)."""
    found = {}
    for deployment in k8s_resources("Deployment", directory).values():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        args = container.get("args") or []
        assert len(args) == 3 and args[:2] == ["python", "-m"], f"unexpected args {args}"
        found[args[2].removesuffix("_svc")] = deployment
    return found


def k8s_env(deployment: Mapping[str, Any], secrets: Mapping[str, str], directory: Path = K8S_BASE) -> dict[str, str]:
    """The environment a Deployment's container gets: envFrom ConfigMaps, then env (values, and
    secretKeyRef read from `secrets`, keyed "secret-name/key"; optional ones may be missing)."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    config_maps = k8s_resources("ConfigMap", directory)
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


def container_port(deployment: Mapping[str, Any], name: str) -> int:
    """The container port named `name` (grpc, http-metrics)."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return int(port)


# --- what a production configuration must not hold --------------------------------------------------

_LOCAL_HOSTS = ("localhost", "127.", "0.0.0.0", "[::1]", "::1", "host.docker.internal")


def demo_findings(settings: Settings) -> list[str]:
    """Why a configuration is not production-safe: a `run_shell` tool, a tool or an allowlist entry
    pointing at this host (the demo's fake ops API), an agent offered `run_shell`. Empty: safe."""
    found = []
    for tool in settings.tools.registry:
        host = urlparse(tool.endpoint_url).hostname or ""
        if tool.name == "run_shell":
            found.append("tool run_shell")
        if tool.endpoint_url and (host.startswith(_LOCAL_HOSTS) or host in _LOCAL_HOSTS):
            found.append(f"tool {tool.name} -> {tool.endpoint_url}")
    for entry in settings.tools.http_allowlist:
        host = urlparse(entry).hostname or ""
        if host.startswith(_LOCAL_HOSTS) or host in _LOCAL_HOSTS:
            found.append(f"http_allowlist {entry}")
    for agent in settings.agents:
        if "run_shell" in agent.tools:
            found.append(f"agent {agent.id} offered run_shell")
    return found


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


# --- deploy/grafana --------------------------------------------------------------------------------

DASHBOARD = REPO / "deploy" / "grafana" / "agentmesh.json"

_PROMQL_KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
    }
)


def dashboard_queries(path: Path = DASHBOARD) -> list[str]:
    """Every PromQL expression of a Grafana dashboard: panel targets (rows' panels too) and query variables."""
    data = json.loads(path.read_text(encoding="utf-8"))
    queries = []

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for item in items:
            yield item
            yield from panels(item.get("panels") or [])

    for panel in panels(data.get("panels") or []):
        queries += [target["expr"] for target in panel.get("targets") or [] if target.get("expr")]
    for variable in data.get("templating", {}).get("list", []):
        query = variable.get("query")
        if variable.get("type") == "query":
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana `label_values(metric, label)`) reads."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, regexes)
    text = re.sub(r"\{[^{}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors ($__rate_interval, 5m)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    label_values = re.match(r"\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,", expr)
    if label_values:
        return {label_values.group(1)}
    names = set()
    for match in re.finditer(r"(?<![\w$.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _PROMQL_KEYWORDS:
            continue  # a function or an aggregation, or a keyword
        names.add(name)
    return names
