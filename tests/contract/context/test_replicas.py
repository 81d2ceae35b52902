"""Two replicas serve one session; sessions outlive a replica (state is in Redis only)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from agentmesh.v1 import common_pb2, context_pb2
from tests.contract.context.conftest import Ctx
from tests.unit.context.ops_session import ops_session

USER = common_pb2.ROLE_USER


async def test_fifty_concurrent_appends_through_two_replicas_lose_nothing_and_keep_order(
    start_context: Callable[..., Awaitable[Ctx]],
) -> None:
    replicas = (await start_context(), await start_context())
    await replicas[0].create("s1")
    writers, per_writer = 10, 5

    async def writer(w: int) -> list[tuple[int, int, str]]:
        sent = []
        for k in range(per_writer):
            text = f"writer {w} message {k} " + "x" * (w * 7 + k)
            reply = await replicas[(w + k) % 2].say("s1", USER, text)  # alternate replicas
            sent.append((reply.index, reply.token_count, text))
        return sent

    results = await asyncio.gather(*(writer(w) for w in range(writers)))
    indexes = sorted(index for sent in results for index, _, _ in sent)
    assert indexes == list(range(writers * per_writer))  # nothing lost, no index twice
    for sent in results:  # each writer's messages are in the order it sent them
        assert [index for index, _, _ in sent] == sorted(index for index, _, _ in sent)

    store = replicas[0].svc.host.store
    assert store is not None
    log = await store.redis.lrange("am:sess:{s1}:log", 0, -1)
    by_index = {index: text for sent in results for index, _, text in sent}
    assert [json.loads(raw)["c"] for raw in log] == [by_index[i] for i in range(len(log))]
    session = (
        await replicas[1].stub.GetSession(context_pb2.GetSessionRequest(session_id="s1"), metadata=replicas[1].agent_md)
    ).session
    assert session.message_count == 50
    assert session.total_tokens == sum(tokens for sent in results for _, tokens, _ in sent)


async def test_both_replicas_build_the_same_context(start_context: Callable[..., Awaitable[Ctx]]) -> None:
    a, b = await start_context(), await start_context()
    await a.create("s1", budget=context_pb2.BudgetSettings(summary_trigger_tokens=800, max_context_tokens=2000))
    await a.play("s1", ops_session(30, big=False))
    view_a = await a.build()  # compacts
    view_b = await b.build()
    assert view_a.compacted and not view_b.compacted
    assert [(m.role, m.content) for m in view_a.messages] == [(m.role, m.content) for m in view_b.messages]


async def test_session_survives_a_context_svc_restart(start_context: Callable[..., Awaitable[Ctx]]) -> None:
    first = await start_context()
    await first.create("s1", budget=context_pb2.BudgetSettings(summary_trigger_tokens=800, max_context_tokens=2000))
    await first.play("s1", ops_session(20, big=False))
    before = await first.build()
    await first.svc.host.stop(grace=0, drain_delay=0)

    second = await start_context()  # a new process would see exactly this: Redis only
    after = await second.build()
    assert [(m.role, m.content, m.token_count) for m in before.messages] == [
        (m.role, m.content, m.token_count) for m in after.messages
    ]
    await second.say("s1", USER, "still there?")
    session = (
        await second.stub.GetSession(context_pb2.GetSessionRequest(session_id="s1"), metadata=second.agent_md)
    ).session
    assert session.message_count == before.summarized_messages + len(before.messages) - 2 + 1
