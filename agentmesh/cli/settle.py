"""`agentmesh settle <task> --ran|--not-ran`: an operator's finding on a call whose outcome was unknown.

A write that may have reached its upstream without a known outcome (timeout, cancel, crash) is never
re-sent on its own: its task waits in WAITING_APPROVAL on a settlement. Check the upstream, then say
what happened: `--ran` records the call as ran (its output unknown; nothing is re-sent), `--not-ran`
sends it once more with the same idempotency key. The task's creator may not settle it (separation of
duties): `--token` names another operator; without it, in environment dev, the token is minted for
"<user>-approver" (as `agentmesh run` does), elsewhere it is the login name's.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

import grpc
import grpc.aio

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.run_view import approver_metadata, operator_token, status_name
from agentmesh.cli.tracing import CommandTrace, cli_channel, command_trace
from agentmesh.config import Settings
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc

D = dispatcher_pb2


def settle_command(
    settings: Settings,
    task_id: str,
    *,
    ran: bool,
    reason: str = "",
    token: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """0 when the settlement was recorded and the task resumed; 1 when the task waits for no settlement
    or the dispatcher refused; the gRPC error is printed."""
    out = out or sys.stdout
    err = err or sys.stderr
    login = operator_token(settings)
    fallback = ((IDENTITY_HEADER, login),) if login else ()
    if token:
        metadata: tuple[tuple[str, str], ...] = ((IDENTITY_HEADER, token),)
    else:
        approver, note = approver_metadata(settings, None, fallback)
        metadata = fallback if approver is None else approver
        if note:
            err.write(note + "\n")
    finding = common_pb2.SETTLEMENT_OUTCOME_RAN if ran else common_pb2.SETTLEMENT_OUTCOME_NOT_RAN

    async def main(command: CommandTrace) -> int:
        target = settings.services.endpoint("dispatcher").dial_target
        async with cli_channel(target, settings, command) as channel:
            stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
            task = (await stub.GetTask(D.GetTaskRequest(task_id=task_id), metadata=metadata, timeout=10)).task
            pending = task.pending_approval
            if task.status != D.TASK_STATUS_WAITING_APPROVAL or pending.kind != common_pb2.APPROVAL_KIND_SETTLEMENT:
                err.write(f"task {task_id} is {status_name(task.status)} and waits for no settlement\n")
                return 1
            out.write(
                f"settlement {pending.approval_id}: {pending.plan.name} {pending.plan.arguments_json}\n"
                f"      {pending.impact}\n"
            )
            reply = await stub.ResolveApproval(
                D.DispatcherServiceResolveApprovalRequest(
                    task_id=task_id,
                    approval_id=pending.approval_id,
                    reason=reason or ("the upstream shows the effect" if ran else "the upstream shows no effect"),
                    arguments_sha256=pending.arguments_sha256,
                    settlement=finding,
                ),
                metadata=metadata,
                timeout=60,
            )
            said = "RAN: recorded as ran, not re-sent" if ran else "NOT_RAN: sent once more with the same key"
            out.write(f"      settled {said}; task {task_id} is {status_name(reply.task.status)}\n")
            return 0

    try:
        with command_trace(settings, "settle") as command:
            return asyncio.run(main(command))
    except grpc.aio.AioRpcError as exc:
        err.write(f"agentmesh settle: {exc.code().name}: {exc.details()}\n")
        return 1
