"""examples/clients/node: pinned, locked, and its vendored google.rpc protos are the real ones."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

from tests.unit.deploy.manifests import REPO

CLIENT = REPO / "examples" / "clients" / "node"


def test_dependencies_are_pinned_exactly() -> None:
    package = json.loads((CLIENT / "package.json").read_text(encoding="utf-8"))
    deps = package["dependencies"]
    assert {"@grpc/grpc-js", "@grpc/proto-loader", "protobufjs"} <= set(deps)
    for name, version in deps.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name} must be pinned exactly, not {version!r}"
    assert "devDependencies" not in package


def test_lockfile_matches_package_json() -> None:
    package = json.loads((CLIENT / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((CLIENT / "package-lock.json").read_text(encoding="utf-8"))
    assert lock["lockfileVersion"] >= 2
    assert lock["packages"][""]["dependencies"] == package["dependencies"]
    for name, version in package["dependencies"].items():
        entry = lock["packages"][f"node_modules/{name}"]
        assert entry["version"] == version
        assert entry["integrity"].startswith("sha512-"), f"{name}: npm ci must verify what it downloads"


def test_vendored_google_rpc_protos_are_unchanged() -> None:
    shipped = resources.files("google.rpc")
    for name in ("status.proto", "error_details.proto"):
        vendored = (CLIENT / "protos" / "google" / "rpc" / name).read_text(encoding="utf-8")
        assert vendored == shipped.joinpath(name).read_text(encoding="utf-8"), name


def test_client_loads_the_repository_protos() -> None:
    source = (CLIENT / "client.js").read_text(encoding="utf-8")
    assert "'agentmesh/v1/dispatcher.proto'" in source
    default = re.search(r"path\.resolve\(__dirname, '\.\.', '\.\.', '\.\.', 'protos'\)", source)
    assert default, "default AGENTMESH_PROTOS must be the repository's protos/ folder"
    assert (CLIENT / ".." / ".." / ".." / "protos" / "agentmesh" / "v1" / "dispatcher.proto").resolve() == Path(
        REPO / "protos" / "agentmesh" / "v1" / "dispatcher.proto"
    )
