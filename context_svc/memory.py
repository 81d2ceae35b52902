"""Long-term memory's domain (issue 51): records, their validation, who may use them, corrections,
extraction of stated preferences, and recall ranked for a context.

A `MemoryRecord` belongs to a subject: a user, an agent or a tenant (`Subject`). It states a fact, a
preference or an event (`MemoryKind`), cites where it was stated (`Source`: a session's message or a
task), and may expire. memory_store.py keeps the records in Redis.

Correction supersedes (`same_topic`): a new record of the same subject and kind whose topic words
(the words of its text less stop words and preference cues such as "prefer", "actually", "以后")
share at least half of the larger record's topic words with a current record, and differ from them,
is a correction: the old record gets `superseded_by` and is never recalled again (it stays for
audit until forgotten). The same topic words again are a restatement: nothing new is stored. So
"I prefer invoices in EUR" -> "Actually I prefer invoices in USD" supersedes, "以后发票都用欧元" ->
"以后发票都用美元" too, while "I prefer reports in PDF" is another topic.

Recall is behind `MemoryRecall` so a semantic implementation can replace the lexical one:
`LexicalMemoryRecall` ranks the current records by BM25 relevance to the newest user turn (records
sharing no word are not recalled) weighted by recency (a half-life), and `render_memories` writes
each with its source for the system block.

Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

import enum
import json
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from agentmesh.errors import InvalidRequestError, PermissionDeniedError, echo
from agentmesh.retrieval import BM25, tokenize
from context_svc.model import Caller

__all__ = [
    "LexicalMemoryRecall",
    "MemoryKind",
    "MemoryRecall",
    "MemoryRecord",
    "RankedMemory",
    "Scope",
    "Source",
    "Subject",
    "check_memory_access",
    "extract_statements",
    "render_memories",
    "same_topic",
    "topic_words",
    "validate_text",
]

MAX_SUBJECT_ID_CHARS = 256
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_DAY_S = 86400.0


class Scope(enum.StrEnum):
    """Whose memory a record is."""

    USER = "user"
    AGENT = "agent"
    TENANT = "tenant"


class MemoryKind(enum.StrEnum):
    """What a record states."""

    FACT = "fact"
    PREFERENCE = "preference"
    EVENT = "event"


@dataclass(frozen=True)
class Subject:
    """A scope and the id of the user, agent or tenant within it."""

    scope: Scope
    id: str

    def __post_init__(self) -> None:
        if not self.id:
            raise InvalidRequestError("subject.id", "required")
        if len(self.id) > MAX_SUBJECT_ID_CHARS or _CONTROL_RE.search(self.id):
            raise InvalidRequestError(
                "subject.id", f"at most {MAX_SUBJECT_ID_CHARS} characters, no control characters: {echo(self.id)}"
            )


@dataclass(frozen=True)
class Source:
    """Where a record was stated: a session's message (index) and/or a task."""

    session_id: str = ""
    message_index: int = 0
    task_id: str = ""

    def cite(self) -> str:
        """The citation shown beside a recalled record."""
        parts = []
        if self.session_id:
            parts.append(f"session {self.session_id} message #{self.message_index}")
        if self.task_id:
            parts.append(f"task {self.task_id}")
        return ", ".join(parts) or "stated directly"


@dataclass(frozen=True)
class MemoryRecord:
    """A long-term memory (see the module docstring)."""

    memory_id: str
    subject: Subject
    text: str
    kind: MemoryKind
    source: Source = field(default_factory=Source)
    created_at: float = 0.0
    expires_at: float | None = None
    superseded_by: str = ""

    def active(self, now: float) -> bool:
        """Recallable: not superseded and not expired at `now`."""
        return not self.superseded_by and (self.expires_at is None or now < self.expires_at)

    def to_json(self) -> str:
        data = asdict(self)
        data["subject"] = {"scope": self.subject.scope.value, "id": self.subject.id}
        data["kind"] = self.kind.value
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @staticmethod
    def from_json(raw: str | bytes) -> MemoryRecord:
        data = json.loads(raw)
        return MemoryRecord(
            memory_id=data["memory_id"],
            subject=Subject(Scope(data["subject"]["scope"]), data["subject"]["id"]),
            text=data["text"],
            kind=MemoryKind(data["kind"]),
            source=Source(**data["source"]),
            created_at=float(data["created_at"]),
            expires_at=None if data.get("expires_at") is None else float(data["expires_at"]),
            superseded_by=data.get("superseded_by", ""),
        )


def validate_text(text: str, max_chars: int) -> str:
    """The statement, stripped; InvalidRequestError when empty or over `max_chars` characters."""
    stripped = text.strip()
    if not stripped:
        raise InvalidRequestError("text", "required (a statement to remember)")
    if len(stripped) > max_chars:
        raise InvalidRequestError("text", f"{len(stripped)} characters exceed context.memory_max_chars ({max_chars})")
    return stripped


def check_memory_access(caller: Caller, subject: Subject) -> None:
    """PermissionDeniedError naming `memory:<scope>:<id>` unless `caller` may use `subject`'s memory.

    Operators may use any; a user their own (a token's subject, or a task's creator: the user the
    task acts for); an agent its own; tenant memory is the operators' only."""
    if caller.is_operator:
        return
    if subject.scope is Scope.USER and subject.id in {caller.subject, caller.creator} - {""}:
        return
    if subject.scope is Scope.AGENT and caller.agent_id and subject.id == caller.agent_id:
        return
    raise PermissionDeniedError(
        f"memory:{subject.scope.value}:{subject.id}",
        f"{echo(caller.agent_id or caller.subject)} may not use the memory of {subject.scope.value} {echo(subject.id)}",
    )


_CUE_TEXT = (
    "prefer preferred preference like always actually instead now rather correction please would "
    "going forward from now on 以后 今后 总是 其实 请 我"
)
_CUES = frozenset(tokenize(_CUE_TEXT))


def topic_words(text: str) -> frozenset[str]:
    """The words naming a record's topic and value: its tokens less the preference cues."""
    return frozenset(tokenize(text)) - _CUES


def same_topic(new: str, old: str) -> bool | None:
    """True: `new` corrects `old` (supersedes it); None: it restates it (same topic words); False:
    another topic. See the module docstring."""
    a, b = topic_words(new), topic_words(old)
    if a == b:
        return None
    return bool(a and b) and len(a & b) * 2 >= max(len(a), len(b))


# Explicit statements of preference only: a sentence that starts with (or, for Chinese, holds) a cue.
_SENTENCE_RE = re.compile(r"[^.!?。！？\n]+[.!?。！？]?")
_PREFERENCE_RES = (
    re.compile(
        r"^\s*(?:(?:from now on|actually|instead|going forward|no),?\s*)*"
        r"(?:i(?:'d| would)? (?:always |rather )?prefer|i always want|please always)\b",
        re.I,
    ),
    re.compile(r"(以后|今后|从现在起).*(都|总是|一律)|我(更)?(喜欢|偏好)|请(总是|一律)"),
)


def extract_statements(text: str) -> list[tuple[MemoryKind, str]]:
    """The explicit preference statements of a user's message ("I prefer ...", "以后...都用..."), each
    a sentence; nothing else is inferred (facts and events are remembered with Remember)."""
    found: list[tuple[MemoryKind, str]] = []
    for match in _SENTENCE_RE.finditer(text):
        sentence = match.group(0).strip()
        if sentence and any(r.search(sentence) for r in _PREFERENCE_RES):
            found.append((MemoryKind.PREFERENCE, sentence))
    return found


@dataclass(frozen=True)
class RankedMemory:
    """A recalled record and its score (higher first)."""

    record: MemoryRecord
    score: float


class MemoryRecall(Protocol):
    """Ranks a subject's records for a query; a semantic implementation can replace the lexical one."""

    def rank(self, records: Sequence[MemoryRecord], query: str, *, now: float, limit: int) -> list[RankedMemory]:
        """The at most `limit` active records relevant to `query`, best first."""


class LexicalMemoryRecall:
    """BM25 relevance (agentmesh/retrieval.py) times a recency weight: a record `half_life_days` old
    counts 3/4 of a new one, a very old one 1/2; records sharing no word with the query are left out."""

    def __init__(self, *, half_life_days: float = 30.0) -> None:
        self.half_life_days = half_life_days

    def rank(self, records: Sequence[MemoryRecord], query: str, *, now: float, limit: int) -> list[RankedMemory]:
        active = {r.memory_id: r for r in records if r.active(now)}
        if not active or limit <= 0:
            return []
        index: BM25[str] = BM25((r.memory_id, r.text) for r in active.values())
        ranked = []
        for memory_id, relevance in index.scores(tokenize(query)).items():
            if relevance <= 0:
                continue
            record = active[memory_id]
            age_days = max(0.0, now - record.created_at) / _DAY_S
            recency = 0.5 ** (age_days / self.half_life_days)
            ranked.append(RankedMemory(record, relevance * (0.5 + 0.5 * recency)))
        ranked.sort(key=lambda m: (-m.score, -m.record.created_at, m.record.memory_id))
        return ranked[:limit]


def render_memories(ranked: Sequence[RankedMemory]) -> str:
    """The system block's memory section: each record with its kind, date and source."""
    if not ranked:
        return ""
    lines = ["Remembered about the user (long-term memory, the user's own words, quoted):"]
    for item in ranked:
        r = item.record
        day = time.strftime("%Y-%m-%d", time.gmtime(r.created_at))
        # Quoted: the user's words, not instructions of the system prompt around them.
        lines.append(f'- [{r.kind.value}] "{r.text}" (source: {r.source.cite()}, {day}; memory {r.memory_id})')
    return "\n".join(lines)
