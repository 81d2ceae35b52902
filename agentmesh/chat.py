"""The conversation types every service shares: who wrote a message, a model's tool call, token usage.

One definition each, so the RPC edge maps them to protobuf in one place (`agentmesh.rpc.codec`).
Core: no grpc, no stubs.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["Role", "ToolCall", "Usage"]


class Role(enum.StrEnum):
    """The author of a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call as the model produced it; `arguments_json` is the raw text (never re-encoded)."""

    id: str
    name: str
    arguments_json: str

    def to_json(self) -> dict[str, Any]:
        """The compact form stored in Redis (task checkpoints and events)."""
        return {"id": self.id, "name": self.name, "args": self.arguments_json}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolCall:
        return cls(id=data["id"], name=data["name"], arguments_json=data["args"])

    def canonical_arguments(self) -> str:
        """The arguments with key order and spacing normalised (raw text when not JSON)."""
        try:
            parsed = json.loads(self.arguments_json)
        except ValueError:
            return self.arguments_json
        return json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def arguments_sha256(self) -> str:
        return hashlib.sha256(self.canonical_arguments().encode("utf-8")).hexdigest()

    def signature(self) -> str:
        """Same tool + same arguments, whatever the call id: what loop detection counts."""
        return f"{self.name}:{self.arguments_sha256()[:32]}"


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one or more model calls."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens)

    def to_json(self) -> list[int]:
        """The compact form stored in Redis."""
        return [self.input_tokens, self.output_tokens]

    @classmethod
    def from_json(cls, data: list[int] | None) -> Usage:
        return cls(*data) if data else cls()
