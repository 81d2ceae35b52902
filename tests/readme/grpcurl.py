"""A `grpcurl` stand-in for the README test, on gRPC server reflection (grpcio-reflection).

The README's `grpcurl` lines run through it (tests/readme/session.py puts it on PATH as `grpcurl`), so
the test needs no Go binary. It takes the flags and forms the README uses, with grpcurl's meaning:

    grpcurl [-plaintext] [-H 'name: value']... [-d JSON|@] [-max-time S] ADDRESS list [SERVICE]
    grpcurl [...] ADDRESS describe SYMBOL
    grpcurl [...] ADDRESS package.Service/Method        (unary or server-streaming; -d default {})

Replies print as JSON (grpcurl's default format); an RPC error prints `ERROR:` with its code and
message on stderr and exits 64 + the status code, as grpcurl does. Anything else exits 2.
TLS (no -plaintext) is not supported: the README's calls are plaintext.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import Descriptor, MethodDescriptor, ServiceDescriptor
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase


class UsageError(Exception):
    """Bad command line: exit 2."""


@dataclass
class Args:
    """The parsed command line."""

    address: str = ""
    verb: list[str] = field(default_factory=list)
    headers: list[tuple[str, str]] = field(default_factory=list)
    data: str | None = None
    plaintext: bool = False
    max_time: float | None = None


def parse(argv: Sequence[str]) -> Args:
    """grpcurl's flags (single or double dash, `-flag value` or `-flag=value`), then the positionals."""
    args = Args()
    items = list(argv)
    positional: list[str] = []
    while items:
        item = items.pop(0)
        if not item.startswith("-") or item == "-":
            positional.append(item)
            continue
        name, eq, inline = item.lstrip("-").partition("=")

        def value(flag: str = name, given: str = inline, has: str = eq) -> str:
            if has:
                return given
            if not items:
                raise UsageError(f"flag -{flag} needs a value")
            return items.pop(0)

        if name == "plaintext":
            args.plaintext = True
        elif name in ("H", "rpc-header", "reflect-header"):
            header = value()
            key, colon, val = header.partition(":")
            if not colon:
                raise UsageError(f"header {header!r} must be 'name: value'")
            args.headers.append((key.strip().lower(), val.strip()))
        elif name == "d":
            args.data = value()
        elif name == "max-time":
            args.max_time = float(value())
        elif name == "format":
            if value() != "json":
                raise UsageError("only -format json is supported")
        else:
            raise UsageError(f"unsupported flag -{name}")
    if not positional:
        raise UsageError("no address given")
    args.address, args.verb = positional[0], positional[1:]
    if not args.verb:
        raise UsageError("give list, describe or a Service/Method")
    if not args.plaintext:
        raise UsageError("only -plaintext is supported")
    return args


def _describe_service(service: ServiceDescriptor) -> str:
    lines = [f"{service.full_name} is a service:", f"service {service.name} {{"]
    for method in service.methods:
        lines.append(f"  rpc {method.name} ( {_stream(method, client=True)}.{method.input_type.full_name} ) returns "
                     f"( {_stream(method, client=False)}.{method.output_type.full_name} );")  # fmt: skip
    lines.append("}")
    return "\n".join(lines)


def _stream(method: MethodDescriptor, *, client: bool) -> str:
    streaming = method.client_streaming if client else method.server_streaming
    return "stream " if streaming else ""


def _describe_message(message: Descriptor) -> str:
    lines = [f"{message.full_name} is a message:", f"message {message.name} {{"]
    for item in message.fields:
        lines.append(f"  {item.name} = {item.number};")
    lines.append("}")
    return "\n".join(lines)


def run(args: Args, out: Any = sys.stdout, err: Any = sys.stderr) -> int:
    """Does what the command line asks; the exit code."""
    with grpc.insecure_channel(args.address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        pool = descriptor_pool.DescriptorPool(database)
        verb = args.verb
        try:
            if verb[0] == "list":
                if len(verb) == 1:
                    out.write("\n".join(sorted(database.get_services())) + "\n")
                else:
                    service = pool.FindServiceByName(verb[1])
                    out.write("\n".join(f"{service.full_name}.{m.name}" for m in service.methods) + "\n")
                return 0
            if verb[0] == "describe":
                if len(verb) != 2:
                    raise UsageError("describe takes one symbol")
                symbol = verb[1]
                try:
                    out.write(_describe_service(pool.FindServiceByName(symbol)) + "\n")
                except KeyError:
                    out.write(_describe_message(pool.FindMessageTypeByName(symbol)) + "\n")
                return 0
            return _call(channel, pool, args, out)
        except KeyError as exc:
            err.write(f"Failed to resolve symbol: {exc}\n")
            return 1
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            err.write(f"ERROR:\n  Code: {_camel(code)}\n  Message: {details}\n")
            return 64 + int(code.value[0])


def _camel(code: grpc.StatusCode) -> str:
    return "".join(part.capitalize() for part in code.name.split("_")).replace("Ok", "OK")


def _call(channel: grpc.Channel, pool: descriptor_pool.DescriptorPool, args: Args, out: Any) -> int:
    if len(args.verb) != 1:
        raise UsageError("one Service/Method per call")
    full = args.verb[0].replace("/", ".")
    service_name, _, method_name = full.rpartition(".")
    method = pool.FindServiceByName(service_name).methods_by_name[method_name]
    if method.client_streaming:
        raise UsageError("client-streaming methods are not supported")
    request_class = message_factory.GetMessageClass(method.input_type)
    reply_class = message_factory.GetMessageClass(method.output_type)
    data = sys.stdin.read() if args.data == "@" else (args.data or "{}")
    request = json_format.Parse(data, request_class())
    path = f"/{service_name}/{method_name}"
    options: dict[str, Any] = {
        "metadata": tuple(args.headers),
        "timeout": args.max_time,
    }
    serialize = request_class.SerializeToString
    deserialize = reply_class.FromString
    replies: Iterable[Any]
    if method.server_streaming:
        replies = channel.unary_stream(path, request_serializer=serialize, response_deserializer=deserialize)(
            request, **options
        )
    else:
        replies = [
            channel.unary_unary(path, request_serializer=serialize, response_deserializer=deserialize)(
                request, **options
            )
        ]
    for reply in replies:
        out.write(json_format.MessageToJson(reply, indent=2) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: `python tests/readme/grpcurl.py ARGS`."""
    try:
        return run(parse(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        print(f"grpcurl (README test stand-in): {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
