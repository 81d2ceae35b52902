"""Generates docs/errors.md, the error guide for client authors, from the tables in the code.

`python -m agentmesh.dev.errordoc` rewrites docs/errors.md; `--check` exits 1 when the committed file
differs from what the code says (the unit tests do the same), so the guide cannot drift from
`agentmesh.errors.ERROR_CLASS`, `agentmesh.rpc.status.GRPC_STATUS` or the retry defaults. Only the
advice per code is written here by hand, and every code must have some.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

import grpc

from agentmesh.errors import ERROR_CLASS, ErrorClass, ErrorCode, default_retryable
from agentmesh.rpc.channels import IDEMPOTENT_METHODS
from agentmesh.rpc.status import DOMAIN, GRPC_STATUS, code_for_grpc_status

__all__ = ["CLASS_ADVICE", "CODE_ADVICE", "DOC_PATH", "main", "render"]

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "errors.md"

_C, _E, _F = ErrorClass.CONTRACT, ErrorClass.ENGINEERING, ErrorClass.FATAL

CLASS_ADVICE: Mapping[ErrorClass, tuple[str, str]] = MappingProxyType(
    {
        _C: (
            "The caller (usually a model) produced a bad call and can fix it.",
            "Fix the request using the violations (path, expected, hint) and call again. The dispatcher does "
            "this for its models: at most 2 reflective retries per call, then it treats the error as ENGINEERING.",
        ),
        _E: (
            "A deterministic fault outside the model: infrastructure, permissions, limits, upstreams.",
            "No blind retry. Retry only when the error is retryable, after RetryInfo's delay; otherwise fix the "
            "cause named in the message, or take `fallback_tool` when one is given.",
        ),
        _F: (
            "Continuing is unsafe or unpaid.",
            "Stop. The dispatcher aborts the task (status ABORTED, an INCIDENT event) and runs no further tools; "
            "a human decides what happens next. Never resume or retry automatically.",
        ),
    }
)

CODE_ADVICE: Mapping[ErrorCode, str] = MappingProxyType(
    {
        ErrorCode.SCHEMA_INVALID: (
            "Fix the arguments with the violations (JSON path, rule, expected, hint); call again."
        ),
        ErrorCode.ARGUMENTS_NOT_JSON: "Send `arguments_json` as one valid JSON object; call again.",
        ErrorCode.UNKNOWN_TOOL: "Use a name from ListTools / DiscoverTools; the same name will fail again.",
        ErrorCode.IDEMPOTENCY_CONFLICT: (
            "The idempotency key was used with other arguments: resend the original arguments, or use a new key "
            "for a new request."
        ),
        ErrorCode.VERIFICATION_REJECTED: (
            "Hand on only what the cited sources support: drop or mark as inferred each fact the verifier's "
            "reasons name, then hand off again; a second rejection fails the task."
        ),
        ErrorCode.UPSTREAM_NOT_FOUND: (
            "The downstream resource does not exist: change the request or take `fallback_tool`."
        ),
        ErrorCode.UPSTREAM_TIMEOUT: (
            "Retry with backoff for reads and idempotent tools only (a write may have happened); else `fallback_tool`."
        ),
        ErrorCode.UPSTREAM_UNAVAILABLE: (
            "Transient: retry with exponential backoff and jitter, honouring RetryInfo; `fallback_tool` if it persists."
        ),
        ErrorCode.UPSTREAM_REJECTED: (
            "The downstream refused the request (4xx): change it; the same request fails again."
        ),
        ErrorCode.RATE_LIMITED: "Wait RetryInfo's delay before the next call; do not retry sooner.",
        ErrorCode.CIRCUIT_OPEN: (
            "The tool keeps failing for this agent: wait RetryInfo's delay or take `fallback_tool`; the breaker "
            "half-opens by itself."
        ),
        ErrorCode.PERMISSION_DENIED: (
            "The identity lacks `missing_permission` (ErrorInfo metadata): use a token that holds it; never retry "
            "unchanged."
        ),
        ErrorCode.APPROVAL_DENIED: "A human denied the change: do not retry it; report it or choose another plan.",
        ErrorCode.APPROVAL_EXPIRED: "Nobody resolved the approval in time: call again to request a new approval.",
        ErrorCode.OUTPUT_INVALID: (
            "The tool answered outside its output schema: report it to the tool's owner; `fallback_tool`. "
            "Metadata `reason: final_answer`: the task's final answer still broke its output schema after its "
            "corrections; `violations` say where. Resume it (StartTask), or loosen the schema."
        ),
        ErrorCode.SANDBOX_UNAVAILABLE: (
            "The sandbox could not be set up and the code did not run: retry later or where bubblewrap works."
        ),
        ErrorCode.PROVIDER_AUTH_FAILED: (
            "The provider refused agentmesh's own key (your token is fine): an operator must fix the provider key."
        ),
        ErrorCode.CONTEXT_LENGTH_EXCEEDED: (
            "Send less (smaller budget, summaries) or route to a model with a larger window."
        ),
        ErrorCode.CONTENT_FILTERED: (
            "The provider's filter blocked the request or reply: rephrase; do not retry unchanged."
        ),
        ErrorCode.INVALID_REQUEST: (
            "Fix the request field named in BadRequest; the same request fails again. A bad `page_token` of "
            "ListTasks / ListApprovals / GetSpendSummary / ListBudgets says why in ErrorInfo metadata `reason`: "
            "`page_token.malformed`, "
            "`page_token.signature` (tampered with), `page_token.filter` (send the first page's filters with it) "
            "or `page_token.expired` (after an hour): list again from the first page."
        ),
        ErrorCode.INTERNAL: "A bug in agentmesh: report it with the request id; retrying unchanged rarely helps.",
        ErrorCode.NOT_FOUND: "The task, session, approval or payload does not exist (or expired): check the id.",
        ErrorCode.UNAVAILABLE: (
            "Transient (a service or Redis outage): retry with backoff; agentmesh channels retry idempotent methods "
            "themselves."
        ),
        ErrorCode.UNAUTHENTICATED: (
            "Missing, expired or badly signed identity token: get a new one (`agentmesh token`) and call again."
        ),
        ErrorCode.PAYLOAD_TOO_LARGE: (
            "The message exceeds `server.max_message_bytes`: send less, or pass a payload reference."
        ),
        ErrorCode.OVERLOADED: "The server sheds load: wait RetryInfo's delay, then retry; back off if it repeats.",
        ErrorCode.CANCELLED: (
            "The call was cancelled (by the caller, or a draining server): resume, e.g. WatchTask after the last "
            "sequence seen."
        ),
        ErrorCode.DEADLINE_EXCEEDED: (
            "The deadline passed: retry idempotent calls with a longer deadline; resume streams with WatchTask."
        ),
        ErrorCode.FAILED_PRECONDITION: (
            "The target is not in a state for this call (e.g. the task already ended): read it (GetTask) first."
        ),
        ErrorCode.OUTCOME_UNKNOWN: (
            "A write may have reached its upstream but its outcome is unknown; it is never re-sent on its own. "
            "An operator settles it: `agentmesh settle <task> --ran|--not-ran` (ResolveApproval with `settlement`)."
        ),
        ErrorCode.CLAIM_UNSUPPORTED: (
            "The model's final answer claimed an action no successful write of the task did, again after a "
            "correction (metadata `claim`, `gap`): nothing the answer says was done was; read the task's tool "
            "calls (WatchTask) and resume it or act yourself."
        ),
        ErrorCode.HANDOFF_DEPTH_EXCEEDED: (
            "A handoff would make the task tree deeper than dispatcher.max_handoff_depth (metadata `depth`, "
            "`limit`): the agent finishes the work itself; raise the limit only if the chain is meant to be that long."
        ),
        ErrorCode.HANDOFF_FAILED: (
            "The agent an ask handoff delegated to ended without an answer (metadata `child_task_id`, "
            "`child_status`, `child_code`): read that task (GetTask) for its error."
        ),
        ErrorCode.DANGEROUS_OPERATION: "A call would do something destructive; the task stopped. A human reviews it.",
        ErrorCode.BUDGET_EXHAUSTED: (
            "The token budget is spent; a human decides whether to run again with a larger one."
        ),
        ErrorCode.MAX_STEPS_EXCEEDED: "The step limit was reached; a human decides what happens next.",
        ErrorCode.LOOP_DETECTED: (
            "The same tool call with the same arguments repeated, or a handoff cycle (A->B->A->B); a human "
            "inspects the trace."
        ),
        ErrorCode.SANDBOX_VIOLATION: "Code tried to leave the sandbox: treat it as a security incident.",
        ErrorCode.BUDGET_EXCEEDED: (
            "A spend budget of the API key, agent or tenant (ErrorInfo `scope`, `period`) would be exceeded by this "
            "call's reserve: nothing was sent upstream. Wait for `resets_at`, ask for a larger budget, or send a "
            "smaller `max_tokens`; a task aborts."
        ),
    }
)

_HEADER = """\
<!-- Generated by `python -m agentmesh.dev.errordoc` from agentmesh/errors.py, agentmesh/rpc/status.py and
     agentmesh/dev/errordoc.py. Do not edit by hand: a test fails when this file differs from the code. -->
# agentmesh errors: a guide for client authors

Every failure agentmesh reports has an `ErrorCode` (`agentmesh.v1.ErrorCode` in
`protos/agentmesh/v1/common.proto`) and a class derived from the code by one table, so the two never
disagree. The class tells you who must act; the code tells you what happened.

## Where errors appear

{where}
A write waiting for a human is not an error: `ToolResult.pending_approval`, task status
`WAITING_APPROVAL`.

## Reading a failed call

The trailer `grpc-status-details-bin` holds a serialized `google.rpc.Status`; every gRPC language
has a helper for it (Go `status.FromError(err).Details()`, see `examples/clients/go/output.go`;
TypeScript with Connect-ES `ConnectError.findDetails(ErrorDetailSchema)`, see
`examples/clients/ts/output.ts`; Java `StatusProto.fromThrowable`; Python
`grpc_status.rpc_status.from_call`). Its `details` are `google.protobuf.Any` messages:

{details}
A status larger than a gRPC trailer allows is shrunk: it keeps code, class, retry and fallback
facts and sets `metadata["details_truncated"] = "true"`. A status without the trailer came from gRPC
itself or a proxy, not from agentmesh (see the last table).

## Classes

| class | meaning | what a client should do |
|---|---|---|
"""

_CODES_HEADER = """
## Codes

"retryable" is the default; the service raising an error may override it for one error, so read
`ErrorDetail.retryable` (or the presence of `RetryInfo`) rather than this column when you have them.

| number | code | class | gRPC status | retryable | what a client should do |
|---|---|---|---|---|---|
"""

_BARE_HEADER = """
## Statuses without agentmesh details

A status with no `grpc-status-details-bin` trailer was produced by gRPC itself (deadline, message
size, connection) or by a proxy. agentmesh's Python client (`agentmesh.rpc.status.from_rpc_error`)
reads it as the closest code below; other clients should do the same.

| gRPC status | read as code | class |
|---|---|---|
"""

_RETRY_HEADER = """
## Retries

Retry only what is safe. agentmesh's own channels retry UNAVAILABLE automatically on these
idempotent methods only (reads, or streams replayable from a sequence):

"""

_RETRY_FOOTER = """
Everything else (ExecuteTool, Generate, StartTask, AppendMessage, ...) may have side effects: retry
it only when the error says so, and pass an idempotency key (`ExecuteTool`) or a client-chosen
`task_id` (`StartTask` / `RunTask`) so a repeated call cannot act twice. A broken `RunTask` or
`WatchTask` stream resumes with `WatchTask(task_id, after_sequence = last sequence seen)`.
"""


_WHERE = (
    (
        "gRPC status of a call",
        "a fault of the RPC itself: malformed request, unauthenticated, overloaded, unavailable, deadline",
        "the `grpc-status-details-bin` trailer (below)",
    ),
    ("`ToolResult.error` (`ErrorDetail`)", "a tool call failed; the RPC itself succeeded", "the fields of the message"),
    (
        "`Task.error`, `TaskEvent.error` (`ErrorDetail`)",
        "a task FAILED or was ABORTED; CORRECTION, FALLBACK and INCIDENT events",
        "the fields of the message",
    ),
)

_DETAILS = (
    (
        "`google.rpc.ErrorInfo`",
        "yes",
        "`reason` = the ErrorCode name without `ERROR_CODE_` (e.g. `RATE_LIMITED`); "
        f'`domain` = `{DOMAIN}`; `metadata["error_class"]` = `CONTRACT`, `ENGINEERING` or `FATAL`; '
        '`metadata["fallback_tool"]` and `metadata["missing_permission"]` when set; '
        "any other metadata of the error",
    ),
    ("`google.rpc.RetryInfo`", "when a retry may succeed later", "`retry_delay`: wait at least this long"),
    (
        "`google.rpc.BadRequest`",
        "when fields were invalid",
        "one `FieldViolation` per problem: `field` = JSON path or request field, `description`, "
        "`reason` = the rule in upper case",
    ),
    (
        "`agentmesh.v1.ErrorDetail`",
        "yes",
        "the same facts in agentmesh's own message, plus `retryable` and full violations "
        "(`type.googleapis.com/agentmesh.v1.ErrorDetail`)",
    ),
)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows)
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _codes() -> list[ErrorCode]:
    return [code for code in ErrorCode if code is not ErrorCode.UNSPECIFIED]


def render() -> str:
    """The full text of docs/errors.md. Raises ValueError if a code lacks a class, status or advice."""
    missing = [
        f"{code.name}: no {what}"
        for code in _codes()
        for what, table in (("class", ERROR_CLASS), ("gRPC status", GRPC_STATUS), ("advice", CODE_ADVICE))
        if code not in table
    ]
    if missing:
        raise ValueError("cannot document every error code: " + "; ".join(missing))
    where = _table(("where", "when", "how to read it"), _WHERE)
    details = _table(("detail", "always?", "content"), _DETAILS)
    parts = [_HEADER.format(where=where, details=details)]
    for klass in (_C, _E, _F):
        meaning, advice = CLASS_ADVICE[klass]
        parts.append(f"| {klass.name} | {_cell(meaning)} | {_cell(advice)} |\n")
    parts.append(_CODES_HEADER)
    for code in _codes():
        retryable = "yes" if default_retryable(code) else "no"
        parts.append(
            f"| {code.value} | `{code.name}` | {ERROR_CLASS[code].name} | {GRPC_STATUS[code].name} | {retryable} "
            f"| {_cell(CODE_ADVICE[code])} |\n"
        )
    parts.append(_BARE_HEADER)
    for status in grpc.StatusCode:
        if status is grpc.StatusCode.OK:
            continue
        code = code_for_grpc_status(status)
        parts.append(f"| {status.name} | `{code.name}` | {ERROR_CLASS[code].name} |\n")
    parts.append(
        f'| RESOURCE_EXHAUSTED with a message containing "larger than max" '
        f"| `{code_for_grpc_status(grpc.StatusCode.RESOURCE_EXHAUSTED, 'larger than max').name}` "
        f"| {ERROR_CLASS[ErrorCode.PAYLOAD_TOO_LARGE].name} |\n"
    )
    parts.append(_RETRY_HEADER)
    parts.extend(f"- `{service}/{method}`\n" for service, method in IDEMPOTENT_METHODS)
    parts.append(_RETRY_FOOTER)
    return "".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m agentmesh.dev.errordoc [--check] [PATH]`: write (or compare) the guide."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    paths = [a for a in args if a != "--check"]
    path = Path(paths[0]) if paths else DOC_PATH
    text = render()
    if check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is out of date: run `python -m agentmesh.dev.errordoc`", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
