"""Generates the Python modules of protos/agentmesh/v1 with grpcio-tools and protoc-gen-connectrpc.

Per contract: *_pb2.py, *_pb2.pyi, *_pb2_grpc.py (grpcio-tools) and *_connect.py (the Connect
protocol's ASGI application and client on google.protobuf messages: protoc-gen-connectrpc with
`protobuf=google,io=async`, served by each service's HTTP listener, agentmesh/rpc/connect.py).

`make protos` writes them into the package; the drift test writes them into a temporary folder and
compares, so committed stubs can never disagree with the contracts.

`python -m agentmesh.dev.codegen --plugin` is the same generator as a protoc plugin, the Python entry of
buf.gen.yaml (`make gen`): buf has no grpc_python built-in, and buf's descriptors name every field's
json_name, which protoc records only when a .proto sets it. The plugin clears the implied ones, so
`buf generate` writes the very bytes `make protos` does (tests/unit/test_buf_generate.py).

`python -m agentmesh.dev.codegen --client` writes the Python client's copy (clients/python/agentmesh_client/
_v1, also by `make protos`): the same generation, imports and module names moved to the client's
package (tests/unit/test_codegen.py holds it to the protos too).
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = ROOT / "protos"
PROTO_PACKAGE = PROTO_ROOT / "agentmesh" / "v1"
# Vendored imports (google/api/field_behavior.proto): on the include path, not generated (their
# Python modules come from googleapis-common-protos).
THIRD_PARTY = PROTO_ROOT / "third_party"
# protoc-gen-connectrpc's options: google.protobuf messages (the *_pb2 classes), asyncio only.
CONNECT_OPTIONS = "protobuf=google,io=async"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi", "_connect.py")


def connect_plugin() -> str:
    """The protoc-gen-connectrpc executable installed beside this Python (pyproject.toml pins it)."""
    beside = Path(sys.executable).parent / "protoc-gen-connectrpc"
    found = str(beside) if beside.exists() else shutil.which("protoc-gen-connectrpc")
    if not found:
        raise RuntimeError("protoc-gen-connectrpc not found: `make venv` installs it (pyproject.toml)")
    return found


def _connect_args(out: Path) -> list[str]:
    return [
        f"--plugin=protoc-gen-connectrpc={connect_plugin()}",
        f"--connectrpc_out={out}",
        f"--connectrpc_opt={CONNECT_OPTIONS}",
    ]


def proto_files() -> list[Path]:
    """The contract files, sorted so output is reproducible."""
    return sorted(PROTO_PACKAGE.glob("*.proto"))


def generate(out_root: Path) -> list[Path]:
    """Writes *_pb2.py, *_pb2_grpc.py, *.pyi and *_connect.py for every proto under out_root/agentmesh/v1."""
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
        *_connect_args(out_root),
        *files,
    ]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}")
    generated = out_root / "agentmesh" / "v1"
    return sorted(p for p in generated.iterdir() if p.name.endswith(GENERATED_SUFFIXES))


# The Python client (clients/python, the `agentmesh-client` distribution) carries its own copy of the
# stubs it needs under its own import path, so it never imports agentmesh. The files it registers in
# protobuf's descriptor pool keep their names (agentmesh/v1/*.proto) and bytes: a process importing
# both copies holds one set of descriptors.
CLIENT_STUBS = ROOT / "clients" / "python" / "agentmesh_client" / "_v1"
CLIENT_PACKAGE = "agentmesh_client._v1"
CLIENT_PROTOS = ("common", "dispatcher")
_CLIENT_IMPORT = re.compile(r"^from agentmesh\.v1 import ", re.MULTILINE)
_CLIENT_MODULE = re.compile(r"^(_builder\.BuildTopDescriptorsAndMessages\(DESCRIPTOR, )'agentmesh\.v1\.", re.MULTILINE)


def client_stub_names() -> list[str]:
    """The stub files of the Python client: the messages of its protos and the dispatcher's service."""
    names = [f"{stem}_pb2{suffix}" for stem in CLIENT_PROTOS for suffix in (".py", ".pyi")]
    return sorted([*names, "dispatcher_pb2_grpc.py"])


def client_source(text: str) -> str:
    """A generated module of agentmesh/v1 as the client's copy: imports and module names moved to
    agentmesh_client._v1 (the embedded descriptors are untouched)."""
    text = _CLIENT_IMPORT.sub(f"from {CLIENT_PACKAGE} import ", text)
    return _CLIENT_MODULE.sub(rf"\1'{CLIENT_PACKAGE}.", text)


def generate_client(out_dir: Path) -> list[Path]:
    """Writes the client's stubs (client_stub_names) into out_dir; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="agentmesh-client-codegen-") as tmp:
        by_name = {path.name: path for path in generate(Path(tmp))}
        written = []
        for name in client_stub_names():
            target = out_dir / name
            target.write_text(client_source(by_name[name].read_text(encoding="utf-8")), encoding="utf-8")
            written.append(target)
    return written


def implied_json_name(field_name: str) -> str:
    """The json_name protoc derives from a field name (lowerCamelCase: drop `_`, capitalize what follows)."""
    parts = field_name.split("_")
    return parts[0] + "".join(part[:1].upper() + part[1:] for part in parts[1:])


def _clear_implied_json_names(message: descriptor_pb2.DescriptorProto) -> None:
    for field in [*message.field, *message.extension]:
        if field.json_name == implied_json_name(field.name):
            field.ClearField("json_name")
    for nested in message.nested_type:
        _clear_implied_json_names(nested)


def as_parsed_from_source(file: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """`file` as protoc holds it after parsing the .proto: no implied json_name. (Source info, the
    comments, stays: the service docstrings come from it.)

    The Python generator embeds each file's descriptor; without this the bytes would depend on who
    compiled the .proto (protoc or buf)."""
    parsed = descriptor_pb2.FileDescriptorProto()
    parsed.CopyFrom(file)
    for field in parsed.extension:
        if field.json_name == implied_json_name(field.name):
            field.ClearField("json_name")
    for message in parsed.message_type:
        _clear_implied_json_names(message)
    return parsed


def run_plugin(request: plugin_pb2.CodeGeneratorRequest) -> plugin_pb2.CodeGeneratorResponse:
    """The protoc-plugin form of `generate`: every generated file (`GENERATED_SUFFIXES`) of the files to generate."""
    response = plugin_pb2.CodeGeneratorResponse(
        supported_features=plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    )
    if request.parameter:
        response.error = f"agentmesh.dev.codegen takes no options, got {request.parameter!r}"
        return response
    files = descriptor_pb2.FileDescriptorSet(file=[as_parsed_from_source(f) for f in request.proto_file])
    with tempfile.TemporaryDirectory(prefix="agentmesh-codegen-") as tmp:
        descriptors = Path(tmp) / "request.binpb"
        descriptors.write_bytes(files.SerializeToString(deterministic=True))
        out = Path(tmp) / "out"
        out.mkdir()
        code = protoc.main(
            [
                "grpc_tools.protoc",
                f"--descriptor_set_in={descriptors}",
                f"--python_out={out}",
                f"--pyi_out={out}",
                f"--grpc_python_out={out}",
                *_connect_args(out),
                *request.file_to_generate,
            ]
        )
        if code != 0:
            response.error = f"grpc_tools.protoc failed with exit code {code} (its message is above)"
            return response
        for path in sorted(p for p in out.rglob("*") if p.is_file()):
            response.file.add(name=path.relative_to(out).as_posix(), content=path.read_text(encoding="utf-8"))
    return response


def main(argv: list[str]) -> int:
    """`python -m agentmesh.dev.codegen [out_dir]`: out_dir defaults to agentmesh/v1 in this tree.

    `python -m agentmesh.dev.codegen --client [out_dir]`: the Python client's stubs, out_dir defaulting to
    clients/python/agentmesh_client/_v1.

    `python -m agentmesh.dev.codegen --plugin`: a protoc plugin (CodeGeneratorRequest on stdin)."""
    if argv == ["--plugin"]:
        request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
        sys.stdout.buffer.write(run_plugin(request).SerializeToString())
        return 0
    if argv[:1] == ["--client"]:
        out_dir = Path(argv[1]).resolve() if len(argv) > 1 else CLIENT_STUBS
        for path in generate_client(out_dir):
            print(path)
        return 0
    target = Path(argv[0]).resolve() if argv else ROOT / "agentmesh" / "v1"
    # protoc writes <root>/agentmesh/v1/...; the target names the v1 folder itself.
    out_root = target.parent.parent
    for path in generate(out_root):
        print(path.relative_to(out_root))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
