"""`agentmesh run <agent> "<goal>"`: start a task and stream its events to the terminal.

One readable line per event; on a terminal a progress indicator on stderr while nothing happens
(heartbeats); approval prompts that show the change plan and its impact, answered interactively
or by `--approve` / `--deny`. A broken stream is resumed with WatchTask(after_sequence), so no
event is shown twice or missed. Exit code: 0 SUCCEEDED, 1 any other end, 2 bad request, 3 the
dispatcher cannot be reached.

Separation of duties (`auth.separation_of_duties`, on by default): the operator token that starts the
task may not resolve its approvals, so decisions are sent with a second identity: `--approver-token`;
without one, in environment `dev` only, a token minted for "<user>-approver" (and said so); elsewhere
`--approve` / `--deny` without `--approver-token` is refused before anything starts (exit 2).
"""

from __future__ import annotations

import asyncio
import getpass
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

import grpc
import grpc.aio

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.tracing import CommandTrace, cli_channel, command_trace
from agentmesh.config import Settings
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.rpc.status import code_for_grpc_status, from_detail, from_rpc_error
from agentmesh.semconv import GEN_AI_AGENT_ID
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc

if TYPE_CHECKING:
    from agentmesh_client.errors import AgentmeshError as ClientError

D = dispatcher_pb2

_KIND_LABEL = {
    D.TASK_EVENT_KIND_STATUS: "status",
    D.TASK_EVENT_KIND_STEP_STARTED: "step",
    D.TASK_EVENT_KIND_CONTEXT: "context",
    D.TASK_EVENT_KIND_MODEL_REPLY: "model",
    D.TASK_EVENT_KIND_TOOL_CALL: "tool call",
    D.TASK_EVENT_KIND_TOOL_RESULT: "tool result",
    D.TASK_EVENT_KIND_CORRECTION: "CORRECTION",
    D.TASK_EVENT_KIND_FALLBACK: "FALLBACK",
    D.TASK_EVENT_KIND_APPROVAL_REQUIRED: "APPROVAL",
    D.TASK_EVENT_KIND_APPROVAL_RESOLVED: "approved",
    D.TASK_EVENT_KIND_INCIDENT: "INCIDENT",
    D.TASK_EVENT_KIND_ANSWER: "ANSWER",
    D.TASK_EVENT_KIND_CLAIM_CHECK: "CLAIMS",
}
_COLOR = {
    D.TASK_EVENT_KIND_CORRECTION: "33",  # yellow: CONTRACT
    D.TASK_EVENT_KIND_FALLBACK: "35",  # magenta: ENGINEERING
    D.TASK_EVENT_KIND_APPROVAL_REQUIRED: "36",
    D.TASK_EVENT_KIND_APPROVAL_RESOLVED: "36",
    D.TASK_EVENT_KIND_INCIDENT: "31;1",  # red: FATAL
    D.TASK_EVENT_KIND_ANSWER: "32;1",
}
_TERMINAL = {
    D.TASK_STATUS_SUCCEEDED,
    D.TASK_STATUS_FAILED,
    D.TASK_STATUS_ABORTED,
    D.TASK_STATUS_CANCELLED,
    D.TASK_STATUS_HANDED_OFF,
}
_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_RECONNECTS = 5

Decide = Callable[[D.TaskEvent], "tuple[bool, str] | None"]
"""Answers an approval: (approve, reason), or None to leave it to someone else."""


def status_name(status: int) -> str:
    return D.TaskStatus.Name(status).removeprefix("TASK_STATUS_")


def format_event(event: D.TaskEvent, *, color: bool = False) -> str:
    """One line for one event: sequence, step, kind, message."""
    label = _KIND_LABEL.get(event.kind, D.TaskEventKind.Name(event.kind).removeprefix("TASK_EVENT_KIND_").lower())
    message = " ".join(event.message.split()) if event.kind != D.TASK_EVENT_KIND_ANSWER else event.message
    if event.kind == D.TASK_EVENT_KIND_STATUS:
        message = status_name(event.status) + (f" ({event.error.message})" if event.HasField("error") else "")
    step = f"step {event.step:<2}" if event.step else "       "
    text = f"{event.sequence:>4}  {step}  {label:<11}  {message}"
    code = _COLOR.get(event.kind)
    return f"\x1b[{code}m{text}\x1b[0m" if color and code else text


def format_plan(event: D.TaskEvent) -> str:
    """The change plan of an approval request, as shown to the approver."""
    pending = event.pending_approval
    try:
        args = json.dumps(json.loads(pending.plan.arguments_json), ensure_ascii=False, sort_keys=True)
    except ValueError:
        args = pending.plan.arguments_json
    lines = [
        f"      approval {pending.approval_id} requested by {pending.requested_by or 'the agent'}",
        f"      plan:    {pending.plan.name} {args}",
        f"      impact:  {pending.impact or '(none stated)'}",
        f"      sha256:  {pending.arguments_sha256}",
    ]
    return "\n".join(lines)


def login_name() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "operator"


def operator_token(settings: Settings, subject: str | None = None) -> str | None:
    """A short-lived operator token signed with the configured key (None when there is no key)."""
    if settings.auth.key is None or not settings.auth.key.get_secret_value():
        return None
    return Authenticator(settings.auth, settings.environment).mint(subject=subject or login_name(), roles=("operator",))


APPROVER_TOKEN_NEEDED = (
    "the operator who starts a task may not resolve its approvals (separation of duties): pass "
    "--approver-token TOKEN, a second operator's token (`agentmesh token --role operator --subject NAME`)"
)


def approver_metadata(
    settings: Settings, given: str | None, fallback: tuple[tuple[str, str], ...]
) -> tuple[tuple[tuple[str, str], ...] | None, str]:
    """The metadata decisions are sent with, and a note to print ("" for none). `given`: the
    --approver-token. None when there is no second identity (outside dev without --approver-token)."""
    if given:
        return ((IDENTITY_HEADER, given),), ""
    if not settings.auth.separation_of_duties:
        return fallback, ""
    if settings.environment != "dev":
        return None, ""
    subject = f"{login_name()}-approver"
    minted = operator_token(settings, subject)
    if minted is None:  # no key: auth is disabled, every caller is the dev identity
        return fallback, ""
    note = f"approvals are resolved as {subject}: an operator token minted for a second identity (dev only)"
    return ((IDENTITY_HEADER, minted),), note


@dataclass
class RunOutcome:
    task_id: str = ""
    session_id: str = ""
    status: int = 0
    answer: str = ""
    output_json: str = ""
    """The typed answer as JSON, for a task with an output schema."""
    request_id: str = ""
    events: list[D.TaskEvent] = field(default_factory=list)
    error: str = ""


class _Progress:
    """A one-line spinner on stderr while the stream is idle (terminals only)."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.shown = False
        self.ticks = 0
        self.since = time.monotonic()
        self.state = "running"

    def event(self, event: D.TaskEvent) -> None:
        self.clear()
        self.since = time.monotonic()
        if event.kind == D.TASK_EVENT_KIND_STATUS:
            self.state = status_name(event.status).lower().replace("_", " ")

    def beat(self) -> None:
        if not self.enabled:
            return
        self.ticks += 1
        spinner = _SPINNER[self.ticks % len(_SPINNER)]
        idle = time.monotonic() - self.since
        self.stream.write(f"\r\x1b[2K{spinner} {self.state}, idle {idle:.0f}s")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self.shown = False


def _start_fields(start: D.StartTaskRequest) -> dict[str, Any]:
    """`AsyncClient.run`'s arguments for `start` (0 and "" mean: the agent's own, the dispatcher's)."""
    return {
        "session_id": start.session_id or None,
        "task_id": start.task_id or None,
        "token_budget": start.token_budget if start.HasField("token_budget") else None,
        "max_steps": start.max_steps if start.HasField("max_steps") else None,
        "output_schema": json.loads(start.output_schema_json) if start.output_schema_json else None,
    }


async def stream_task(
    channel: grpc.aio.Channel,
    start: D.StartTaskRequest,
    metadata: tuple[tuple[str, str], ...],
    *,
    decide: Decide | None,
    on_event: Callable[[D.TaskEvent], None],
    on_heartbeat: Callable[[], None] = lambda: None,
    on_note: Callable[[str], None] = lambda note: None,
    timeout_s: float | None = None,
    approver: tuple[tuple[str, str], ...] | None = None,
    request_id: str | None = None,
) -> RunOutcome:
    """RunTask on `channel` through agentmesh_client, which resumes a broken stream with
    WatchTask(after_sequence); approvals via `decide`, resolved with `approver` (another identity than the
    task's creator; default `metadata`). Raises the client's typed error (`refusal` reads it)."""
    # agentmesh_client (clients/python, installed beside agentmesh by `make venv` and the image) is loaded
    # by the commands that stream a task only.
    from agentmesh_client.aio import AsyncClient

    stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
    outcome = RunOutcome()
    answered: set[str] = set()
    # The channel is the caller's (the command's interceptors and TLS): the client only streams on it.
    client = AsyncClient(
        "dispatcher", channel=channel, run_timeout=None, metadata=metadata, reconnects=_RECONNECTS, backoff=(0.4, 2.0)
    )
    run = client.run(
        start.agent_id,
        start.goal,
        timeout=timeout_s,
        request_id=request_id,
        on_heartbeat=on_heartbeat,
        **_start_fields(start),
    )
    outcome.task_id = run.task_id
    async for typed in run:
        # Typed as the client's own stubs (agentmesh_client._v1); read as agentmesh's, the same message.
        event = D.TaskEvent.FromString(typed.raw.SerializeToString())
        outcome.events.append(event)
        outcome.status = event.status
        on_event(event)
        if event.kind == D.TASK_EVENT_KIND_ANSWER:
            outcome.answer = event.message
        settlement = event.pending_approval.kind == common_pb2.APPROVAL_KIND_SETTLEMENT
        if event.kind == D.TASK_EVENT_KIND_APPROVAL_REQUIRED and settlement:
            # Only someone who checked the upstream can say whether the call ran.
            on_note(f"      settle it: agentmesh settle {event.task_id} --ran|--not-ran")
        elif event.kind == D.TASK_EVENT_KIND_APPROVAL_REQUIRED and decide is not None:
            approval_id = event.pending_approval.approval_id
            if approval_id not in answered:
                verdict = decide(event)
                if verdict is not None:
                    answered.add(approval_id)
                    approve, reason = verdict
                    await stub.ResolveApproval(
                        D.DispatcherServiceResolveApprovalRequest(
                            task_id=event.task_id,
                            approval_id=approval_id,
                            approve=approve,
                            reason=reason,
                            arguments_sha256=event.pending_approval.arguments_sha256,
                        ),
                        metadata=metadata if approver is None else approver,
                        timeout=30,
                    )
    task = (await stub.GetTask(D.GetTaskRequest(task_id=outcome.task_id), metadata=metadata, timeout=10)).task
    outcome.status = task.status
    outcome.answer = task.answer
    outcome.output_json = task.output_json
    outcome.request_id = task.request_id
    outcome.session_id = task.session_id
    if task.HasField("error"):
        code = common_pb2.ErrorCode.Name(task.error.code).removeprefix("ERROR_CODE_")
        outcome.error = f"{code}: {task.error.message}"
    return outcome


def _interactive_decide(out: TextIO, read: Callable[[str], str]) -> Decide:
    def decide(event: D.TaskEvent) -> tuple[bool, str] | None:
        out.write(format_plan(event) + "\n")
        out.flush()
        try:
            answer = read("      approve this change? [y/N] ").strip().lower()
        except EOFError:
            return None
        reason = "approved at the terminal" if answer in ("y", "yes") else "denied at the terminal"
        return answer in ("y", "yes"), reason

    return decide


def refusal(exc: grpc.aio.AioRpcError | ClientError) -> AgentmeshError:
    """agentmesh's typed error of a refused call: raised by a stub, or by agentmesh_client (which keeps the
    call's ErrorDetail, else its status)."""
    if isinstance(exc, grpc.RpcError):
        return from_rpc_error(exc)
    if exc.detail is not None:
        return from_detail(common_pb2.ErrorDetail.FromString(exc.detail.SerializeToString()))
    return AgentmeshError(code_for_grpc_status(exc.code, exc.message), exc.message)


def report_refusal(exc: grpc.aio.AioRpcError | ClientError, err: TextIO) -> int:
    """Writes a refused `agentmesh run` call as its typed error and violations; the exit code: 3 when
    the dispatcher cannot be reached, else 2."""
    error = refusal(exc)
    err.write(f"agentmesh run: {error.code.name}: {error.message}\n")
    for v in error.violations:
        err.write(f"  {v.path}: {v.hint or v.rule}\n")
    if error.code == ErrorCode.UNAVAILABLE:
        err.write("  is the dispatcher up? start everything with `agentmesh up`\n")
        return 3
    return 2


def run_command(
    settings: Settings,
    agent_id: str,
    goal: str,
    *,
    approve: str = "ask",
    token_budget: int = 0,
    max_steps: int = 0,
    task_id: str = "",
    session_id: str = "",
    output_schema_json: str = "",
    token: str | None = None,
    approver_token: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`agentmesh run`: 0 when the task SUCCEEDED. With `session_id`, the task continues that session."""
    from agentmesh_client.errors import AgentmeshError as ClientError

    out = out or sys.stdout
    err = err or sys.stderr
    token = token or operator_token(settings)
    metadata = ((IDENTITY_HEADER, token),) if token else ()
    approver, note = approver_metadata(settings, approver_token, metadata)
    if approver is None and approve != "ask":
        err.write(f"agentmesh run: --approve/--deny in environment {settings.environment}: {APPROVER_TOKEN_NEEDED}\n")
        return 2
    if note and approve != "ask":
        err.write(note + "\n")
    color = out.isatty()
    progress = _Progress(err, err.isatty())
    decide: Decide | None
    if approve == "yes":

        def decide(event: D.TaskEvent) -> tuple[bool, str] | None:
            out.write(format_plan(event) + "\n      approved (--approve)\n")
            return True, "approved with --approve"
    elif approve == "no":

        def decide(event: D.TaskEvent) -> tuple[bool, str] | None:
            out.write(format_plan(event) + "\n      denied (--deny)\n")
            return False, "denied with --deny"
    elif sys.stdin.isatty() and approver is not None:
        if note:
            err.write(note + "\n")
        decide = _interactive_decide(out, input)
    else:
        how = "--approve/--deny" + ("" if approver is not None else " with --approver-token")

        def decide(event: D.TaskEvent) -> tuple[bool, str] | None:
            out.write(format_plan(event) + f"\n      waiting for an operator (use {how} to decide here)\n")
            return None

    def on_event(event: D.TaskEvent) -> None:
        progress.event(event)
        out.write(format_event(event, color=color) + "\n")
        out.flush()

    def on_note(note: str) -> None:
        out.write(note + "\n")

    async def main(command: CommandTrace) -> RunOutcome:
        target = settings.services.endpoint("dispatcher").dial_target
        # Every call of this run (RunTask, reconnects, decisions, the closing GetTask) is one request
        # in one trace: the command's (agentmesh.cli.tracing).
        async with cli_channel(target, settings, command) as channel:
            start = D.StartTaskRequest(
                agent_id=agent_id,
                goal=goal,
                # 0 on the command line: keep the agent's (an explicit 0 would be rejected).
                token_budget=token_budget or None,
                max_steps=max_steps or None,
                task_id=task_id,
                session_id=session_id,
                output_schema_json=output_schema_json,
            )
            return await stream_task(
                channel,
                start,
                metadata,
                decide=decide,
                on_event=on_event,
                on_heartbeat=progress.beat,
                on_note=on_note,
                approver=approver,
                request_id=command.request_id,
            )

    try:
        with command_trace(settings, "run") as command:
            command.span.set_attribute(GEN_AI_AGENT_ID, agent_id)
            outcome = asyncio.run(main(command))
    except (grpc.aio.AioRpcError, ClientError) as exc:
        progress.clear()
        return report_refusal(exc, err)
    except KeyboardInterrupt:
        progress.clear()
        err.write("interrupted; the task keeps running (it outlives this stream)\n")
        return 130
    progress.clear()
    status = status_name(outcome.status)
    out.write(f"\ntask {outcome.task_id}: {status}")
    if outcome.error:
        out.write(f" ({outcome.error})")
    out.write("\n")
    if outcome.output_json:
        # The typed answer, as JSON (one value, indented): what a script reads.
        shown = json.dumps(json.loads(outcome.output_json), ensure_ascii=False, indent=2)
        out.write("output:\n" + shown + "\n")
    elif outcome.answer:
        out.write(f"answer: {outcome.answer}\n")
    if outcome.session_id:
        again = f"agentmesh run {agent_id} GOAL --session {outcome.session_id}"
        out.write(f"session: {outcome.session_id} (continue it: {again})\n")
    if outcome.request_id:
        out.write(f"trace:  agentmesh trace {outcome.request_id}\n")
    return 0 if outcome.status == D.TASK_STATUS_SUCCEEDED else 1
