"""buf.gen.yaml: local plugins only, reproducible output, the committed Python stubs, every language's
options, and Java stubs that compile and run against Debian's protobuf and grpc-java jars.

(The Go and TypeScript stubs are built and run by tests/e2e/deploy/test_example_clients.py.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from agentmesh.dev.codegen import GENERATED_SUFFIXES
from agentmesh.v1 import common_pb2, context_pb2, dispatcher_pb2, provider_pb2, tool_pb2
from tests.codegen import BUILD_CLIENTS, INSTALL_TOOLCHAINS, ROOT, FreshTree, buf_generate, tree_files

TEMPLATE = ROOT / "buf.gen.yaml"
CONTRACTS = ("common", "context", "dispatcher", "provider", "tool")
SERVICES = ("context", "dispatcher", "provider", "tool")
# The jars the probe runs against (Debian's /usr/share/java): the stubs' compile classpath plus grpc's own.
JAVA_RUNTIME = (
    "protobuf",
    "grpc-api",
    "grpc-stub",
    "grpc-protobuf",
    "grpc-protobuf-lite",
    "grpc-context",
    "guava",
    "proto-google-common-protos",
)


def generated(root: Path) -> dict[str, bytes]:
    """What buf generate wrote under `root`: the Python package and gen/ (not the copied examples)."""
    files = tree_files(root)
    return {path: data for path, data in files.items() if path.startswith(("gen/", "agentmesh/"))}


def test_the_template_uses_local_plugins_only() -> None:
    template = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    assert template["version"] == "v2"
    assert "managed" not in template, "the protos' own options name the generated code"
    for plugin in template["plugins"]:
        kinds = {"local", "protoc_builtin", "remote"} & set(plugin)
        assert kinds in ({"local"}, {"protoc_builtin"}), f"{plugin}: only local plugins (no schema registry)"
    assert [i for i in template["inputs"] if set(i) - {"directory", "paths"}] == []


def test_buf_generate_is_reproducible(fresh_clients: FreshTree, tmp_path: Path) -> None:
    buf_generate(tmp_path)
    first, second = generated(fresh_clients.root), generated(tmp_path)
    assert sorted(first) == sorted(second)
    differ = [path for path in first if first[path] != second[path]]
    assert not differ, f"two runs of buf generate differ in {differ}"


def test_every_language_is_generated(fresh_clients: FreshTree) -> None:
    files = generated(fresh_clients.root)
    for stem in CONTRACTS:
        for path in (
            f"agentmesh/v1/{stem}_pb2.py",
            f"agentmesh/v1/{stem}_pb2.pyi",
            f"gen/go/agentmesh/v1/{stem}.pb.go",
            f"gen/ts/agentmesh/v1/{stem}_pb.ts",
            f"gen/java/com/agentmesh/v1/{stem.capitalize()}Proto.java",
        ):
            assert path in files, f"{path} was not generated"
    for stem in SERVICES:
        service = f"{stem.capitalize()}Service"
        assert f"gen/go/agentmesh/v1/{stem}_grpc.pb.go" in files
        assert f"gen/java/com/agentmesh/v1/{service}Grpc.java" in files
        assert f"export const {service}: GenService<" in files[f"gen/ts/agentmesh/v1/{stem}_pb.ts"].decode()
    # java_multiple_files: one top-level class per message, not nested in the outer class.
    assert "package com.agentmesh.v1;" in files["gen/java/com/agentmesh/v1/ErrorDetail.java"].decode()
    assert "package agentmeshv1\n" in files["gen/go/agentmesh/v1/common.pb.go"].decode()
    # google/api/field_behavior.proto: imported by every contract; TypeScript has no package for it.
    assert "gen/ts/google/api/field_behavior_pb.ts" in files
    assert not [p for p in files if p.startswith("gen/go/google/") or p.startswith("gen/java/com/google/")]


def test_buf_generates_the_committed_python_stubs(fresh_clients: FreshTree) -> None:
    """buf.gen.yaml's Python entry (agentmesh.dev.codegen --plugin) writes what `make protos` committed."""
    fresh = {p: d for p, d in generated(fresh_clients.root).items() if p.startswith("agentmesh/v1/")}
    committed = {
        f"agentmesh/v1/{p.name}": p.read_bytes()
        for p in (ROOT / "agentmesh" / "v1").iterdir()
        if p.name.endswith(GENERATED_SUFFIXES)
    }
    assert sorted(fresh) == sorted(committed)
    stale = [path for path in fresh if fresh[path] != committed[path]]
    assert not stale, f"buf generate and `make protos` disagree on {stale}"


def test_every_contract_names_its_generated_code() -> None:
    expected = {
        "go_package": "github.com/agentmesh/agentmesh/gen/go/agentmesh/v1;agentmeshv1",
        "java_package": "com.agentmesh.v1",
        "java_multiple_files": True,
        "csharp_namespace": "Agentmesh.V1",
        "php_namespace": "Agentmesh\\V1",
        "ruby_package": "Agentmesh::V1",
        "objc_class_prefix": "AGM",
    }
    for module in (common_pb2, context_pb2, dispatcher_pb2, provider_pb2, tool_pb2):
        options = module.DESCRIPTOR.GetOptions()
        for name, value in expected.items():
            assert getattr(options, name) == value, f"{module.DESCRIPTOR.name}: {name}"
        stem = Path(module.DESCRIPTOR.name).stem
        assert options.java_outer_classname == f"{stem.capitalize()}Proto"


def test_java_stubs_compile_and_work(fresh_clients: FreshTree) -> None:
    fresh_clients.build("java")
    classes = fresh_clients.java_classes / "com" / "agentmesh" / "v1"
    for name in ("DispatcherServiceGrpc", "ToolServiceGrpc", "ErrorDetail", "TaskEvent", "CommonProto"):
        assert (classes / f"{name}.class").exists(), name
    classpath = ":".join([str(fresh_clients.java_classes), *(f"/usr/share/java/{jar}.jar" for jar in JAVA_RUNTIME)])
    # Source-file mode: the probe is compiled in memory and run in one JVM.
    probe = Path(__file__).with_name("StubProbe.java")
    result = subprocess.run(
        ["java", "-XX:TieredStopAtLevel=1", "-cp", classpath, str(probe)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "request probe max_steps=3 has_token_budget=false"
    assert lines[1] == "detail ERROR_CODE_NOT_FOUND ERROR_CLASS_ENGINEERING agent_id nope"
    methods = [line.split()[1] for line in lines if line.startswith("method ")]
    rpcs = dispatcher_pb2.DESCRIPTOR.services_by_name["DispatcherService"].methods
    assert methods == sorted(f"agentmesh.v1.DispatcherService/{m.name}" for m in rpcs)
    assert "method agentmesh.v1.DispatcherService/WatchTask SERVER_STREAMING" in lines
    assert lines[-1] == "goal field_behavior [REQUIRED]"  # agent_id is not: a capability may stand for it


def _build_with_path(what: str, root: Path, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BUILD_CLIENTS), what, str(root)], capture_output=True, text=True, timeout=60, env={"PATH": path}
    )


def test_a_missing_toolchain_fails_the_build_naming_it(fresh_clients: FreshTree, tmp_path: Path) -> None:
    """Without go or javac on PATH the build fails and says what to run; it never passes by skipping."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("bash", "env", "dirname", "mkdir", "ln", "rm", "find", "sort"):
        found = shutil.which(tool)
        assert found, tool
        (bare / tool).symlink_to(found)
    for what, tool in (("go", "go"), ("java", "javac")):
        result = _build_with_path(what, fresh_clients.root, str(bare))
        assert result.returncode != 0, what
        assert f"{tool} not found: run make toolchains" in result.stderr, result.stderr
    # Nothing generated yet: each language says so rather than building something stale.
    empty = tmp_path / "empty"
    empty.mkdir()
    for what in ("go", "ts", "java"):
        result = _build_with_path(what, empty, os.environ["PATH"])
        assert result.returncode != 0, what
        assert re.search(r"missing: run make (gen|venv)", result.stderr), result.stderr


def test_the_toolchain_installer_lists_and_checks_its_packages() -> None:
    listed = subprocess.run([str(INSTALL_TOOLCHAINS), "--list"], capture_output=True, text=True, timeout=30)
    packages = listed.stdout.split()
    for name in ("golang-go", "golang-google-grpc-dev", "golang-google-protobuf-dev", "golang-google-genproto-dev"):
        assert name in packages
    for name in ("libprotobuf-java", "libgrpc-java", "protobuf-compiler-grpc-java-plugin", "protoc-gen-go-grpc"):
        assert name in packages
    assert "chromium" in packages  # the gRPC-Web browser test's (tests/contract/test_connect_browser.py)
    # `make test` ran the installer first: everything is present, and a second run changes nothing.
    check = subprocess.run([str(INSTALL_TOOLCHAINS), "--check"], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    again = subprocess.run([str(INSTALL_TOOLCHAINS)], capture_output=True, text=True, timeout=30)
    assert again.returncode == 0 and again.stdout == "", again.stdout + again.stderr
    wrong = subprocess.run([str(INSTALL_TOOLCHAINS), "--bogus"], capture_output=True, text=True, timeout=30)
    assert wrong.returncode == 2 and "usage" in wrong.stderr


def test_the_java_build_cache_never_serves_changed_sources(tmp_path: Path) -> None:
    """Classes are reused only for byte-identical inputs: an edited source is compiled (and here fails)."""
    source = tmp_path / "tree" / "gen" / "java" / "probe" / "Probe.java"
    source.parent.mkdir(parents=True)
    source.write_text("package probe;\npublic final class Probe { public static int v() { return 1; } }\n")
    env = {**os.environ, "CLIENTS_BUILD_CACHE": str(tmp_path / "cache")}

    def build() -> subprocess.CompletedProcess[str]:
        command = [str(BUILD_CLIENTS), "java", str(tmp_path / "tree")]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)

    first = build()
    assert first.returncode == 0 and "reused" not in first.stdout, first.stderr
    classes = tmp_path / "tree" / "build" / "clients" / "java" / "probe" / "Probe.class"
    assert classes.exists()
    second = build()
    assert second.returncode == 0 and "reused" in second.stdout
    assert classes.exists()
    source.write_text("package probe;\npublic final class Probe { int broken }\n")
    third = build()
    assert third.returncode != 0 and "reused" not in third.stdout
    assert "error" in third.stderr
    assert not classes.exists(), "a failed build leaves no classes behind"


def test_the_npm_toolchain_is_pinned_exactly_and_locked() -> None:
    """protoc-gen-es, Connect-ES and TypeScript come from npm at the versions package.json pins, checked."""
    package = json.loads((ROOT / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((ROOT / "package-lock.json").read_text(encoding="utf-8"))
    pins = package["devDependencies"]
    needed = {"@bufbuild/buf", "@bufbuild/protoc-gen-es", "@bufbuild/protobuf", "@connectrpc/connect"}
    assert needed | {"@connectrpc/connect-node", "typescript", "@types/node"} <= set(pins)
    # protoc-gen-es generates for the runtime of its own version.
    assert pins["@bufbuild/protoc-gen-es"] == pins["@bufbuild/protobuf"]
    assert lock["packages"][""]["devDependencies"] == pins
    for name, version in pins.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name} must be pinned exactly, not {version!r}"
        entry = lock["packages"][f"node_modules/{name}"]
        assert entry["version"] == version
        assert entry["integrity"].startswith("sha512-"), f"{name}: npm ci must verify what it downloads"
