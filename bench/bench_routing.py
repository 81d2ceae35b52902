"""Capability routing's choice (dispatcher_svc/routing.py, issue 44): p50/p99 of `Router.route` for a
capability carried by 20 (and 100) agents, each with unfinished tasks in its set and ten minutes of
outcome counters, on a local redis-server. What one StartTask naming a capability adds before the task
is created: one Redis round trip (a pipeline of ZCARD + HGETALL per carrier) and the
rule; ListModels is served from the router's cache (one call per
`routing.models_cache_s`, here a fake catalog).

    .venv/bin/python -m bench.bench_routing [--calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from agentmesh.config import AgentSettings, RedisSettings, RoutingSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.store import Store
from bench.common import percentile, table
from dispatcher_svc.agent_load import AgentLoad
from dispatcher_svc.agents import AgentConfig
from dispatcher_svc.model import TaskStatus
from dispatcher_svc.routing import ModelState, Router

TARGET_MS = 100.0


class Catalog:
    async def models(self, identity_token: str) -> ModelState:
        return ModelState(available=frozenset({"fake/m"}))


async def populate(load: AgentLoad, agents: list[AgentConfig], rng: random.Random) -> None:
    for agent in agents:
        for n in range(rng.randint(0, 30)):
            await load.entered(agent.id, f"{agent.id}-t{n}")
        for n in range(rng.randint(0, 20)):
            status = TaskStatus.FAILED if rng.random() < 0.2 else TaskStatus.SUCCEEDED
            await load.ended(agent.id, f"{agent.id}-done{n}", status, first=True)


async def measure(router: Router, calls: int, concurrency: int) -> list[float]:
    latencies: list[float] = []
    per_worker = calls // concurrency

    async def worker() -> None:
        for _ in range(per_worker):
            started = time.perf_counter()
            await router.route("logs")
            latencies.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


async def main(calls: int) -> None:
    rows: list[list[str]] = []
    with LocalRedis() as redis:
        async with await Store.connect(RedisSettings(url=redis.url), "dev") as store:
            settings = RoutingSettings()
            load = AgentLoad(store, settings)
            rng = random.Random(44)
            for carriers in (20, 100):
                agents = [
                    AgentConfig.from_settings(
                        AgentSettings(id=f"a{carriers}-{i:03d}", model="fake/m", capabilities=["logs"])
                    )
                    for i in range(carriers)
                ]
                await populate(load, agents, rng)
                router = Router(agents, load, Catalog(), settings)
                await measure(router, 50, 1)  # warm: connections, the model cache
                for concurrency in (1, 16):
                    started, cpu = time.perf_counter(), time.process_time()
                    samples = await measure(router, calls, concurrency)
                    rate = len(samples) / (time.perf_counter() - started)
                    cpu_ms = (time.process_time() - cpu) * 1000 / len(samples)
                    p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
                    verdict = "ok" if p99 < TARGET_MS else "OVER"
                    rows.append(
                        [
                            str(carriers),
                            str(concurrency),
                            str(len(samples)),
                            f"{p50:.3f}",
                            f"{p99:.3f}",
                            f"{rate:.0f}",
                            f"{cpu_ms:.3f}",
                            verdict,
                        ]
                    )
    print(f"capability routing choice (Router.route, local redis-server, window {settings.failed_window_s} s)")
    print(
        table(
            ["carriers", "conc", "calls", "p50 ms", "p99 ms", "routes/s", "client CPU ms", f"p99 < {TARGET_MS:.0f} ms"],
            rows,
        )
    )
    print("conc 16: sixteen routes in flight on one event loop at once (their latency includes the queue).")
    print("client CPU ms: the dispatcher process's CPU per route (less sensitive to a busy machine than wall time).")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=2000)
    asyncio.run(main(parser.parse_args().calls))
