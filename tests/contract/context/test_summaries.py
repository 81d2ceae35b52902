"""Faithful summaries, checked on text: the extractive summarizer on a long ops session, and the
LLM summarizer (against a fake provider_svc speaking real gRPC) rejected when it drops a number."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.v1 import common_pb2, context_pb2, provider_pb2, provider_pb2_grpc
from context_svc.facts.facts import missing_facts
from tests.contract.context.conftest import AGENT, Ctx
from tests.unit.context.ops_session import Step, ops_session

K = context_pb2
USER, ASSISTANT = common_pb2.ROLE_USER, common_pb2.ROLE_ASSISTANT


def _summary_text(summary: context_pb2.Summary) -> str:
    return "\n".join([summary.user_intent, *summary.key_data, *summary.open_questions, *summary.actions_taken])


def _message_ranges(steps: list[Step]) -> list[tuple[int, Step]]:
    """(index of the step's last message, step): user/assistant steps are one message, tool steps two."""
    out, index = [], -1
    for step in steps:
        index += 2 if step.kind == "tool" else 1
        out.append((index, step))
    return out


async def test_long_ops_session_summary_keeps_every_number_date_and_id(ctx: Ctx) -> None:
    steps = ops_session(48, seed=11)
    await ctx.create(goal="排查 checkout 下单失败并核对退款折扣", budget=K.BudgetSettings(keep_recent_messages=10))
    half = len(steps) // 2
    await ctx.play("s1", steps[:half])
    first = await ctx.build()  # compacts during the build (older turns exceed the trigger)
    assert first.compacted
    await ctx.play("s1", steps[half:])
    done = await ctx.stub.Compact(K.CompactRequest(session_id="s1"), metadata=ctx.agent_md)
    summary = done.summary
    text = _summary_text(summary)
    covered = [step for last, step in _message_ranges(steps) if last <= summary.last_index]
    assert len(covered) > len(steps) // 2
    # Every fact the generator put into a summarised turn is in the summary text, verbatim —
    # including the ones summarised by the first (rolling) compaction.
    expected = [fact for step in covered for fact in step.facts]
    assert expected and all(fact in text for fact in expected), [f for f in expected if f not in text][:10]
    assert {"85折", "8折"} & set(expected) <= {f for f in ("85折", "8折") if f in text}
    # And every fact of the stored turns (digests, ref_ids, tool arguments) by the extractor.
    store = ctx.svc.host.store
    assert store is not None
    stored = await store.redis.lrange("am:sess:{s1}:log", 0, summary.last_index)
    sources = []
    for raw in stored:
        message = json.loads(raw)
        sources.append(message.get("c", ""))
        sources += [call[2] for call in message.get("tc", [])]
    refs = {ref for source in sources for ref in re.findall(r"pl_[0-9a-f]{64}", source)}
    assert len(refs) >= 4 and all(ref in text for ref in refs)
    # The summary stores tool arguments as k=v; check their values, and everything else verbatim.
    flattened = [" ".join(f"{k}={v}" for k, v in json.loads(s).items()) if s.startswith("{") else s for s in sources]
    assert missing_facts(flattened, text) == []


class FakeProvider(provider_pb2_grpc.ProviderServiceServicer):
    """provider_svc's Generate, answering a summary: faithful, or with one number dropped."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests: list[provider_pb2.GenerateRequest] = []
        self.identities: list[str] = []

    async def Generate(
        self, request: provider_pb2.GenerateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> provider_pb2.GenerateResponse:
        self.requests.append(request)
        self.identities.append(dict(context.invocation_metadata() or ()).get(IDENTITY_HEADER, ""))
        if self.mode == "slow":
            await asyncio.sleep(30)  # cancelled when the caller's deadline passes
        prompt = request.messages[-1].content
        # A "model" that copies each message line into key_data; in drop mode it generalises one
        # discount, the failure seed 001 reports ("85折" became "a discount").
        lines = [line.split(": ", 1)[-1] for line in prompt.splitlines() if line.startswith("[")]
        if self.mode == "drop":
            lines = [line.replace("85折", "a discount") for line in lines]
        reply = {
            "user_intent": "check the order discounts",
            "key_data": lines,
            "open_questions": [],
            "actions_taken": ["answered"],
        }
        text = json.dumps(reply, ensure_ascii=False)
        if self.mode == "fenced":
            text = f"Here is the summary:\n```json\n{text}\n```"
        return provider_pb2.GenerateResponse(
            message=common_pb2.Message(role=ASSISTANT, content=text), model="fake/summarizer"
        )


@pytest.fixture
async def fake_provider() -> AsyncIterator[Callable[[str], Awaitable[tuple[FakeProvider, int]]]]:
    servers: list[grpc.aio.Server] = []

    async def start(mode: str) -> tuple[FakeProvider, int]:
        server = grpc.aio.server()
        fake = FakeProvider(mode)
        provider_pb2_grpc.add_ProviderServiceServicer_to_server(fake, server)  # type: ignore[no-untyped-call]
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        return fake, port

    yield start
    for server in servers:
        await server.stop(0)


async def _session_with_discounts(ctx: Ctx) -> None:
    # A small budget: the recent window is filled by tokens (issue 37), so older turns need one.
    await ctx.create(
        budget=K.BudgetSettings(keep_recent_messages=4, max_context_tokens=400, reserve_system_prompt_tokens=100)
    )
    for i in range(8):
        await ctx.say("s1", USER, f"订单ORD-2025-{i:04d}的折扣是85折还是8折？金额¥{i + 1},000，2025年6月{i + 1}日")
        await ctx.say("s1", ASSISTANT, f"ORD-2025-{i:04d}: 85折, refund ¥{i + 1},000 on 2025-06-{i + 1:02d}")


@pytest.mark.parametrize("mode", ["faithful", "fenced"])
async def test_llm_summary_that_keeps_every_fact_is_used(
    start_context: Callable[..., Awaitable[Ctx]], fake_provider: Any, mode: str
) -> None:
    fake, port = await fake_provider(mode)
    ctx = await start_context(
        {"services": {"provider": {"port": port}}, "context": {"summary_model": "fake/summarizer"}}
    )
    await _session_with_discounts(ctx)
    done = await ctx.stub.Compact(K.CompactRequest(session_id="s1"), metadata=ctx.agent_md)
    assert done.summary.summarizer == "llm"
    assert "85折" in _summary_text(done.summary)
    request = fake.requests[0]
    assert request.model == "fake/summarizer" and request.task_tag == "summarize" and request.agent_id == AGENT
    assert fake.identities[0]  # the caller's verified token travels with the call


async def test_llm_summary_that_drops_a_number_is_rejected(
    start_context: Callable[..., Awaitable[Ctx]], fake_provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fake, port = await fake_provider("drop")
    ctx = await start_context(
        {"services": {"provider": {"port": port}}, "context": {"summary_model": "fake/summarizer"}}
    )
    await _session_with_discounts(ctx)
    with caplog.at_level(logging.WARNING, logger="context_svc"):
        done = await ctx.stub.Compact(K.CompactRequest(session_id="s1"), metadata=ctx.agent_md)
    assert len(fake.requests) == 1  # the model was asked...
    assert done.summary.summarizer == "extractive"  # ...and its summary was refused
    assert "85折" in _summary_text(done.summary)
    assert any("rejected" in r.getMessage() and "85折" in r.getMessage() for r in caplog.records)
    store = ctx.svc.host.store
    assert store is not None
    assert await store.redis.hget("am:sess:{s1}:meta", "summary_rejections") == b"1"  # counted


async def test_llm_summarizer_unreachable_falls_back_to_extractive(
    start_context: Callable[..., Awaitable[Ctx]], refused_port: int
) -> None:
    ctx = await start_context(
        {
            "services": {"provider": {"port": refused_port}},
            "context": {"summary_model": "fake/summarizer", "summary_timeout_s": 2},
        }
    )
    await _session_with_discounts(ctx)
    done = await ctx.stub.Compact(K.CompactRequest(session_id="s1"), metadata=ctx.agent_md)
    assert done.summary.summarizer == "extractive"


async def test_slow_llm_summarizer_leaves_build_context_time_to_answer(
    start_context: Callable[..., Awaitable[Ctx]], fake_provider: Any
) -> None:
    fake, port = await fake_provider("slow")
    ctx = await start_context(
        {"services": {"provider": {"port": port}}, "context": {"summary_model": "fake/summarizer"}}
    )
    await ctx.create(
        budget=K.BudgetSettings(
            keep_recent_messages=4, summary_trigger_tokens=100, max_context_tokens=400, reserve_system_prompt_tokens=100
        )
    )
    for i in range(8):
        await ctx.say("s1", USER, f"order ORD-2025-{i:04d} costs ¥{i + 1},000 " + "detail " * 30)
    started = time.monotonic()
    view = (
        await ctx.stub.BuildContext(K.BuildContextRequest(session_id="s1"), metadata=ctx.agent_md, timeout=3.0)
    ).view
    assert view.compacted and len(fake.requests) == 1
    assert time.monotonic() - started < 3.0  # the model got half the deadline, the build the rest
    summary = (await ctx.stub.Compact(K.CompactRequest(session_id="s1"), metadata=ctx.agent_md)).summary
    assert summary.summarizer == "extractive" and "ORD-2025-0000" in _summary_text(summary)
