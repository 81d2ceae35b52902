"""BuildContext p50 of the context engine in process on a 500-message agent-loop session (populated as
bench_context does: question, call, result, answer, a build before each model call), issue 37's
comparison against main in the same run:

    git archive main | tar -x -C /tmp/main-src
    (cd /tmp/main-src && PYTHONPATH=. $REPO/.venv/bin/python $REPO/bench/bench_build_p50.py main)
    PYTHONPATH=. .venv/bin/python bench/bench_build_p50.py branch

"loop builds": the builds made while populating (each after new messages); "repeated build": 300
builds of the finished session (what bench_context's "BuildContext 500 msgs" times through gRPC).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time

from agentmesh.config import ContextSettings, RedisSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from context_svc.model import Caller, Message, Role, ToolCall, ToolOutcome
from tests.unit.context.ops_session import ops_session

OPERATOR = Caller("bench", is_operator=True)


async def _timed(engine: ContextEngine, sid: str, out: list[float]) -> None:
    started = time.perf_counter()
    await engine.build_context(OPERATOR, sid)
    out.append((time.perf_counter() - started) * 1000)


async def populate(engine: ContextEngine, sid: str, n: int, builds: list[float]) -> None:
    await engine.create_session(OPERATOR, session_id=sid, goal="keep the checkout service healthy")
    count = 0
    for step in ops_session(max(1, n // 4), seed=len(sid), big=False):
        if count >= n:
            break
        if step.kind == "tool":
            call = ToolCall(step.call_id, step.tool, json.dumps(step.arguments))
            await engine.append_message(OPERATOR, sid, Message(Role.ASSISTANT, tool_calls=(call,)))
            outcome = ToolOutcome(step.call_id, step.tool, inline=step.output, structured=step.structured)
            await engine.append_tool_result(OPERATOR, sid, outcome)
            count += 2
            await _timed(engine, sid, builds)
        else:
            await engine.append_message(OPERATOR, sid, Message(Role(step.kind), step.text))
            count += 1
            if step.kind == "user":
                await _timed(engine, sid, builds)


async def main(label: str) -> None:
    with LocalRedis() as redis:
        async with await Store.connect(RedisSettings(url=redis.url), "dev") as store:
            engine = ContextEngine(ContextSettings(), store)
            loop_builds: list[float] = []
            await populate(engine, "s500", 500, loop_builds)
            steady: list[float] = []
            for _ in range(300):
                await _timed(engine, "s500", steady)
            loop, repeated = statistics.median(loop_builds), statistics.median(steady)
            print(f"{label}: loop builds p50 {loop:.2f} ms (n={len(loop_builds)}), repeated p50 {repeated:.2f} ms")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "this checkout"))
