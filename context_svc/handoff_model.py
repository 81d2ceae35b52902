"""The values of a hop summary (issue 44): the brief as the model wrote it (`Brief`, its `Fact`s and
their `Citation`s), each fact after the check (`CheckedFact`, with the `Demotion` that made a confirmed
fact inferred), the `Hop` BuildHandoff answers, and `HandoffSources`, what a hop reads and writes
(handoff_sources.py implements it over Redis). handoff.py builds the hop; handoff_check.py checks facts.
Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Protocol

from agentmesh.payloads import StoredPayload

__all__ = ["Brief", "CheckedFact", "Citation", "Demotion", "Fact", "FactKind", "HandoffSources", "Hop"]


class FactKind(enum.Enum):
    """A fact's final kind."""

    CONFIRMED = "confirmed"
    INFERRED = "inferred"


class Demotion(enum.Enum):
    """Why a fact given as confirmed is inferred after the check."""

    CITATION_NOT_FOUND = "citation_not_found"
    VALUE_NOT_IN_SOURCE = "value_not_in_source"
    NO_ACCESS = "no_access"
    MALFORMED = "malformed"


@dataclass(frozen=True)
class Citation:
    """Where a confirmed fact was read: a payload (`ref_id`) or a message of the parent session."""

    ref_id: str | None = None
    message_index: int | None = None
    json_path: str | None = None
    line_range: tuple[int, int] | None = None

    def label(self) -> str:
        where = f"message #{self.message_index}" if self.ref_id is None else self.ref_id
        if self.json_path is not None:
            return f"{where} {self.json_path}"
        if self.line_range is not None:
            return f"{where} L{self.line_range[0]}-{self.line_range[1]}"
        return where

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.ref_id is not None:
            data["ref_id"] = self.ref_id
        if self.message_index is not None:
            data["message_index"] = self.message_index
        if self.json_path is not None:
            data["json_path"] = self.json_path
        if self.line_range is not None:
            data["line_range"] = list(self.line_range)
        return data


@dataclass(frozen=True)
class Fact:
    """A fact of the brief: confirmed when it has a citation, inferred when it has a basis."""

    statement: str
    value: str = ""
    citation: Citation | None = None
    basis: str | None = None

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"statement": self.statement, "value": self.value}
        if self.citation is not None:
            data["citation"] = self.citation.as_json()
        if self.basis is not None:
            data["basis"] = self.basis
        return data


@dataclass(frozen=True)
class Brief:
    """The brief as the model wrote it in its transfer call."""

    summary: str = ""
    facts: tuple[Fact, ...] = ()
    open_questions: tuple[str, ...] = ()
    risks: tuple[str, ...] = ()
    artifacts: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckedFact:
    """A fact after the check."""

    fact: Fact
    kind: FactKind
    reason: Demotion | None = None
    detail: str = ""
    shown: bool = True
    owner: str = ""
    """For a confirmed payload citation: the session the payload is stored in (what a grant points at)."""


@dataclass(frozen=True)
class Hop:
    """What BuildHandoff answers."""

    text: str
    token_count: int
    facts: tuple[CheckedFact, ...]
    record_ref_id: str
    user_constraints: tuple[str, ...]
    granted_ref_ids: tuple[str, ...] = ()
    missing_artifacts: tuple[str, ...] = ()
    omitted: int = 0
    summary_clipped: bool = False

    @property
    def confirmed(self) -> int:
        return sum(1 for f in self.facts if f.kind is FactKind.CONFIRMED)

    @property
    def inferred(self) -> int:
        return len(self.facts) - self.confirmed

    @property
    def demoted(self) -> int:
        return sum(1 for f in self.facts if f.reason is not None)


class HandoffSources(Protocol):
    """What a hop reads and writes, with the parent session's access rules applied by the implementation."""

    async def payload(self, ref_id: str) -> tuple[StoredPayload, bytes]:
        """A payload the parent session may read (its own, or one granted to it). NotFoundError when
        unknown, expired or not readable; PermissionDeniedError when it exists but is refused."""
        ...

    async def message(self, index: int) -> str:
        """The content of message `index` of the parent session's log; NotFoundError past its end."""
        ...

    async def user_messages(self, limit: int) -> list[tuple[int, str]]:
        """(index, content) of the parent session's newest `limit` user messages, newest first."""
        ...

    async def put_record(self, content: bytes) -> str:
        """Stores the record as a JSON payload of the parent session; its ref id."""
        ...

    async def grant(self, refs: dict[str, str]) -> None:
        """Lets the child session read each ref id (mapped to the session the payload is stored in)."""
        ...
