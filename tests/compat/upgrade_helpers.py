"""Comparing what the current code reads with what the writing release read, and the ExecuteTool a
repeat of a recorded call makes (tests/compat/test_rolling_upgrade.py)."""

from __future__ import annotations

import base64
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentmesh.store import Store
from tool_svc.call import CallState
from tool_svc.model import Caller, CallRequest, Permission, ToolDef, arguments_sha256, call_sha256
from tool_svc.registry import RegisteredTool
from tool_svc.validation import SchemaCheck


@dataclass
class Loaded:
    store: Store
    keys: dict[str, Any]
    records: dict[str, Any]


# --- comparing what the current code reads with what the writer read -----------------------------


def encode(value: bytes) -> Any:
    """A byte string as the fixture dumps it: UTF-8 text, or {"base64": ...}."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def assert_same(actual: Any, expected: Any, where: str) -> None:
    """`actual` (read by the current code) holds `expected` (the writer's read, as JSON).

    Objects are compared by the attributes `expected` names, enums by name, errors by their
    attributes, byte strings as dumped; mappings must have the same keys, sequences the same length.
    """
    if isinstance(actual, bytes):
        assert encode(actual) == expected, where
    elif isinstance(actual, enum.StrEnum):
        # By name as the writer recorded its enums, or by value for a string the reader now types
        # (Cursor.phase, CallState.state became Phase and CallStage: the stored strings are theirs).
        assert expected in (actual.name, actual.value), f"{where}: {actual.name} != {expected}"
    elif isinstance(actual, enum.Enum):
        assert actual.name == expected, f"{where}: {actual.name} != {expected}"
    elif isinstance(expected, dict):
        if isinstance(actual, Mapping):
            assert sorted(str(k) for k in actual) == sorted(expected), (
                f"{where}: keys {list(actual)} != {list(expected)}"
            )
            for k, v in actual.items():
                assert_same(v, expected[str(k)], f"{where}[{k!r}]")
        else:
            for name, value in expected.items():
                assert hasattr(actual, name), f"{where}.{name}: no such attribute on {type(actual).__name__}"
                assert_same(getattr(actual, name), value, f"{where}.{name}")
    elif isinstance(expected, list):
        items = sorted(actual, key=str) if isinstance(actual, (set, frozenset)) else list(actual)
        assert len(items) == len(expected), f"{where}: {len(items)} items != {len(expected)}"
        for i, (a, e) in enumerate(zip(items, expected, strict=True)):
            assert_same(a, e, f"{where}[{i}]")
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"
        assert isinstance(actual, bool) == isinstance(expected, bool), f"{where}: {actual!r} vs {expected!r}"


# --- tool_svc ---------------------------------------------------------------------------------------


def tool_call_state(written: Mapping[str, Any]) -> CallState:
    """The same ExecuteTool again, as the upgraded tool_svc builds it."""
    tool = written["tool"]
    spec = ToolDef(
        name=tool["name"],
        description=tool["description"],
        input_schema=tool["input_schema"],
        permission=Permission(group=tool["group"], access=tool["access"]),
        impact=tool["impact"],
        requires_approval=tool["requires_approval"],
        executor="builtin",
        builtin=tool["name"],
    )
    caller = written["caller"]
    arguments = written["arguments"]
    return CallState(
        request=CallRequest(**written["request"]),
        caller=Caller(
            subject=caller["subject"],
            agent_id=caller["agent_id"],
            instance=caller["instance"],
            environment=caller["environment"],
            permissions=tuple(caller["permissions"]),
            roles=frozenset(caller["roles"]),
        ),
        service_environment="dev",
        tool=RegisteredTool(spec, SchemaCheck.compile(spec.input_schema), None, "config"),
        arguments=arguments,
        arguments_sha256=arguments_sha256(arguments),
        call_sha256=call_sha256(spec.name, arguments),
    )
