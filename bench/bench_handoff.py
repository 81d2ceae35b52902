"""BuildHandoff in process (issue 44): what a hop carries against the transcript it replaces, and its p50.

A generated ops session (tests/unit/context/ops_session.py: user and assistant turns with planted facts,
tool outputs, some offloaded) of N messages is the parent; the brief cites up to 6 offloaded payloads
(the first line of each, by line range, its first fact as the value) plus one fabricated citation
(demoted) and one inferred fact. Printed: the transcript's tokens (the session's total), the hop's
tokens, the facts confirmed / demoted, the items left out to fit the cap (the oldest user constraints
first here: the generated user turns state many values), and the p50 of 50 BuildHandoff calls (engine
in process, a local redis-server; no gRPC):

    PYTHONPATH=. .venv/bin/python bench/bench_handoff.py
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

from agentmesh.config import ContextSettings, RedisSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from context_svc.facts.facts import find_facts
from context_svc.handoff_model import Brief, Citation, Fact
from context_svc.model import Caller, Message, Role, ToolCall, ToolOutcome
from tests.unit.context.ops_session import ops_session

OPERATOR = Caller("bench", is_operator=True)


async def populate(engine: ContextEngine, sid: str, n: int) -> list[tuple[str, str]]:
    """The session of n messages; (ref id, first line) of each output offloaded on the way."""
    await engine.create_session(OPERATOR, session_id=sid, goal="keep the checkout service healthy")
    refs: list[tuple[str, str]] = []
    count = 0
    for step in ops_session(max(1, n // 3), seed=n, big=True):
        if count >= n:
            break
        if step.kind == "tool":
            call = ToolCall(step.call_id, step.tool, json.dumps(step.arguments))
            await engine.append_message(OPERATOR, sid, Message(Role.ASSISTANT, tool_calls=(call,)))
            outcome = ToolOutcome(step.call_id, step.tool, inline=step.output, structured=step.structured)
            _, _, ref = await engine.append_tool_result(OPERATOR, sid, outcome)
            if ref is not None and len(step.output.splitlines()[0]) < 2000:  # a line, not a one-line JSON
                refs.append((ref.ref_id, step.output.splitlines()[0]))
            count += 2
        else:
            await engine.append_message(OPERATOR, sid, Message(Role(step.kind), step.text))
            count += 1
    return refs


def brief(refs: list[tuple[str, str]]) -> Brief:
    facts = []
    for ref_id, first in refs[:6]:
        found = next(iter(find_facts(first)), None)
        if found is not None:
            facts.append(Fact(f"first line of {ref_id[:10]}", found.text, citation=Citation(ref_id, line_range=(1, 1))))
    facts.append(Fact("db pod", "db-0", citation=Citation("pl_" + "e" * 64)))
    facts.append(Fact("cause", "a connection leak", basis="the pool ran out after the deploy"))
    return Brief(
        summary="Read the checkout logs and the order results; the gateway times out under load.",
        facts=tuple(facts),
        open_questions=("Did the deploy change the pool size?",),
        risks=("Restarting checkout drops in-flight payments.",),
    )


async def main() -> None:
    rows = []
    with LocalRedis() as redis:
        async with await Store.connect(RedisSettings(url=redis.url), "dev") as store:
            engine = ContextEngine(ContextSettings(), store)
            for n in (50, 200, 800):
                sid = f"s{n}"
                refs = await populate(engine, sid, n)
                session, _ = await engine.get_session(OPERATOR, sid)
                the_brief = brief(refs)
                times = []
                for i in range(50):
                    started = time.perf_counter()
                    hop = await engine.handoffs.build(OPERATOR, sid, the_brief, child_session_id=f"{sid}-c{i}")
                    times.append((time.perf_counter() - started) * 1000)
                p50 = statistics.median(times)
                rows.append((n, session.total_tokens, hop.token_count, hop.confirmed, hop.demoted, hop.omitted, p50))
    print("| messages | transcript tokens | hop tokens (cap 800) | confirmed | demoted | omitted | BuildHandoff p50 |")
    print("|---|---|---|---|---|---|---|")
    for n, transcript, tokens, confirmed, demoted, omitted, p50 in rows:
        print(f"| {n} | {transcript:,} | {tokens} | {confirmed} | {demoted} | {omitted} | {p50:.1f} ms |")


if __name__ == "__main__":
    asyncio.run(main())
