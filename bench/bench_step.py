"""Orchestration overhead of one agent step, beside the same number of bare gRPC round trips.

A task "add two numbers" takes two steps (the model calls `calculator`, then answers). Its
dispatcher runs in this process behind the real ServiceHost (auth, OTel, load shedding) with Redis;
the downstream services are either
- `minimal`: trivial ContextService/ToolService/ProviderService servers answering at once, so the
  step time is the dispatcher's own orchestration plus the raw RPCs it makes; or
- `real`: context_svc, tool_svc (calculator) and provider_svc (scripted) themselves, in process.
Each task is measured from RunTask to its final event, at 1 and 32 concurrent tasks. The floor is
`RPCs per step` bare unary round trips (no interceptors, same machine, same run, measured in
rounds alternating with the tasks') at the same concurrency: the step ratio = step p50 / floor p50.

Minimal mode also measures a `skeleton` in the same rounds: the least any implementation of this
design could do for the same task. A bare grpc.aio RunTask handler (no auth, tracing, headers,
loop or checkpoint logic) replays, through bare channels to the same minimal servers, the exact
requests the real task sent (recorded), with the same two pairs of calls overlapped. It streams the
real task's exact events and makes as many Redis round trips as the real task made (counted). Its
ratio is what the design itself costs over the floor: the transport of 12 events and the Redis
writes that make a task survive a crash. The real task's ratio beyond it is our code. A second
skeleton, `skeleton + our channels`, makes its downstream calls through `create_channel` with the
dispatcher's telemetry (request id, identity, deadline, baggage, CLIENT span): the share of our
cost that is the outgoing hop itself.

Run: `.venv/bin/python bench/bench_step.py [--tasks 200] [--mode minimal|real|both]`. The minimal and real
downstream services and their hosting are `bench.step_downstream`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.dev.localredis import LocalRedis
from agentmesh.rpc.channels import create_channel
from agentmesh.v1 import (
    context_pb2_grpc,
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    provider_pb2_grpc,
    tool_pb2_grpc,
)
from bench.common import BENCH_DIR, STATS_HEADER, BareEchoServer, Stats, alternating, bar_plot, stats_of, table
from bench.step_downstream import (
    REAL_EXTRA,
    Counting,
    base_settings,
    host_service,
    minimal_downstream,
    real_downstream,
    redis_commands,
)

D = dispatcher_pb2


ROUNDS = {1: 5, 32: 2}
"""Tasks and bare round trips are measured in alternating rounds, so a change in the machine's
speed during the run (common on shared machines) weighs on both sides of the ratio alike. Fewer
at 32: each round ramps up to 32 in flight and down again, which a short round would overweigh."""


async def interleaved(
    workloads: dict[str, Callable[[], Awaitable[None]]], *, tasks: int, roundtrips: int, concurrency: int
) -> tuple[dict[str, Stats], Stats]:
    """Stats of `tasks` runs of each workload and of `roundtrips` bare round trips, in alternating
    rounds (ROUNDS)."""
    rounds = ROUNDS.get(concurrency, 1)
    payload = b"x" * 64
    async with BareEchoServer() as server, grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        echo = channel.unary_unary("/bench.Echo/Echo")  # type: ignore[call-arg]

        async def roundtrip() -> None:
            await echo(payload)

        for workload in workloads.values():
            for _ in range(5):
                await workload()
        for _ in range(20):
            await roundtrip()
        bare = "bare gRPC round trip"
        measured = await alternating(
            {**{name: (workload, tasks) for name, workload in workloads.items()}, bare: (roundtrip, roundtrips)},
            rounds=rounds,
            concurrency=concurrency,
        )
    stats = {name: stats_of(name, concurrency, latencies, seconds) for name, (latencies, seconds) in measured.items()}
    return (
        {name: stats[name] for name in workloads},
        stats[bare],
    )


@contextlib.contextmanager
def counting_redis_round_trips() -> Iterator[Counter[str]]:
    """Counts the round trips every redis.asyncio client in this process makes meanwhile: a command
    (a script call is one EVALSHA) or a whole pipeline, by name."""
    import redis.asyncio.client

    counts: Counter[str] = Counter()
    command: Any = redis.asyncio.client.Redis.execute_command
    pipeline: Any = redis.asyncio.client.Pipeline.execute

    async def counted_command(self: Any, *args: Any, **options: Any) -> Any:
        counts[str(args[0])] += 1
        return await command(self, *args, **options)

    async def counted_pipeline(self: Any, *args: Any, **options: Any) -> Any:
        counts["pipeline"] += 1
        return await pipeline(self, *args, **options)

    # Pipeline overrides execute_command (it only queues), so a pipeline counts once, at execute.
    setattr(redis.asyncio.client.Redis, "execute_command", counted_command)  # noqa: B010
    setattr(redis.asyncio.client.Pipeline, "execute", counted_pipeline)  # noqa: B010
    try:
        yield counts
    finally:
        setattr(redis.asyncio.client.Redis, "execute_command", command)  # noqa: B010
        setattr(redis.asyncio.client.Pipeline, "execute", pipeline)  # noqa: B010


OVERLAPPED = ({"BuildContext", "DiscoverTools"}, {"AppendMessage", "ExecuteTool"})
"""The pairs of calls the agent loop makes at once (dispatcher_svc/run/downstream.py, `alongside`)."""


class Skeleton(dispatcher_pb2_grpc.DispatcherServiceServicer):
    """The bare RunTask of the module docstring: a recorded task's calls, events and Redis round
    trips, replayed with nothing else."""

    def __init__(
        self,
        calls: list[tuple[str, Any]],
        events: list[D.RunTaskResponse],
        redis_url: str,
        redis_round_trips: int,
        ports: dict[str, int],
        channel: Callable[[str], grpc.aio.Channel] = grpc.aio.insecure_channel,
    ) -> None:
        self.channel = channel
        self.events = events
        self.redis_round_trips = redis_round_trips
        self.redis_url = redis_url
        self.ports = ports
        self.calls = calls
        self.server = grpc.aio.server()
        self.port = 0
        self.tasks = 0

    async def __aenter__(self) -> Skeleton:
        import redis.asyncio

        self.redis = redis.asyncio.Redis.from_url(self.redis_url)
        self.channels = [self.channel(f"127.0.0.1:{self.ports[name]}") for name in ("context", "tool", "provider")]
        stubs = (
            context_pb2_grpc.ContextServiceStub(self.channels[0]),  # type: ignore[no-untyped-call]
            tool_pb2_grpc.ToolServiceStub(self.channels[1]),  # type: ignore[no-untyped-call]
            provider_pb2_grpc.ProviderServiceStub(self.channels[2]),  # type: ignore[no-untyped-call]
        )
        methods = {name: getattr(stub, name) for stub in stubs for name in dir(stub) if name[0].isupper()}
        # Consecutive calls the loop overlaps become one batch, awaited together.
        self.batches: list[list[tuple[Callable[..., Awaitable[Any]], Any]]] = []
        previous = ""
        for method, request in self.calls:
            if self.batches and len(self.batches[-1]) == 1 and {previous, method} in OVERLAPPED:
                self.batches[-1].append((methods[method], request))
            else:
                self.batches.append([(methods[method], request)])
            previous = method
        dispatcher_pb2_grpc.add_DispatcherServiceServicer_to_server(self, self.server)  # type: ignore[no-untyped-call]
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop(0)
        for channel in self.channels:
            await channel.close(None)
        await self.redis.aclose()

    async def RunTask(self, request: Any, context: Any) -> AsyncIterator[D.RunTaskResponse]:
        self.tasks += 1
        key = f"bench:skeleton:{self.tasks}"
        events = iter(self.events)
        round_trips = self.redis_round_trips
        # An event, a Redis write of it, then the next calls: spread like the loop's own.
        for batch in self.batches:
            event = next(events, None)
            if event is not None:
                yield event
                if round_trips > 0:
                    round_trips -= 1
                    await self.redis.hset(key, "event", event.SerializeToString())
            if len(batch) == 1:
                await batch[0][0](batch[0][1])
            else:
                await asyncio.gather(*(method(call_request) for method, call_request in batch))
        for event in events:
            if round_trips > 0:
                round_trips -= 1
                await self.redis.hset(key, "event", event.SerializeToString())
            yield event
        for _ in range(round_trips):
            await self.redis.hset(key, "event", b"")


async def run_mode(mode: str, redis: LocalRedis, tasks: int) -> tuple[list[Stats], dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-step-{mode}-"))
    if mode == "minimal":
        ports, stop_downstream = await minimal_downstream()
        extra = None
    else:
        ports, stop_downstream = await real_downstream(redis.url, tmp)
        extra = REAL_EXTRA
    settings = base_settings(redis.url, tmp, ports, extra)
    from dispatcher_svc.server import SPEC

    host, stop_dispatcher = await host_service(SPEC, settings)
    token = Authenticator(settings.auth, settings.environment).mint(subject="bench", roles=("operator",))
    metadata = ((IDENTITY_HEADER, token),)
    rows: list[Stats] = []
    facts: dict[str, Any] = {"rpcs_per_task": 11.0}
    try:
        async with contextlib.AsyncExitStack() as stack:
            channel = await stack.enter_async_context(grpc.aio.insecure_channel(f"127.0.0.1:{host.port}"))
            stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
            steps_seen: list[int] = []
            received: list[D.RunTaskResponse] = []

            async def run_task(run: Any) -> None:
                start = D.StartTaskRequest(agent_id="calc", goal="what is 40 + 2? use the calculator")
                replies = [reply async for reply in run(D.RunTaskRequest(start=start), metadata=metadata, timeout=60)]
                last = replies[-1].event if replies else None
                assert last is not None and last.status == D.TASK_STATUS_SUCCEEDED, last
                steps_seen.append(last.step)
                received[:] = replies  # the last task's stream, which the skeleton replays

            async def one_task() -> None:
                await run_task(stub.RunTask)

            for _ in range(2):  # first calls load scripts and open connections: not a task's cost
                await one_task()
            Counting.calls.clear()
            before = await redis_commands(redis.url)
            with counting_redis_round_trips() as round_trips:
                for _ in range(5):
                    await one_task()
                await asyncio.sleep(0.2)  # the answer is recorded in the session just after the final event
            after = await redis_commands(redis.url)
            counted_rpcs = sum(Counting.calls.values()) / 5
            # One more task, recorded alone (its answer's AppendMessage comes after its final event).
            recorded_calls: list[tuple[str, Any]] = []
            Counting.recording = recorded_calls
            await one_task()
            await asyncio.sleep(0.2)
            Counting.recording = None
            recorded_events = list(received)
            used = {name: (after[name] - before.get(name, 0)) / 5 for name in after}
            facts["redis_per_task"] = sum(used.values()) - 1  # minus our own INFO
            facts["redis_detail"] = ", ".join(
                f"{name} {n:g}" for name, n in sorted(used.items(), key=lambda kv: -kv[1]) if n and name != "info"
            )
            facts["redis_round_trips"] = round(sum(round_trips.values()) / 5)
            facts["redis_round_trip_detail"] = ", ".join(
                f"{name} {n / 5:g}" for name, n in sorted(round_trips.items(), key=lambda kv: -kv[1])
            )
            # The real services are not counted: they make the same calls (the dispatcher decides them).
            rpcs_per_task = counted_rpcs if mode == "minimal" else facts["rpcs_per_task"]
            steps = steps_seen[-1]
            facts["steps_per_task"] = steps
            facts["rpcs_per_task"] = rpcs_per_task
            workloads: dict[str, Callable[[], Awaitable[None]]] = {f"agent step ({mode})": one_task}
            if mode == "minimal":

                def our_channel(target: str) -> grpc.aio.Channel:
                    return create_channel(target, settings, telemetry=host.telemetry, identity_token=token)

                for name, channel_of in (
                    ("skeleton", grpc.aio.insecure_channel),
                    ("skeleton + our channels", our_channel),
                ):
                    skeleton = await stack.enter_async_context(
                        Skeleton(
                            recorded_calls, recorded_events, redis.url, facts["redis_round_trips"], ports, channel_of
                        )
                    )
                    skeleton_channel = await stack.enter_async_context(
                        grpc.aio.insecure_channel(f"127.0.0.1:{skeleton.port}")
                    )
                    workloads[f"agent step ({name})"] = functools.partial(
                        run_task,
                        dispatcher_pb2_grpc.DispatcherServiceStub(skeleton_channel).RunTask,  # type: ignore[no-untyped-call]
                    )
            for concurrency in (1, 32):
                n = tasks if concurrency == 1 else tasks * 2
                measured, bare = await interleaved(
                    workloads, tasks=n, roundtrips=max(400, n * 4), concurrency=concurrency
                )
                rpcs_per_step = (rpcs_per_task + 1) / steps  # + the client's RunTask
                for name, stats in measured.items():
                    rows.append(
                        Stats(
                            name=name,
                            concurrency=concurrency,
                            calls=stats.calls * steps,
                            p50_ms=stats.p50_ms / steps,
                            p99_ms=stats.p99_ms / steps,
                            mean_ms=stats.mean_ms / steps,
                            throughput_per_s=stats.throughput_per_s * steps,
                        )
                    )
                floor = Stats(
                    name=f"{rpcs_per_step:.1f} bare round trips",
                    concurrency=concurrency,
                    calls=bare.calls,
                    p50_ms=bare.p50_ms * rpcs_per_step,
                    p99_ms=bare.p99_ms * rpcs_per_step,
                    mean_ms=bare.mean_ms * rpcs_per_step,
                    throughput_per_s=bare.throughput_per_s / rpcs_per_step,
                )
                rows.append(floor)
                for name, stats in measured.items():
                    label = name.removeprefix("agent step (").removesuffix(")")
                    facts.setdefault("ratios", {})[f"{label} c={concurrency}"] = stats.p50_ms / steps / floor.p50_ms
                facts[f"bare_p50_c{concurrency}"] = bare.p50_ms
    finally:
        await stop_dispatcher()
        await stop_downstream()
    return rows, facts


async def main(tasks: int, modes: list[str]) -> int:
    logging.getLogger().setLevel(logging.WARNING)
    all_rows: list[Stats] = []
    ratios: dict[str, float] = {}
    with LocalRedis() as redis:
        for mode in modes:
            began = time.perf_counter()
            rows, facts = await run_mode(mode, redis, tasks)
            all_rows += rows
            measured = ", ".join(f"{label} {ratio:.2f}x" for label, ratio in facts["ratios"].items())
            print(
                f"[{mode}] {facts['steps_per_task']:.0f} steps/task, "
                f"{facts['rpcs_per_task']:.0f} downstream RPCs/task; step/floor p50 ratio: {measured} "
                f"({time.perf_counter() - began:.0f}s)"
            )
            redis_line = f"{facts['redis_per_task']:.1f} ({facts['redis_detail']})"
            print(f"[{mode}] Redis commands per task (all services, incl. those inside Lua scripts): {redis_line}")
            trips = f"{facts['redis_round_trips']} ({facts['redis_round_trip_detail']})"
            print(f"[{mode}] Redis round trips per task (all services): {trips}")
            ratios |= facts["ratios"]
    print()
    print(table(STATS_HEADER, [r.row() for r in all_rows]))
    print("\ntarget: step p50 <= 2x the floor of the same number of bare round trips")
    print("skeleton: the same task's calls, events and Redis round trips on bare gRPC with nothing else")
    path = bar_plot(
        BENCH_DIR / "bench_step.png",
        "agent step p50 / bare round-trip floor",
        list(ratios),
        list(ratios.values()),
        "ratio (x)",
    )
    print(f"plot: {path}")
    print(json.dumps({"ratios": ratios}))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100, help="tasks at concurrency 1 (2x that at 32)")
    parser.add_argument("--mode", choices=["minimal", "real", "both"], default="both")
    ns = parser.parse_args()
    chosen = ["minimal", "real"] if ns.mode == "both" else [ns.mode]
    sys.exit(asyncio.run(main(ns.tasks, chosen)))
