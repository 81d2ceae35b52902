"""In-memory fakes of the dispatcher's ports (context, tools, provider) for domain tests.

They behave like the real services where the dispatcher depends on it: the session log counts
messages, tool calls with a seen idempotency key replay the finished outcome instead of running
again, approvals are held until resolved, and the provider is a reactive policy over the prompt.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentmesh.chat import ToolCall, Usage, tool_error_text
from agentmesh.errors import (
    AgentmeshError,
    ErrorCode,
    FailedPreconditionError,
    InvalidRequestError,
    NotFoundError,
    error_to_json,
)
from dispatcher_svc.model import ApprovalRecord, ModelReply, PendingApproval, SentPrompt, ToolOutcome, ToolOutput
from dispatcher_svc.ports import (
    Appended,
    Attachment,
    CallOptions,
    ContextBlockInfo,
    ContextView,
    HopSummary,
    Ports,
    SessionInfo,
    SessionSpec,
    StoredResult,
    ToolInfo,
)


def tokens(text: str) -> int:
    return len(text) // 4 + 1


def render(outcome: ToolOutcome) -> str:
    """What a tool message says to the model (context_svc's job in the real system)."""
    if outcome.error is not None:
        return tool_error_text(outcome.error, outcome.tool_name, outcome.correction)
    if outcome.pending is not None:
        return f"pending approval {outcome.pending.approval_id}"
    assert outcome.output is not None
    if outcome.output.ref is not None:
        return f"ref {outcome.output.ref.ref_id}\n{outcome.output.digest}"
    return outcome.output.inline or ""


@dataclass
class FakeContext:
    sessions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    specs: dict[str, SessionSpec] = field(default_factory=dict)
    fail_next: list[AgentmeshError] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)
    hops: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    """Every BuildHandoff: (parent session, child session, brief)."""
    appended: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    """(session, "m:<client_message_id>" | "c:<tool_call_id>") -> (index, content): context_svc's dedupe."""
    dedupe_tool_results: bool = True
    """context_svc appends a tool result once per tool_call_id (the dispatcher makes ids unique in a
    session, whatever ids the model or a policy used)."""
    newest: dict[str, tuple[str, int]] = field(default_factory=dict)
    """session -> (newest task, generation), as AttachTask keeps it (absent: the session id, 0)."""
    attach_age_s: float = 3600.0
    """The newest task's age reported when an attach is refused."""
    views_on_append: bool = True
    """An append asked for the context built after it answers with it, and CreateSession appends the
    goal when asked (False: as a context_svc of an earlier release, which ignores both requests, so the
    loop appends the goal and calls BuildContext itself)."""
    results_with_message: bool = True
    """AppendMessage appends the `following` tool results after the message (False: as a context_svc of
    an earlier release, which ignores them, so the loop appends each result itself)."""

    def _with_view(self, appended: Appended, session_id: str, build_tokens: int | None) -> Appended:
        if build_tokens is None or not self.views_on_append:
            return appended
        self.calls["view_on_append"] += 1
        return replace(appended, view=self._view(session_id, build_tokens))

    def _repeat(self, session_id: str, key: str, content: Any) -> Appended | None:
        """The original position of a repeated append, as context_svc answers it; None: a new one."""
        found = self.appended.get((session_id, key))
        if found is None:
            return None
        index, original = found
        if original != content:
            raise FailedPreconditionError(
                f"{key} was already appended at position {index} with other content", metadata={"index": str(index)}
            )
        return Appended(index, self.sessions[session_id][index]["tokens"], already=True)

    def _maybe_fail(self, what: str) -> None:
        self.calls[what] += 1
        if self.fail_next:
            raise self.fail_next.pop(0)

    async def create_session(
        self, spec: SessionSpec, opts: CallOptions, *, goal_message_id: str = "", build_tokens: int | None = None
    ) -> SessionInfo:
        self._maybe_fail("create_session")
        if spec.session_id in self.sessions:
            return await self.get_session(spec.session_id, opts)
        self.sessions[spec.session_id] = []
        self.specs[spec.session_id] = spec
        if not goal_message_id or not self.views_on_append:  # an earlier release appends nothing here
            return SessionInfo(0, 0)
        self.calls["goal_on_create"] += 1
        goal = self._append_message(spec.session_id, "user", spec.goal, (), goal_message_id, build_tokens)
        return SessionInfo(0, 0, goal=goal)

    async def get_session(self, session_id: str, opts: CallOptions) -> SessionInfo:
        if session_id not in self.sessions:
            raise NotFoundError(f"session {session_id} not found")
        log = self.sessions[session_id]
        return SessionInfo(len(log), sum(m["tokens"] for m in log))

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
        """AttachTask's compare-and-set on the newest task (no owner check: the fake has no caller)."""
        self._maybe_fail("attach_task")
        if session_id not in self.sessions:
            raise NotFoundError(f"session {session_id} not found")
        newest, generation = self.newest.get(session_id, (session_id, 0))
        expected = bool(expected_task_id) and (newest, generation) == (expected_task_id, expected_generation)
        if newest != task_id and not expected:
            return Attachment(False, newest, generation, self.attach_age_s)
        self.newest[session_id] = (task_id, generation + 1)
        return Attachment(True, task_id, generation + 1, 0.0)

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
        self._maybe_fail("append_message")
        if not following or not self.results_with_message:
            return self._append_message(session_id, role, content, tool_calls, client_message_id, build_tokens)
        self.calls["results_with_message"] += 1
        calls = {call.id for call in tool_calls}
        if any(outcome.tool_call_id not in calls for outcome in following):
            raise InvalidRequestError("following_results", "a result answers no tool call of the message")
        appended = self._append_message(session_id, role, content, tool_calls, client_message_id, None)
        # Each result as AppendToolResult appends it (a subclass's override included): its failure is
        # the call's, after the message landed, as in context_svc.
        results = [await self.append_tool_result(session_id, outcome, opts) for outcome in following]
        last = self._with_view(results[-1], session_id, build_tokens)
        return replace(appended, view=last.view, following=tuple(results))

    def _append_message(
        self,
        session_id: str,
        role: str,
        content: str,
        tool_calls: Sequence[ToolCall],
        client_message_id: str,
        build_tokens: int | None,
    ) -> Appended:
        key, sent = f"m:{client_message_id}", (role, content, tuple(tool_calls))
        if client_message_id and (repeat := self._repeat(session_id, key, sent)) is not None:
            return self._with_view(repeat, session_id, build_tokens)
        log = self.sessions[session_id]
        count = tokens(content)
        log.append({"role": role, "content": content, "tool_calls": list(tool_calls), "tokens": count})
        if client_message_id:
            self.appended[(session_id, key)] = (len(log) - 1, sent)
        return self._with_view(Appended(len(log) - 1, count), session_id, build_tokens)

    async def append_tool_result(
        self, session_id: str, outcome: ToolOutcome, opts: CallOptions, *, build_tokens: int | None = None
    ) -> Appended:
        self._maybe_fail("append_tool_result")
        return self._append_tool_result(session_id, outcome, build_tokens)

    def _append_tool_result(self, session_id: str, outcome: ToolOutcome, build_tokens: int | None) -> Appended:
        key = f"c:{outcome.tool_call_id}"
        error = error_to_json(outcome.error) if outcome.error is not None else None
        sent = (outcome.tool_name, outcome.output, error, outcome.pending, outcome.correction)  # not the stats
        if self.dedupe_tool_results and (repeat := self._repeat(session_id, key, sent)) is not None:
            return self._with_view(repeat, session_id, build_tokens)
        log = self.sessions[session_id]
        text = render(outcome)
        log.append(
            {
                "role": "tool",
                "content": text,
                "tool_call_id": outcome.tool_call_id,
                "name": outcome.tool_name,
                "outcome": outcome,
                "tokens": tokens(text),
            }
        )
        self.appended[(session_id, key)] = (len(log) - 1, sent)
        return self._with_view(Appended(len(log) - 1, tokens(text)), session_id, build_tokens)

    async def tool_result(self, session_id: str, tool_call_id: str, opts: CallOptions) -> StoredResult | None:
        """GetToolResult: the result appended for the call, as appended."""
        self._maybe_fail("tool_result")
        found = self.appended.get((session_id, f"c:{tool_call_id}"))
        if found is None:
            return None
        message = self.sessions[session_id][found[0]]
        return StoredResult(message["outcome"], found[0], message["tokens"])

    async def build_context(self, session_id: str, budget_tokens: int, opts: CallOptions) -> ContextView:
        self._maybe_fail("build_context")
        return self._view(session_id, budget_tokens)

    def _view(self, session_id: str, budget_tokens: int) -> ContextView:
        spec = self.specs[session_id]
        messages = [{"role": "system", "content": spec.system_prompt}, *self.sessions[session_id]]
        total = sum(tokens(m["content"]) for m in messages)
        return ContextView(
            messages=messages,
            total_tokens=total,
            budget_tokens=budget_tokens or 12000,
            blocks=[ContextBlockInfo("SYSTEM", tokens(spec.system_prompt), 1500, 1)],
        )

    async def build_handoff(
        self, session_id: str, child_session_id: str, brief: Mapping[str, Any], opts: CallOptions
    ) -> HopSummary:
        """The hop text without the check (context_svc's tests have it): cited facts count as confirmed."""
        self._maybe_fail("build_handoff")
        self.hops.append((session_id, child_session_id, dict(brief)))
        facts = list(brief.get("facts", []))
        confirmed = sum(1 for f in facts if "citation" in f)
        text = "\n".join([f"Handoff: {brief['summary']}", *(f"- {f['statement']}" for f in facts)])
        return HopSummary(text, tokens(text), confirmed, len(facts) - confirmed)


ToolHandler = Callable[[ToolCall], "ToolOutcome | AgentmeshError | str"]


@dataclass
class FakeTools:
    """Tools by name; a handler returns an outcome, an error (in-band) or inline text."""

    handlers: dict[str, ToolHandler] = field(default_factory=dict)
    fallbacks: dict[str, str] = field(default_factory=dict)
    runs: Counter[str] = field(default_factory=Counter)
    """Real executions per tool (replays excluded): the side-effect counter."""
    keys: dict[str, ToolOutcome] = field(default_factory=dict)
    approvals: dict[str, tuple[PendingApproval, str]] = field(default_factory=dict)
    needs_approval: set[str] = field(default_factory=set)
    identities: list[str] = field(default_factory=list)
    rpc_failures: list[AgentmeshError] = field(default_factory=list)
    writes: set[str] = field(default_factory=set)
    """Tools of access write (the claims check's actions, issue 41)."""
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def info(self, name: str) -> ToolInfo:
        return ToolInfo(
            name=name,
            group="test",
            description=f"{name} tool",
            fallback_tool=self.fallbacks.get(name, ""),
            write=name in self.writes or name in self.needs_approval,
        )

    async def discover(self, goal: str, k: int, opts: CallOptions) -> list[ToolInfo]:
        return [self.info(n) for n in sorted(self.handlers)][:k]

    async def list_tools(self, opts: CallOptions) -> list[ToolInfo]:
        return [self.info(n) for n in sorted(self.handlers)]

    def _run(self, call: ToolCall) -> ToolOutcome:
        handler = self.handlers.get(call.name)
        if handler is None:
            err = AgentmeshError(ErrorCode.UNKNOWN_TOOL, f"no tool {call.name!r}")
            return ToolOutcome(call.id, call.name, error=err)
        self.runs[call.name] += 1
        result = handler(call)
        if isinstance(result, ToolOutcome):
            return result
        if isinstance(result, AgentmeshError):
            if not result.fallback_tool and call.name in self.fallbacks:
                result.fallback_tool = self.fallbacks[call.name]
            return ToolOutcome(call.id, call.name, error=result)
        return ToolOutcome(call.id, call.name, output=ToolOutput(inline=result, result_type="text"))

    async def execute(
        self, call: ToolCall, *, session_id: str, idempotency_key: str, goal: str, opts: CallOptions
    ) -> ToolOutcome:
        self.identities.append(opts.identity_token)
        if self.rpc_failures:
            raise self.rpc_failures.pop(0)
        if idempotency_key in self.keys:
            return self.keys[idempotency_key]
        if call.name in self.needs_approval:
            approval_id = f"ap-{next(self._ids)}"
            pending = PendingApproval(
                approval_id=approval_id,
                plan=call,
                impact=f"{call.name} changes things",
                arguments_sha256=call.arguments_sha256(),
                requested_by="agent",
            )
            self.approvals[approval_id] = (pending, "PENDING")
            return ToolOutcome(call.id, call.name, pending=pending)
        outcome = self._run(call)
        if outcome.error is None or not outcome.error.retryable:
            self.keys[idempotency_key] = outcome
        return outcome

    async def resolve_approval(
        self,
        approval_id: str,
        approve: bool,
        reason: str,
        arguments_sha256: str,
        timeout_s: float,
        settlement: str = "",
    ) -> tuple[ApprovalRecord, ToolOutcome | None]:
        pending, state = self.approvals[approval_id]
        if state != "PENDING":
            raise FailedPreconditionError(f"approval {approval_id} is {state}")
        if arguments_sha256 and arguments_sha256 != pending.arguments_sha256:
            raise FailedPreconditionError("arguments changed")
        if approve:
            self.approvals[approval_id] = (pending, "APPROVED")
            return ApprovalRecord(pending, "APPROVED", "operator", reason), self._run(pending.plan)
        self.approvals[approval_id] = (pending, "DENIED")
        denied = AgentmeshError(ErrorCode.APPROVAL_DENIED, f"denied: {reason}")
        return ApprovalRecord(pending, "DENIED", "operator", reason), ToolOutcome(
            pending.plan.id, pending.plan.name, error=denied
        )

    async def get_approval(self, approval_id: str, timeout_s: float, opts: CallOptions | None = None) -> ApprovalRecord:
        pending, state = self.approvals[approval_id]
        return ApprovalRecord(pending, state)


@dataclass
class Prompt:
    """What the fake model sees."""

    messages: list[dict[str, Any]]
    tools: list[str]
    call_index: int

    @property
    def last(self) -> dict[str, Any]:
        return self.messages[-1]

    def tool_messages(self) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["role"] == "tool"]


Policy = Callable[[Prompt], ModelReply]


@dataclass
class FakeProvider:
    policy: Policy
    calls: int = 0
    prompts: list[Prompt] = field(default_factory=list)
    rpc_failures: list[AgentmeshError] = field(default_factory=list)
    delay_s: float = 0.0
    schemas: list[str] = field(default_factory=list)
    """The response_schema of every Generate (issue 41)."""

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
        self.schemas.append(response_schema)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.rpc_failures:
            raise self.rpc_failures.pop(0)
        prompt = Prompt([dict(m) for m in messages if isinstance(m, dict)], [t.name for t in tools], self.calls)
        self.calls += 1
        self.prompts.append(prompt)
        reply = self.policy(prompt)
        if reply.usage == Usage():
            reply = ModelReply(
                reply.text, reply.tool_calls, Usage(sum(tokens(m["content"]) for m in prompt.messages), 10), "fake/m"
            )
        if include_request:
            # What a chat completions body of this prompt would hold (the real one is provider_svc's).
            body = {"model": model, "messages": prompt.messages, "tools": prompt.tools, "max_tokens": max_tokens}
            sent = SentPrompt("openai.chat.completions", json.dumps(body, default=str, separators=(",", ":")))
            reply = ModelReply(reply.text, reply.tool_calls, reply.usage, reply.model, reply.finish_reason, sent)
        return reply


def call(name: str, args: dict[str, Any] | str, call_id: str = "") -> ToolCall:
    text = args if isinstance(args, str) else json.dumps(args)
    return ToolCall(id=call_id or f"c-{name}", name=name, arguments_json=text)


def reply(*calls: ToolCall, text: str = "") -> ModelReply:
    return ModelReply(text=text, tool_calls=tuple(calls))


def ports(context: FakeContext, tools: FakeTools, provider: FakeProvider) -> Ports:
    return Ports(context=context, tools=tools, provider=provider)
