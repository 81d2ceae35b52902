"""`agentmesh context <session>` against a real context_svc (it had no test before issue 24): the block
table and the exact prompt text, `--json`, `--budget`, and its errors."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from google.protobuf import json_format

from agentmesh.cli import main
from agentmesh.cli.context_view import context_command
from agentmesh.config import ServiceEndpoint, ServicesSettings, Settings
from agentmesh.v1 import common_pb2, context_pb2
from tests.contract.context.conftest import Ctx

K = context_pb2


def cli_settings(ctx: Ctx) -> Settings:
    """What a CLI on this machine reads: the service's configuration, with its real port."""
    settings = ctx.svc.settings
    services = settings.services.model_copy(update={"context": ServiceEndpoint(port=ctx.svc.host.port)})
    assert isinstance(services, ServicesSettings)
    return settings.model_copy(update={"services": services})


async def run(ctx: Ctx, session_id: str, **kw: object) -> tuple[int, str]:
    out = io.StringIO()
    code = await asyncio.to_thread(context_command, cli_settings(ctx), session_id, out=out, **kw)  # type: ignore[arg-type]
    return code, out.getvalue()


async def a_session(ctx: Ctx) -> None:
    await ctx.create("s1", goal="refund order ORD-2025-0042", system_prompt="You handle refunds.")
    await ctx.say("s1", common_pb2.ROLE_USER, "Please refund order ORD-2025-0042, amount 129.90 EUR.")
    await ctx.call("s1", "c1", "get_order", {"order_id": "ORD-2025-0042"})
    await ctx.tool("s1", "c1", "get_order", '{"status": "paid", "amount": 129.90}', structured=True)
    await ctx.say("s1", common_pb2.ROLE_ASSISTANT, "The order is paid; refunding 129.90 EUR.")


async def test_the_block_table_then_the_exact_prompt(ctx: Ctx) -> None:
    await a_session(ctx)
    code, out = await run(ctx, "s1")
    assert code == 0
    view = (
        await ctx.stub.BuildContext(K.BuildContextRequest(session_id="s1", debug=True), metadata=ctx.operator_md)
    ).view
    lines = out.splitlines()
    assert lines[0].split() == ["block", "tokens", "budget", "messages"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1 : len(view.blocks) + 2]}
    names = {K.CONTEXT_BLOCK_KIND_SYSTEM: "system", K.CONTEXT_BLOCK_KIND_RECENT: "recent"}
    for block in view.blocks:
        if block.kind in names:
            assert rows[names[block.kind]] == [str(block.tokens), str(block.budget_tokens), str(block.message_count)]
    assert rows["total"] == [str(view.total_tokens), str(view.budget_tokens), str(len(view.messages))]
    assert f"summarised {view.summarized_messages} messages, dropped {view.dropped_messages}" in out
    # The exact text the model gets, after the table: the same as BuildContext(debug) gives.
    assert out.endswith(view.debug_text + "\n") and "You handle refunds." in view.debug_text
    assert "Please refund order ORD-2025-0042, amount 129.90 EUR." in out


async def test_json_and_budget(ctx: Ctx) -> None:
    await a_session(ctx)
    code, out = await run(ctx, "s1", as_json=True, budget_tokens=900)
    assert code == 0
    data = json.loads(out)
    view = (
        await ctx.stub.BuildContext(
            K.BuildContextRequest(session_id="s1", debug=True, budget_tokens=900), metadata=ctx.operator_md
        )
    ).view
    expected = json_format.MessageToDict(view)
    for message in (*data["messages"], *expected["messages"]):
        if message["role"] == "ROLE_SYSTEM":
            message.pop("createTime", None)  # assembled for each build, stamped now
    assert data == expected
    assert data["budgetTokens"] == 900 and data["messages"][-1]["content"] == "The order is paid; refunding 129.90 EUR."


async def test_errors_are_one_line_and_exit_1(ctx: Ctx, capsys: pytest.CaptureFixture[str]) -> None:
    await a_session(ctx)
    for session_id, budget, expected in (
        ("nope", 0, "agentmesh context: NOT_FOUND: session nope not found"),
        ("s1", 10, "agentmesh context: INVALID_REQUEST: budget_tokens: must be at least"),
        ("bad id!", 0, "agentmesh context: "),
    ):
        capsys.readouterr()
        code, out = await run(ctx, session_id, budget_tokens=budget)
        [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("agentmesh context:")]
        assert code == 1 and out == "" and line.startswith(expected), line
    # No session and no --task: a usage error before anything is called.
    assert main(["context"]) == 2
