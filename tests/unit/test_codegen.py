"""The committed stubs in agentmesh/v1 are exactly what `make protos` generates from protos/."""

from __future__ import annotations

import re
from pathlib import Path

from agentmesh.dev.codegen import (
    CLIENT_STUBS,
    GENERATED_SUFFIXES,
    ROOT,
    client_stub_names,
    generate,
    generate_client,
    proto_files,
)

COMMITTED = ROOT / "agentmesh" / "v1"


def test_generated_stubs_have_not_drifted(tmp_path: Path) -> None:
    fresh = {path.name: path.read_bytes() for path in generate(tmp_path)}
    committed = {path.name: path.read_bytes() for path in COMMITTED.iterdir() if path.name.endswith(GENERATED_SUFFIXES)}
    assert sorted(fresh) == sorted(committed), "stub files differ: run `make protos` and commit"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale generated stubs {stale}: run `make protos` and commit the result"


def test_every_contract_file_is_generated() -> None:
    names = {path.stem for path in proto_files()}
    assert names == {"common", "context", "tool", "provider", "dispatcher", "workflow"}
    for stem in names:
        assert (COMMITTED / f"{stem}_pb2.py").exists()
        assert (COMMITTED / f"{stem}_pb2.pyi").exists()


def test_the_python_client_stubs_have_not_drifted(tmp_path: Path) -> None:
    """clients/python/agentmesh_client/_v1 is exactly what `make protos` generates for the client."""
    fresh = {path.name: path.read_bytes() for path in generate_client(tmp_path)}
    committed = {
        path.name: path.read_bytes()
        for path in CLIENT_STUBS.iterdir()
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py", "_pb2.pyi"))
    }
    assert sorted(fresh) == sorted(committed) == client_stub_names(), "client stub files differ: run `make protos`"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale client stubs {stale}: run `make protos` and commit the result"


def test_the_client_stubs_import_only_their_own_package() -> None:
    for path in CLIENT_STUBS.iterdir():
        if path.suffix in (".py", ".pyi"):
            text = path.read_text(encoding="utf-8")
            assert "from agentmesh.v1 import" not in text, path.name
            assert not re.search(r"'agentmesh\.v1\.\w+_pb2'", text), path.name


def test_the_client_and_server_stubs_share_one_descriptor_pool() -> None:
    """The suite (and any process) may import both copies: the files they register are identical, so the
    pool keeps one of each, and a message of one copy parses as the other."""
    from agentmesh.v1 import common_pb2, dispatcher_pb2
    from agentmesh_client._v1 import common_pb2 as client_common
    from agentmesh_client._v1 import dispatcher_pb2 as client_dispatcher

    assert client_common.DESCRIPTOR.serialized_pb == common_pb2.DESCRIPTOR.serialized_pb
    assert client_dispatcher.DESCRIPTOR.serialized_pb == dispatcher_pb2.DESCRIPTOR.serialized_pb
    event = client_dispatcher.TaskEvent(task_id="t-1", sequence=3, error=client_common.ErrorDetail(message="x"))
    assert dispatcher_pb2.TaskEvent.FromString(event.SerializeToString()) == event
