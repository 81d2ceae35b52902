"""The fixture's JSON: domain objects described by field, and every Redis key dumped with its type,
value and TTL (byte strings as UTF-8 text, or {"base64": ...} when not UTF-8). Part of
make_fixtures.py (copied with it into an older tree)."""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import math
from collections.abc import Mapping
from typing import Any

from agentmesh.errors import AgentmeshError
from agentmesh.store import Store

# --- the JSON encoding of values ------------------------------------------------------------------


def enc(value: bytes | str) -> Any:
    """A byte string as UTF-8 text, or {"base64": ...} when it is not UTF-8."""
    if isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def text_key(value: bytes | str) -> str:
    """A key, field or id as text (these are always UTF-8 here)."""
    decoded = enc(value)
    if not isinstance(decoded, str):
        raise ValueError(f"a key or field name is not UTF-8: {value!r}")
    return decoded


def describe(value: Any) -> Any:
    """A domain object as JSON: dataclasses by field, enums by name, errors by their attributes."""
    if value is None or (isinstance(value, (bool, int, float, str)) and not isinstance(value, enum.Enum)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bytes):
        return enc(value)
    if isinstance(value, AgentmeshError):
        return {
            "code": value.code.name,
            "message": value.message,
            "violations": [describe(v) for v in value.violations],
            "retryable": value.retryable,
            "retry_after": value.retry_after,
            "fallback_tool": value.fallback_tool,
            "missing_permission": value.missing_permission,
            "metadata": dict(value.metadata),
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: describe(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): describe(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((describe(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    raise TypeError(f"cannot describe {type(value).__name__}")


# --- the key dump -----------------------------------------------------------------------------------


async def dump_keys(store: Store) -> dict[str, Any]:
    """Every key of the database: type, value, TTL (whole seconds, rounded up; null when none)."""
    r = store.redis
    out: dict[str, Any] = {}
    names: list[bytes] = sorted([k async for k in r.scan_iter(match="*", count=1000)])
    for raw_key in names:
        key = text_key(raw_key)
        kind_reply: Any = await r.type(raw_key)
        kind = text_key(kind_reply)
        reply: Any
        value: Any
        if kind == "string":
            reply = await r.get(raw_key)
            value = enc(reply)
        elif kind == "hash":
            reply = await r.hgetall(raw_key)
            value = {text_key(f): enc(v) for f, v in reply.items()}
        elif kind == "list":
            reply = await r.lrange(raw_key, 0, -1)
            value = [enc(v) for v in reply]
        elif kind == "set":
            reply = await r.smembers(raw_key)
            value = sorted((enc(v) for v in reply), key=lambda v: json.dumps(v, sort_keys=True))
        elif kind == "zset":
            reply = await r.zrange(raw_key, 0, -1, withscores=True)
            value = [{"member": enc(m), "score": s} for m, s in reply]
        elif kind == "stream":
            value = await dump_stream(store, raw_key)
        else:
            raise ValueError(f"{key}: type {kind} is not dumped")
        pttl: int = await r.pttl(raw_key)
        out[key] = {"type": kind, "ttl_s": math.ceil(pttl / 1000) if pttl > 0 else None, "value": value}
    return out


async def dump_stream(store: Store, raw_key: bytes) -> dict[str, Any]:
    """Entries with their ids, the last generated id and the consumer groups (no pending entries)."""
    r = store.redis
    raw_entries: Any = await r.xrange(raw_key)
    entries = [
        {"id": text_key(entry_id), "fields": {text_key(f): enc(v) for f, v in fields.items()}}
        for entry_id, fields in raw_entries
    ]
    info: Any = await r.xinfo_stream(raw_key)
    raw_groups: Any = await r.xinfo_groups(raw_key)
    groups = []
    for group in raw_groups:
        name = group["name"]
        consumers: Any = await r.xinfo_consumers(raw_key, name)
        if group["pending"]:
            # The loader cannot rebuild a pending entries list: settle everything before dumping.
            raise ValueError(f"{raw_key!r}: group {name!r} has pending entries")
        groups.append(
            {
                "name": text_key(name),
                "last_delivered_id": text_key(group["last-delivered-id"]),
                "consumers": sorted(text_key(c["name"]) for c in consumers),
            }
        )
    return {
        "entries": entries,
        "last_generated_id": text_key(info["last-generated-id"]),
        "groups": groups,
    }
