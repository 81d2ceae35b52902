"""Domain objects of context_svc (no grpc, no protobuf): messages, sessions, summaries, views.

Messages and summaries are stored in Redis as compact JSON (`to_json` / `from_json`); a stored
message is immutable, so its token count is computed once when it is appended.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from agentmesh.chat import Correction, Role, ToolCall
from agentmesh.errors import AgentmeshError, error_from_json, error_to_json
from agentmesh.payload_value import StoredPayload

__all__ = [
    "Appended",
    "Block",
    "BlockKind",
    "Budget",
    "Caller",
    "ContextView",
    "IndexEntry",
    "Message",
    "OpenItem",
    "PendingInfo",
    "Role",
    "Session",
    "SessionAccess",
    "Summary",
    "ToolCall",
    "ToolOutcome",
    "message_hash",
    "tool_outcome_hash",
]


def _ref_to_json(ref: StoredPayload) -> dict[str, Any]:
    return {
        "ref_id": ref.ref_id,
        "session_id": ref.session_id,
        "size": ref.size_bytes,
        "media_type": ref.media_type,
        "sha256": ref.sha256,
        "expire_at": ref.expire_at,
    }


def _ref_from_json(data: dict[str, Any]) -> StoredPayload:
    return StoredPayload(
        ref_id=data["ref_id"],
        session_id=data["session_id"],
        size_bytes=int(data["size"]),
        media_type=data["media_type"],
        sha256=data["sha256"],
        expire_at=float(data["expire_at"]),
    )


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a session's log."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    name: str = ""
    token_count: int = 0
    create_time: float = 0.0
    ref: StoredPayload | None = None
    """Payload holding the full content (offloaded by tool_svc or here); content is the digest."""
    error_code: str = ""
    """For tool results that failed: the ErrorCode name (open questions track it)."""
    fallback_tool: str = ""
    error: AgentmeshError | None = None
    """For tool results that failed: the typed error (the content holds it rendered)."""
    correction: Correction | None = None
    """For tool results that failed: the dispatcher's note (the content holds it rendered)."""
    pending: PendingInfo | None = None
    """For tool results that wait for an approval (the content holds it rendered)."""
    structured: bool | None = None
    """For tool outputs: the result type as appended (None: unspecified); GetToolResult reads it back."""
    redacted: bool = False
    """For tool outputs: secrets were redacted (the content's header says so too)."""
    index: int = -1
    """Position in the log; set when read back (not stored)."""

    def to_json(self) -> str:
        data: dict[str, Any] = {"r": self.role.value, "t": self.token_count, "ts": round(self.create_time, 6)}
        if self.content:
            data["c"] = self.content
        if self.tool_calls:
            data["tc"] = [[c.id, c.name, c.arguments_json] for c in self.tool_calls]
        if self.tool_call_id:
            data["id"] = self.tool_call_id
        if self.name:
            data["n"] = self.name
        if self.ref is not None:
            data["ref"] = _ref_to_json(self.ref)
        if self.error_code:
            data["e"] = self.error_code
        if self.fallback_tool:
            data["fb"] = self.fallback_tool
        if self.error is not None:
            data["err"] = error_to_json(self.error)
        if self.correction is not None:
            data["corr"] = self.correction.to_json()
        if self.pending is not None:
            data["pa"] = [self.pending.approval_id, self.pending.impact, self.pending.expire_at]
        if self.structured is not None:
            data["st"] = self.structured
        if self.redacted:
            data["rd"] = True
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes, index: int = -1) -> Message:
        return cls.from_dict(json.loads(raw), index)

    @classmethod
    def from_dict(cls, data: dict[str, Any], index: int = -1) -> Message:
        return cls(
            role=Role(data["r"]),
            content=data.get("c", ""),
            tool_calls=tuple(ToolCall(*call) for call in data.get("tc", ())),
            tool_call_id=data.get("id", ""),
            name=data.get("n", ""),
            token_count=int(data.get("t", 0)),
            create_time=float(data.get("ts", 0.0)),
            ref=_ref_from_json(data["ref"]) if "ref" in data else None,
            error_code=data.get("e", ""),
            fallback_tool=data.get("fb", ""),
            error=error_from_json(data["err"]) if "err" in data else None,
            correction=Correction.from_json(data["corr"]) if "corr" in data else None,
            pending=PendingInfo(str(data["pa"][0]), str(data["pa"][1]), float(data["pa"][2])) if "pa" in data else None,
            structured=bool(data["st"]) if "st" in data else None,
            redacted=bool(data.get("rd", False)),
            index=index,
        )

    def index_entry(self) -> IndexEntry:
        calls = tuple(c.id for c in self.tool_calls)
        return IndexEntry(role=self.role, tokens=self.token_count, call_ids=calls, tool_call_id=self.tool_call_id)

    def at(self, index: int) -> Message:
        return replace(self, index=index)


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """What BuildContext needs of a message without its content: role, tokens, call pairing."""

    role: Role
    tokens: int
    call_ids: tuple[str, ...] = ()
    """For an assistant message: the ids of its tool calls."""
    tool_call_id: str = ""
    """For a tool message: the call it answers."""

    def to_json(self) -> str:
        data: dict[str, Any] = {"r": self.role.value[0], "t": self.tokens}
        if self.call_ids:
            data["c"] = list(self.call_ids)
        if self.tool_call_id:
            data["i"] = self.tool_call_id
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> IndexEntry:
        return cls.from_dict(json.loads(raw))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexEntry:
        return cls(
            role=_ROLE_BY_LETTER[data["r"]],
            tokens=int(data["t"]),
            call_ids=tuple(data.get("c", ())),
            tool_call_id=data.get("i", ""),
        )


_ROLE_BY_LETTER = {role.value[0]: role for role in Role}


@dataclass(frozen=True)
class Budget:
    """A session's budget settings, resolved once at creation (immutable with the session)."""

    max_context_tokens: int
    reserve_system_prompt_tokens: int
    summary_trigger_tokens: int
    keep_recent_messages: int
    encoding: str
    system_ratio: float
    recent_ratio: float
    summary_ratio: float
    reply_ratio: float
    summary_model: str | None = None

    def to_json(self) -> str:
        return json.dumps(self.__dict__, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> Budget:
        return cls(**json.loads(raw))


@dataclass(frozen=True)
class Session:
    """A session's immutable global state and its counters."""

    session_id: str
    agent_id: str
    goal: str
    sub_goals: tuple[str, ...]
    system_prompt: str
    budget: Budget
    create_time: float
    epoch: str
    """Random per creation: caches keyed by it never serve a deleted and re-created session."""
    message_count: int = 0
    total_tokens: int = 0
    summary_count: int = 0
    summarized_upto: int = -1
    """Index of the last message covered by the persisted summary (-1: none)."""
    summary_rejections: int = 0
    """LLM summaries rejected for dropping facts."""
    owner: str = ""
    """Who the session is for: the creator of the task that opened it (else the creating token's
    subject); "" for a session created before owners were recorded."""
    tasks: tuple[str, ...] | None = None
    """The tasks attached to the session, whose tokens may use it (context_svc/access.py); None for a
    session created before sessions recorded them."""
    newest_task_id: str = ""
    """The session's newest task (context_svc/attach.py): the session id until a task continues it."""

    @property
    def access(self) -> SessionAccess:
        return SessionAccess(agent_id=self.agent_id, tasks=self.tasks)


@dataclass(frozen=True)
class SessionAccess:
    """What decides who may use a session (context_svc/access.py)."""

    agent_id: str
    tasks: tuple[str, ...] | None
    """The attached tasks; None for a session created before sessions recorded them."""


@dataclass(frozen=True)
class OpenItem:
    """An open question: a user question not yet answered or a tool error not yet resolved."""

    kind: str
    """"question", "tool_error" or "note" (an LLM summary's free text)."""
    index: int
    text: str
    tool: str = ""
    fallback_tool: str = ""

    def render(self) -> str:
        if self.kind == "question":
            return f"user asked (message {self.index}): {self.text}"
        if self.kind == "tool_error":
            return f"tool {self.tool} failed (message {self.index}): {self.text}"
        return self.text


@dataclass(frozen=True)
class Summary:
    """The structured summary of older turns (docs/design.md §4): intent, key data, open questions, actions."""

    intents: tuple[str, ...]
    key_data: tuple[str, ...]
    open_items: tuple[OpenItem, ...]
    actions_taken: tuple[str, ...]
    first_index: int
    last_index: int
    summarizer: str
    """"extractive" or "llm"."""
    token_count: int = 0

    @property
    def user_intent(self) -> str:
        return " | ".join(self.intents)

    @property
    def open_questions(self) -> tuple[str, ...]:
        return tuple(item.render() for item in self.open_items)

    def render(self) -> str:
        """The full text of the summary (what faithfulness is checked on)."""
        lines = [f"Summary of messages {self.first_index}-{self.last_index} ({self.summarizer})"]
        lines.append(f"User intent: {self.user_intent or '-'}")
        lines.append("Key data:")
        lines += [f"- {line}" for line in self.key_data]
        lines.append("Open questions:")
        lines += [f"- {line}" for line in self.open_questions] or ["- none"]
        lines.append("Actions taken:")
        lines += [f"- {line}" for line in self.actions_taken] or ["- none"]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(
            {
                "intents": list(self.intents),
                "key_data": list(self.key_data),
                "open": [item.__dict__ for item in self.open_items],
                "actions": list(self.actions_taken),
                "first": self.first_index,
                "last": self.last_index,
                "summarizer": self.summarizer,
                "tokens": self.token_count,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> Summary:
        data = json.loads(raw)
        return cls(
            intents=tuple(data["intents"]),
            key_data=tuple(data["key_data"]),
            open_items=tuple(OpenItem(**item) for item in data["open"]),
            actions_taken=tuple(data["actions"]),
            first_index=int(data["first"]),
            last_index=int(data["last"]),
            summarizer=data["summarizer"],
            token_count=int(data.get("tokens", 0)),
        )


class BlockKind(enum.StrEnum):
    SYSTEM = "system"
    SUMMARY = "summary"
    RECENT = "recent"
    OBSERVATIONS = "observations"


@dataclass(frozen=True)
class Block:
    """Token accounting of one block of a built context."""

    kind: BlockKind
    tokens: int
    budget_tokens: int
    message_count: int
    text: str = ""


@dataclass(frozen=True)
class ContextView:
    """The context that fits the budget, with its per-block breakdown."""

    messages: tuple[Message, ...]
    blocks: tuple[Block, ...]
    total_tokens: int
    budget_tokens: int
    summarized_messages: int
    dropped_messages: int
    compacted: bool
    debug_text: str = ""


@dataclass(frozen=True)
class Caller:
    """Who calls, from the verified identity token (never from a request field)."""

    subject: str
    agent_id: str = ""
    is_operator: bool = False
    task_id: str = ""
    """The task a task's token acts for ("" for other tokens)."""
    creator: str = ""
    """For a task's token: the subject that started the task."""


@dataclass(frozen=True)
class PendingInfo:
    """A tool call waiting for a human approval."""

    approval_id: str
    impact: str = ""
    expire_at: float = 0.0


@dataclass(frozen=True)
class ToolOutcome:
    """A ToolResult in domain terms: exactly one of output (inline or ref), error, pending."""

    tool_call_id: str
    tool_name: str
    inline: str | None = None
    ref: StoredPayload | None = None
    digest: str = ""
    structured: bool | None = None
    """True: JSON; False: text; None: unspecified (sniffed)."""
    redacted: bool = False
    error: AgentmeshError | None = None
    """The typed error of a failed call."""
    correction: Correction | None = None
    """The dispatcher's note on a failed call."""
    pending: PendingInfo | None = None
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Appended:
    """Where an append landed: a new message, or (already) the one an earlier identical append stored."""

    index: int
    token_count: int
    """As stored (a repeat returns the original count)."""
    ref: StoredPayload | None = None
    """The payload context_svc offloaded the content to (AppendToolResult), if it did."""
    already: bool = False
    """True: a message with this dedupe id and content was in the log already; nothing was appended."""


def _canonical_sha256(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def message_hash(message: Message) -> str:
    """The content hash an AppendMessage with a client_message_id is deduplicated by: role, content,
    tool calls, tool_call_id and name as the client sent them (not create_time, token counts or
    the offloaded form)."""
    return _canonical_sha256(
        {
            "role": message.role.value,
            "content": message.content,
            "tool_calls": [[c.id, c.name, c.arguments_json] for c in message.tool_calls],
            "tool_call_id": message.tool_call_id,
            "name": message.name,
        }
    )


def tool_outcome_hash(outcome: ToolOutcome) -> str:
    """The content hash AppendToolResult is deduplicated by (per tool_call_id): the call id, the
    tool, and the result as appended: the output (inline text or ref id, result type, redacted),
    the error with its correction, or the pending approval. Never volatile facts (execution stats:
    duration, attempts, replayed; a ref's expiry; the digest, which the ref id's content determines)."""
    data: dict[str, Any] = {"id": outcome.tool_call_id, "tool": outcome.tool_name}
    if outcome.error is not None:
        data["error"] = error_to_json(outcome.error)
        if outcome.correction is not None:  # appended with errors only (engine.append_tool_result)
            data["correction"] = outcome.correction.to_json()
    elif outcome.pending is not None:
        p = outcome.pending
        data["pending"] = [p.approval_id, p.impact, p.expire_at]
    else:
        if outcome.ref is not None:
            data["ref"] = outcome.ref.ref_id
        else:
            data["inline"] = outcome.inline or ""
        data["structured"] = outcome.structured
        data["redacted"] = outcome.redacted
    return _canonical_sha256(data)
