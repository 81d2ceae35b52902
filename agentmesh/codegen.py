"""Generates the Python modules of protos/agentmesh/v1 with grpcio-tools.

`make protos` writes them into the package; the drift test writes them into a temporary folder and
compares, so committed stubs can never disagree with the contracts.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PROTO_PACKAGE = PROTO_ROOT / "agentmesh" / "v1"
# Vendored imports (google/api/field_behavior.proto): on the include path, not generated (their
# Python modules come from googleapis-common-protos).
THIRD_PARTY = PROTO_ROOT / "third_party"


def proto_files() -> list[Path]:
    """The contract files, sorted so output is reproducible."""
    return sorted(PROTO_PACKAGE.glob("*.proto"))


def generate(out_root: Path) -> list[Path]:
    """Writes *_pb2.py, *_pb2_grpc.py and *.pyi for every proto under out_root/agentmesh/v1."""
    out_root.mkdir(parents=True, exist_ok=True)
    well_known = str(resources.files("grpc_tools") / "_proto")
    files = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{THIRD_PARTY}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *files,
    ]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}")
    generated = out_root / "agentmesh" / "v1"
    return sorted(p for p in generated.iterdir() if p.name.endswith(("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")))


def main(argv: list[str]) -> int:
    """`python -m agentmesh.codegen [out_dir]`: out_dir defaults to agentmesh/v1 in this tree."""
    target = Path(argv[0]).resolve() if argv else ROOT / "agentmesh" / "v1"
    # protoc writes <root>/agentmesh/v1/...; the target names the v1 folder itself.
    out_root = target.parent.parent
    for path in generate(out_root):
        print(path.relative_to(out_root))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
