"""`agentmesh tasks` and `agentmesh approvals`: ListTasks and ListApprovals of the dispatcher.

`agentmesh tasks` prints one line per task, newest first (`--agent`, `--status`, `--created-by`,
`--root`, `--since`, `--until` filter; `--since`/`--until` take an ISO time or a duration back from
now, as `agentmesh audit`); `agentmesh approvals` the tasks waiting for a human, oldest first
(`--kind approval|settlement`). Both follow page tokens up to `--limit` entries and then print the
token that continues (`--page-token`) on stderr; `--json` prints one JSON object per line.

The token is `--token`, else, as for `agentmesh settle`, an operator token minted for the login name
with the configured `auth.key` (operators see every task; an agent's or a user's token only the
tasks it started).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import grpc
import grpc.aio
from google.protobuf.json_format import MessageToDict

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.audit_view import parse_since
from agentmesh.cli.run_view import operator_token, status_name
from agentmesh.cli.tracing import CommandTrace, cli_channel, command_trace
from agentmesh.config import Settings
from agentmesh.rpc import codec
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc

__all__ = ["add_parsers", "approvals_command", "tasks_command"]

D = dispatcher_pb2
MAX_PAGE = 100
STATUSES = [name.removeprefix("TASK_STATUS_").lower() for name in D.TaskStatus.keys()[1:]]
KINDS = {"approval": D.TASK_APPROVAL_KIND_APPROVAL, "settlement": D.TASK_APPROVAL_KIND_SETTLEMENT}


def _when(stamp: Any) -> str:
    if not stamp.seconds and not stamp.nanos:
        return "-"
    return dt.datetime.fromtimestamp(stamp.seconds, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _short(text: str, width: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def task_line(task: D.Task) -> str:
    return (
        f"{task.task_id:<36} {status_name(task.status):<16} {task.agent_id:<14} {_when(task.create_time)}  "
        f"{task.created_by or '-':<16} {task.step:>4}  {_short(task.goal, 50)}"
    )


def approval_line(item: D.TaskApproval) -> str:
    kind = "settlement" if item.kind == D.TASK_APPROVAL_KIND_SETTLEMENT else "approval"
    plan = item.pending_approval.plan
    return (
        f"{_when(item.wait_time)}  {item.task_id:<36} {kind:<10} {item.agent_id:<14} "
        f"{item.pending_approval.approval_id:<24} {_short(f'{plan.name} {plan.arguments_json}', 60)}"
    )


def _metadata(settings: Settings, token: str | None) -> tuple[tuple[str, str], ...]:
    given = token or operator_token(settings)
    return ((IDENTITY_HEADER, given),) if given else ()


def _paged(
    settings: Settings,
    name: str,
    fetch: Callable[[dispatcher_pb2_grpc.DispatcherServiceStub, int, str], Any],
    items: str,
    render: Callable[[Any], str],
    *,
    limit: int,
    page_token: str,
    token: str | None,
    as_json: bool,
    header: str,
    out: TextIO,
    err: TextIO,
) -> int:
    async def main(command: CommandTrace) -> int:
        got, next_token = 0, page_token
        target = settings.services.endpoint("dispatcher").dial_target
        async with cli_channel(target, settings, command) as channel:
            stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
            if not as_json:
                out.write(header + "\n")
            while got < limit:
                reply = await fetch(stub, min(MAX_PAGE, limit - got), next_token)
                for entry in getattr(reply, items):
                    got += 1
                    out.write((json.dumps(MessageToDict(entry)) if as_json else render(entry)) + "\n")
                next_token = reply.next_page_token
                if not next_token:
                    break
        if next_token:
            err.write(f"more: agentmesh {name} ... --page-token {next_token}\n")
        return 0

    try:
        with command_trace(settings, name) as command:
            return asyncio.run(main(command))
    except grpc.aio.AioRpcError as exc:
        err.write(f"agentmesh {name}: {exc.code().name}: {exc.details()}\n")
        return 1


def _stamp(text: str | None, flag: str) -> Any:
    if not text:
        return None
    try:
        return codec.timestamp_ms(parse_since(text))
    except ValueError as exc:
        raise SystemExit(f"agentmesh tasks: {str(exc).replace('--since', flag)}") from None


def tasks_command(
    settings: Settings,
    *,
    agent: str = "",
    status: str = "",
    created_by: str = "",
    root: str = "",
    since: str | None = None,
    until: str | None = None,
    limit: int = 50,
    page_token: str = "",
    token: str | None = None,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Prints up to `limit` tasks, newest first; 1 when the dispatcher refused (the error is printed)."""
    base = D.ListTasksRequest(
        agent_id=agent,
        status=f"TASK_STATUS_{(status or 'unspecified').upper()}",
        created_by=created_by,
        root_task_id=root,
    )
    after, before = _stamp(since, "--since"), _stamp(until, "--until")
    if after is not None:
        base.created_after.CopyFrom(after)
    if before is not None:
        base.created_before.CopyFrom(before)

    async def fetch(stub: dispatcher_pb2_grpc.DispatcherServiceStub, size: int, page: str) -> Any:
        request = D.ListTasksRequest()
        request.CopyFrom(base)
        request.page_size, request.page_token = size, page
        return await stub.ListTasks(request, metadata=_metadata(settings, token), timeout=30)

    header = f"{'task':<36} {'status':<16} {'agent':<14} {'created (UTC)':<19}  {'created by':<16} {'step':>4}  goal"
    return _paged(
        settings,
        "tasks",
        fetch,
        "tasks",
        task_line,
        limit=limit,
        page_token=page_token,
        token=token,
        as_json=as_json,
        header=header,
        out=out or sys.stdout,
        err=err or sys.stderr,
    )


def approvals_command(
    settings: Settings,
    *,
    agent: str = "",
    kind: str = "",
    limit: int = 50,
    page_token: str = "",
    token: str | None = None,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Prints up to `limit` waiting tasks, oldest first; 1 when the dispatcher refused."""

    async def fetch(stub: dispatcher_pb2_grpc.DispatcherServiceStub, size: int, page: str) -> Any:
        request = D.ListApprovalsRequest(
            agent_id=agent, kind=KINDS.get(kind, D.TASK_APPROVAL_KIND_UNSPECIFIED), page_size=size, page_token=page
        )
        return await stub.ListApprovals(request, metadata=_metadata(settings, token), timeout=30)

    header = f"{'waiting since (UTC)':<19}  {'task':<36} {'kind':<10} {'agent':<14} {'approval':<24} plan"
    return _paged(
        settings,
        "approvals",
        fetch,
        "approvals",
        approval_line,
        limit=limit,
        page_token=page_token,
        token=token,
        as_json=as_json,
        header=header,
        out=out or sys.stdout,
        err=err or sys.stderr,
    )


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=_positive, default=50, help="at most this many entries (default 50)")
    parser.add_argument("--page-token", default="", help="continue where an earlier listing stopped")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--token", default=None, help="the token to list with (default: an operator token)")


def cmd_tasks(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    return tasks_command(
        settings,
        agent=args.agent,
        status=args.status,
        created_by=args.created_by,
        root=args.root,
        since=args.since,
        until=args.until,
        limit=args.limit,
        page_token=args.page_token,
        token=args.token,
        as_json=args.json,
    )


def cmd_approvals(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    return approvals_command(
        settings,
        agent=args.agent,
        kind=args.kind,
        limit=args.limit,
        page_token=args.page_token,
        token=args.token,
        as_json=args.json,
    )


def add_parsers(sub: Any) -> None:
    """Adds `tasks` and `approvals` to the `agentmesh` sub-commands."""
    tasks = sub.add_parser("tasks", help="list tasks, newest first (ListTasks)")
    tasks.add_argument("--agent", default="", help="only tasks of this agent")
    tasks.add_argument("--status", default="", choices=["", *STATUSES], help="only tasks in this status")
    tasks.add_argument("--created-by", default="", help="only tasks started by this subject")
    tasks.add_argument("--root", default="", help="only the conversation this task opened (its session)")
    tasks.add_argument("--since", default=None, help="created at or after: ISO date/time (UTC) or 15m, 2h, 7d")
    tasks.add_argument("--until", default=None, help="created before: ISO date/time (UTC) or a duration")
    _common(tasks)
    tasks.set_defaults(func=cmd_tasks)
    approvals = sub.add_parser("approvals", help="list the tasks waiting for an approval or settlement")
    approvals.add_argument("--agent", default="", help="only tasks of this agent")
    approvals.add_argument("--kind", default="", choices=["", *KINDS], help="approval or settlement")
    _common(approvals)
    approvals.set_defaults(func=cmd_approvals)
