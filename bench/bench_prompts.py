"""Benchmark: what keeping each step's prompt costs (issue 24), against the bare gRPC round trip.

In one process, one run:
- provider_svc's domain answering a Generate (upstream mocked with httpx.MockTransport) on a
  realistic late-step request (a system block, 40 turns, 8 tools: about 50 KB of JSON), without
  `include_request`, and with it: the first time the request is seen (every string masked: a replica
  that never saw the task), and at steady state (the next step: the history seen, two messages new);
- the dispatcher's part: encoding the step's record (zlib) and the fenced commit that checkpoints the
  reply, without and with the record (the test Redis, a real redis-server on a free port).

    .venv/bin/python -m bench.bench_prompts [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys

import httpx

from agentmesh.config import DispatcherSettings, ProvidersSettings, RedisSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.store import Store
from agentmesh.v1 import common_pb2, provider_pb2
from bench.common import STATS_HEADER, Stats, bare_roundtrip, measure, table
from dispatcher_svc.model import EventKind, SentPrompt, TaskEvent, TaskStatus
from dispatcher_svc.prompts import encode_prompt
from dispatcher_svc.tasks import TaskStore, fields_of
from provider_svc.models.base import CallContext
from provider_svc.recording import RequestRecorder
from provider_svc.server import generation_pb, to_request
from provider_svc.service import Providers

_WORDS = [
    *("the", "pod", "payment-svc", "restarted", "3", "times", "with", "error", "timeout", "on", "order"),
    *("ORD-2025-0042", "amount", "3000", "CNY", "user", "asked", "why", "checkout", "failed", "at", "10:42"),
    *("and", "the", "pool", "was", "exhausted", "retry", "later"),
]


def _conversation(turns: int, seed: int) -> list[common_pb2.Message]:
    rng = random.Random(seed)
    system = common_pb2.Message(role=common_pb2.ROLE_SYSTEM, content="You are an on-call SRE agent. " * 40)
    messages = [system]
    for i in range(turns):
        role = common_pb2.ROLE_USER if i % 2 == 0 else common_pb2.ROLE_ASSISTANT
        text = " ".join(rng.choice(_WORDS) for _ in range(180))
        messages.append(common_pb2.Message(role=role, content=f"turn {i}: {text}"))
    return messages


def _tools() -> list[common_pb2.ToolSpec]:
    schema = {"type": "object", "properties": {"service": {"type": "string", "description": "e.g. payment-svc"}}}
    description = "Use when you need the state of a service. " * 3
    return [
        common_pb2.ToolSpec(name=f"tool_{i}", description=description, input_schema_json=json.dumps(schema))
        for i in range(8)
    ]


async def _provider(calls: int) -> list[Stats]:
    canned = json.dumps(
        {"id": "x", "object": "chat.completion", "created": 1, "model": "m1",
         "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
         "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}
    ).encode()  # fmt: skip

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=canned, headers={"content-type": "application/json"})

    section = ProvidersSettings.model_validate(
        {"default_model": "fake/m1",
         "backends": [{"name": "fake", "type": "openai", "base_url": "http://fake.invalid/v1", "api_key": "sk-bench",
                       "rate_limit_per_min": None, "concurrency": 64, "models": [{"name": "m1"}]}]}
    )  # fmt: skip
    providers = Providers(section)
    providers.model("fake/m1")
    providers.factory.http["fake"]._transport = httpx.MockTransport(answer)
    history = _conversation(40, seed=1)
    request = to_request(provider_pb2.GenerateRequest(model="fake/m1", messages=history, tools=_tools()))
    results = []

    async def without() -> None:
        generation_pb(await providers.generate(request, CallContext(), model="fake/m1"))

    results.append(await measure("Generate, no include_request", without, calls=calls, concurrency=1))

    async def cold() -> None:
        generation = await providers.generate(request, CallContext(), model="fake/m1")
        assert generation.response.sent is not None
        await RequestRecorder().record(generation.response.sent)  # a fresh cache: every string masked

    results.append(await measure("Generate + request, first sight", cold, calls=max(10, calls // 10), concurrency=1))

    recorder = RequestRecorder()
    step = [0]

    async def steady() -> None:
        # The next step: the same history plus two new messages, as a task's steps go.
        step[0] += 1
        extra = _conversation(2, seed=1000 + step[0])[1:]
        req = to_request(provider_pb2.GenerateRequest(model="fake/m1", messages=[*history, *extra], tools=_tools()))
        generation = await providers.generate(req, CallContext(), model="fake/m1")
        assert generation.response.sent is not None
        await recorder.record(generation.response.sent)

    await steady()  # the history seen once
    results.append(await measure("Generate + request, next step", steady, calls=calls, concurrency=1))
    await providers.aclose()
    return results


async def _dispatcher(calls: int, redis_url: str) -> tuple[list[Stats], int, int]:
    store = await Store.connect(RedisSettings(url=redis_url), "dev")
    tasks = TaskStore(store, DispatcherSettings())
    body = json.dumps(
        {"model": "m1", "messages": [{"role": "user", "content": m.content} for m in _conversation(40, seed=2)]},
        separators=(",", ":"),
    )
    sent = SentPrompt("openai.chat.completions", body)
    created = TaskEvent(task_id="b", sequence=0, kind=EventKind.STATUS, time_ms=1, status=TaskStatus.PENDING)
    await tasks.commit("b", fence=None, fields=fields_of(status=TaskStatus.PENDING, task_id="b"), events=[created])
    cursor = json.dumps({"phase": "acting", "step": 3, "calls": [{"call": {"id": "c", "name": "x"}}] * 3})
    results = []

    async def commit_plain() -> None:
        await tasks.commit("b", fence=0, fields={"cursor": cursor, "update_ms": "1"})

    async def commit_with_record() -> None:
        record = encode_prompt("fake/m1", sent, 1)
        await tasks.commit("b", fence=0, fields={"cursor": cursor, "update_ms": "1"}, prompt=(3, record))

    results.append(await measure("reply commit", commit_plain, calls=calls, concurrency=1))
    results.append(await measure("reply commit + prompt record", commit_with_record, calls=calls, concurrency=1))
    await store.close()
    return results, len(body.encode()), len(encode_prompt("fake/m1", sent, 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with LocalRedis() as redis_server:
        bare = asyncio.run(bare_roundtrip(args.calls, 1))
        provider = asyncio.run(_provider(args.calls))
        dispatcher, raw, stored = asyncio.run(_dispatcher(args.calls, redis_server.url))
    rows: list[Stats] = [bare, *provider, *dispatcher]
    print(table([*STATS_HEADER, "x bare p50"], [[*r.row(), f"{r.p50_ms / bare.p50_ms:.2f}"] for r in rows]))
    base, cold, steady = provider
    plain, recorded = dispatcher
    print()
    print(
        f"provider_svc: include_request adds {(cold.p50_ms - base.p50_ms) / bare.p50_ms:.1f}x the bare round trip "
        f"the first time a request is seen, {(steady.p50_ms - base.p50_ms) / bare.p50_ms:.2f}x at a next step"
    )
    print(
        f"dispatcher: the record ({raw} bytes of request, {stored} stored: {raw / stored:.1f}x smaller) adds "
        f"{(recorded.p50_ms - plain.p50_ms) / bare.p50_ms:.2f}x the bare round trip to the reply's commit"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
