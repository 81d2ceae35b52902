"""`agentmesh context <session_id>`: the exact prompt context_svc builds for a session, per block.

Calls BuildContext(debug=true) on the configured context_svc with a short-lived operator token
minted from the configured auth key (like `agentmesh token`), and prints the block breakdown
followed by the exact text, or the whole view as JSON with `--json`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import TextIO

import grpc
import grpc.aio
from google.protobuf import json_format

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.tracing import command_trace
from agentmesh.config import Settings
from agentmesh.rpc.channels import create_channel
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import context_pb2, context_pb2_grpc

__all__ = ["context_command", "fetch_view", "render_view"]

_CLI_TOKEN_TTL_S = 300
_KIND_NAMES = {
    context_pb2.CONTEXT_BLOCK_KIND_SYSTEM: "system",
    context_pb2.CONTEXT_BLOCK_KIND_SUMMARY: "summary",
    context_pb2.CONTEXT_BLOCK_KIND_RECENT: "recent",
    context_pb2.CONTEXT_BLOCK_KIND_OBSERVATIONS: "observations",
}


async def fetch_view(
    settings: Settings, session_id: str, *, budget_tokens: int = 0, timeout_s: float = 30.0
) -> context_pb2.ContextView:
    """BuildContext(debug=true) of `session_id`, called as an operator."""
    token = Authenticator(settings.auth, settings.environment).mint(
        subject="agentmesh-cli", roles=["operator"], ttl_s=_CLI_TOKEN_TTL_S
    )
    channel = create_channel(settings.services.endpoint("context").dial_target, settings)
    try:
        stub = context_pb2_grpc.ContextServiceStub(channel)  # type: ignore[no-untyped-call]
        response = await stub.BuildContext(
            context_pb2.BuildContextRequest(session_id=session_id, budget_tokens=budget_tokens or None, debug=True),
            metadata=((IDENTITY_HEADER, token),),
            timeout=timeout_s,
        )
    finally:
        await channel.close(None)
    view: context_pb2.ContextView = response.view
    return view


def render_view(view: context_pb2.ContextView) -> str:
    """The block table, then the exact prompt text."""
    rows = [("block", "tokens", "budget", "messages")]
    for block in view.blocks:
        rows.append((_KIND_NAMES.get(block.kind, "?"), str(block.tokens), str(block.budget_tokens),
                     str(block.message_count)))  # fmt: skip
    rows.append(("total", str(view.total_tokens), str(view.budget_tokens), str(len(view.messages))))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    table = "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows)
    notes = f"summarised {view.summarized_messages} messages, dropped {view.dropped_messages}" + (
        ", compacted during this build" if view.compacted else ""
    )
    return f"{table}\n{notes}\n\n{view.debug_text}"


def context_command(
    settings: Settings,
    session_id: str,
    *,
    budget_tokens: int = 0,
    as_json: bool = False,
    out: TextIO | None = None,
) -> int:
    """Prints the view; 0 on success, 1 with a one-line reason on failure."""
    stream = out or sys.stdout
    try:
        with command_trace(settings, "context"):
            view = asyncio.run(fetch_view(settings, session_id, budget_tokens=budget_tokens))
    except grpc.RpcError as exc:
        err = from_rpc_error(exc)
        print(f"agentmesh context: {err}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(json_format.MessageToDict(view), ensure_ascii=False, indent=2), file=stream)
    else:
        print(render_view(view), file=stream)
    return 0
