"""The committed stubs in agentmesh/v1 are exactly what `make protos` generates from protos/."""

from __future__ import annotations

from pathlib import Path

from agentmesh.codegen import GENERATED_SUFFIXES, ROOT, generate, proto_files

COMMITTED = ROOT / "agentmesh" / "v1"


def test_generated_stubs_have_not_drifted(tmp_path: Path) -> None:
    fresh = {path.name: path.read_bytes() for path in generate(tmp_path)}
    committed = {path.name: path.read_bytes() for path in COMMITTED.iterdir() if path.name.endswith(GENERATED_SUFFIXES)}
    assert sorted(fresh) == sorted(committed), "stub files differ: run `make protos` and commit"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale generated stubs {stale}: run `make protos` and commit the result"


def test_every_contract_file_is_generated() -> None:
    names = {path.stem for path in proto_files()}
    assert names == {"common", "context", "tool", "provider", "dispatcher"}
    for stem in names:
        assert (COMMITTED / f"{stem}_pb2.py").exists()
        assert (COMMITTED / f"{stem}_pb2.pyi").exists()
