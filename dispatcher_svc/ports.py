"""What the loop needs from the other services, as small protocols.

`adapters.py` implements them over gRPC with `agentmesh.rpc.channels.ServiceClients`; unit tests implement
them with in-memory fakes. Every method raises `AgentmeshError` for a fault of the call itself
(UNAVAILABLE, DEADLINE_EXCEEDED, ...); in-band tool outcomes come back as `ToolOutcome`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentmesh.chat import ToolCall
from dispatcher_svc.model import ApprovalRecord, ModelReply, ToolOutcome
from dispatcher_svc.routing import ModelCatalog


@dataclass(frozen=True, slots=True)
class CallOptions:
    """Per-call facts every downstream call carries."""

    identity_token: str
    """The task's identity token (x-agentmesh-identity); "" forwards the incoming caller's own token
    (a call made while serving an RPC, on that caller's behalf)."""
    request_id: str
    """The task's request id (x-request-id), so one request id spans the task's whole trace."""
    timeout_s: float


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """A tool as offered to the model; `spec` is the adapter's own representation, passed back as is."""

    name: str
    group: str = ""
    description: str = ""
    fallback_tool: str = ""
    spec: object = None
    write: bool = False
    """The tool changes something (access write): what the claims check counts as an action."""
    input_schema_json: str = ""
    """For a tool of the dispatcher's own (a handoff, `spec` None): its arguments' JSON Schema."""


@dataclass(frozen=True, slots=True)
class ContextBlockInfo:
    kind: str
    tokens: int
    budget_tokens: int
    message_count: int


@dataclass(frozen=True, slots=True)
class ContextView:
    """A built context; `messages` are the adapter's own objects, passed to `generate` unchanged."""

    messages: Sequence[object]
    total_tokens: int
    budget_tokens: int
    blocks: Sequence[ContextBlockInfo] = ()
    summarized_messages: int = 0
    dropped_messages: int = 0
    compacted: bool = False


@dataclass(frozen=True, slots=True)
class SessionInfo:
    message_count: int
    total_tokens: int
    goal: Appended | None = None
    """The goal's append CreateSession made (`goal_message_id`); None when it made none."""


@dataclass(frozen=True, slots=True)
class Appended:
    """Where an appended message landed in the session log."""

    index: int
    token_count: int
    already: bool = False
    """True: context_svc had this message already (same tool_call_id, or same client_message_id, and
    same content); nothing was appended and `index`/`token_count` are the original's."""
    view: ContextView | None = None
    """The context built right after the append, when the call asked for it (`build_tokens`)."""
    following: tuple[Appended, ...] = ()
    """Where each of `append_message`'s `following` results landed, in order; empty when none was
    asked for, or when a context_svc of an earlier release appended none (the caller appends them)."""


@dataclass(frozen=True, slots=True)
class StoredResult:
    """A tool result read back from the session log (GetToolResult): the truth a resumed run
    continues with instead of running the call again (issue 39)."""

    outcome: ToolOutcome
    index: int
    token_count: int


@dataclass(frozen=True, slots=True)
class Attachment:
    """What AttachTask did (context_svc/attach.py): whether the task is now the session's newest."""

    attached: bool
    newest_task_id: str
    generation: int
    newest_age_s: float = 0.0


@dataclass(frozen=True, slots=True)
class SessionSpec:
    session_id: str
    agent_id: str
    goal: str
    system_prompt: str
    max_context_tokens: int = 0
    sub_goals: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class HopSummary:
    """What context_svc BuildHandoff made of a handoff brief: the next agent's first message and its counts."""

    text: str
    token_count: int
    confirmed: int = 0
    inferred: int = 0
    demoted: int = 0
    record_ref_id: str = ""
    granted: int = 0


class ContextPort(Protocol):
    async def create_session(
        self, spec: SessionSpec, opts: CallOptions, *, goal_message_id: str = "", build_tokens: int | None = None
    ) -> SessionInfo:
        """Creates the session; if it already exists (a resumed task) returns its counters. With
        `goal_message_id` the goal is appended in the same call, as `append_message` would under that
        client_message_id (`SessionInfo.goal`; None when it was not: the caller appends it), with
        the view `build_tokens` asks for."""
        ...

    async def get_session(self, session_id: str, opts: CallOptions) -> SessionInfo: ...

    async def append_message(
        self,
        session_id: str,
        role: str,
        content: str,
        tool_calls: Sequence[ToolCall],
        opts: CallOptions,
        *,
        client_message_id: str = "",
        build_tokens: int | None = None,
        following: Sequence[ToolOutcome] = (),
    ) -> Appended:
        """`role` is "user" or "assistant". With `client_message_id` (at most 128 printable
        characters, no whitespace) the append happens once: a repeat with the same content returns
        the original position (`Appended.already`), other content is FAILED_PRECONDITION. With
        `build_tokens` (0: the session's budget) the answer also carries the context built right
        after the append (`Appended.view`; None from a context_svc that does not build one).
        `following`: results of the message's tool calls appended right after it, each as
        `append_tool_result` would (`Appended.following`; the view then comes after the last). A
        context_svc of an earlier release appends only the message: `following` is empty, and its
        view (if any) is the message's, not the results'."""
        ...

    async def append_tool_result(
        self, session_id: str, outcome: ToolOutcome, opts: CallOptions, *, build_tokens: int | None = None
    ) -> Appended:
        """Once per `outcome.tool_call_id`: a repeat with the same content (execution stats aside)
        returns the original position (`Appended.already`), other content is FAILED_PRECONDITION.
        `build_tokens` as in `append_message`."""
        ...

    async def tool_result(self, session_id: str, tool_call_id: str, opts: CallOptions) -> StoredResult | None:
        """The result appended for `tool_call_id`, as appended; None when there is none (or the
        context_svc is of a release without GetToolResult)."""
        ...

    async def build_context(self, session_id: str, budget_tokens: int, opts: CallOptions) -> ContextView: ...

    async def attach_task(
        self,
        session_id: str,
        task_id: str,
        agent_id: str,
        opts: CallOptions,
        *,
        expected_task_id: str = "",
        expected_generation: int = 0,
    ) -> Attachment:
        """Makes `task_id` the session's newest task if the newest is `expected_task_id` at
        `expected_generation` (or `task_id` already), else reports the newest (`attached` False).
        NOT_FOUND for an unknown session; PERMISSION_DENIED unless `opts`' identity is the session's owner
        or an operator, and `agent_id` the session's agent."""
        ...

    async def build_handoff(
        self, session_id: str, child_session_id: str, brief: Mapping[str, Any], opts: CallOptions
    ) -> HopSummary:
        """The hop summary of `brief` (handoffs.BRIEF_SCHEMA's JSON form), its confirmed facts checked; the
        child session is granted the cited payloads. The same request again gives the same summary."""
        ...


class ToolPort(Protocol):
    async def discover(self, goal: str, k: int, opts: CallOptions) -> list[ToolInfo]:
        """The top-k tools for the goal that the token permits."""
        ...

    async def list_tools(self, opts: CallOptions) -> list[ToolInfo]: ...

    async def execute(
        self, call: ToolCall, *, session_id: str, idempotency_key: str, goal: str, opts: CallOptions
    ) -> ToolOutcome: ...

    async def resolve_approval(
        self,
        approval_id: str,
        approve: bool,
        reason: str,
        arguments_sha256: str,
        timeout_s: float,
        settlement: str = "",
    ) -> tuple[ApprovalRecord, ToolOutcome | None]:
        """Forwarded with the caller's (operator's) own identity, never the task's."""
        ...

    async def get_approval(self, approval_id: str, timeout_s: float, opts: CallOptions | None = None) -> ApprovalRecord:
        """Read with `opts`' identity when given (a sweep acting for the task), else the caller's own."""
        ...


class ProviderPort(Protocol):
    async def generate(
        self,
        *,
        model: str,
        task_tag: str,
        messages: Sequence[object],
        tools: Sequence[ToolInfo],
        temperature: float | None,
        max_tokens: int,
        agent_id: str,
        opts: CallOptions,
        include_request: bool = False,
        response_schema: str = "",
    ) -> ModelReply:
        """With `include_request`, the reply's `sent` is the request as provider_svc sent it (masked);
        `response_schema` (JSON text) asks for provider-native structured output."""
        ...


@dataclass(frozen=True)
class Ports:
    context: ContextPort
    tools: ToolPort
    provider: ProviderPort
    models: ModelCatalog | None = None
    """provider_svc's ListModels for capability routing; None: models are not checked."""
