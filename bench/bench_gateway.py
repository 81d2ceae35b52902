"""Benchmark: provider_svc's OpenAI-compatible endpoint beside LiteLLM's proxy, on the same fake upstream.

One run, same machine, same moment, every workload an HTTP POST of one chat completion (httpx, kept-alive
connections), at concurrency 1 and 32:
- direct: the local fake OpenAI upstream (tests/contract/provider/fakes.py, its own process);
- agentmesh: provider_svc's `/v1/chat/completions` (its own process, with Redis, auth by an agentmesh API
  key whose quotas are checked and settled on every call, spans, metrics, usage) -> the fake;
- litellm: LiteLLM's proxy (`.venv-litellm`, `make litellm-venv`; its own process, one worker, no
  database, a master key) -> the fake;
- litellm -> agentmesh: LiteLLM's proxy pointed at our endpoint as its OpenAI upstream (the chain a
  LiteLLM user gets when putting agentmesh behind it), for reference.
Added p50 is each path's p50 minus direct's; requests/s is the throughput at each concurrency. The
rounds alternate between workloads so the machine's drift weighs on all alike. Without LiteLLM's venv
the LiteLLM rows are left out (and said so).

    .venv/bin/python -m bench.bench_gateway [--calls 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from agentmesh.apikeys import ApiKeys
from agentmesh.cli.supervisor import health_status
from agentmesh.config import QuotaLimits, RedisSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.store import Store
from bench.common import BENCH_DIR, alternating, stats_of, table
from tests.litellm.proxy import LiteLLMProxy, available, free_port

REPO = BENCH_DIR.parent
AUTH_KEY = "bench-gateway-key-" + "g" * 32
UPSTREAM_KEY = "sk-bench-0123456789"
QUESTION = "What is the status of order ORD-2025-0001?"


def _start_fake() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.contract.provider.fakes", "openai", "--no-validate"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"fake upstream did not start: {line!r}")
    return proc, int(line.split()[1])


def _start_provider(tmp: Path, fake_port: int, redis_url: str) -> tuple[subprocess.Popen[bytes], int]:
    port, http_port = free_port(), free_port()
    config: dict[str, Any] = {
        "environment": "dev",
        "auth": {"mode": "enabled", "key": AUTH_KEY},
        "redis": {"url": redis_url},
        "services": {"provider": {"host": "127.0.0.1", "port": port, "http_port": http_port}},
        "telemetry": {"span_file": str(tmp / "spans.jsonl"), "log_level": "WARNING"},
        "providers": {
            "default_model": "fake/m1",
            "backends": [
                {
                    "name": "fake",
                    "type": "openai",
                    "base_url": f"http://127.0.0.1:{fake_port}/v1",
                    "api_key": UPSTREAM_KEY,
                    "concurrency": 64,  # sized for the benchmark: the default (8) would be what we measure
                    "rate_limit_per_min": None,
                    "models": [{"name": "m1", "input_price_per_mtok": 0.15, "output_price_per_mtok": 0.6}],
                }
            ],
        },
    }
    path = tmp / "agentmesh.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "OTEL_"))}
    env["PYTHONPATH"] = str(REPO)
    log = (tmp / "provider.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "provider_svc", str(path)], cwd=REPO, env=env, stdout=log, stderr=log
    )
    deadline = time.monotonic() + 60
    while health_status(f"127.0.0.1:{port}", timeout_s=1.0) != "SERVING":
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"provider_svc did not start; see {tmp / 'provider.log'}")
        time.sleep(0.1)
    return proc, http_port


async def _key(redis_url: str) -> str:
    async with await Store.connect(RedisSettings(url=redis_url), "dev", check=False) as store:
        # Limits far above what the benchmark sends: the quota scripts run on every call, never refuse.
        key, _ = await ApiKeys(store).create(
            agent_id="bench", environment="dev", limits=QuotaLimits(rpm=10_000_000, budget_usd_day=1_000_000.0)
        )
        return key


async def _measure(targets: dict[str, tuple[str, str, str]], calls: int, rounds: int) -> list[Any]:
    """targets: name -> (url, bearer token, model)."""
    results = []
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        def call(url: str, token: str, model: str) -> Callable[[], Awaitable[None]]:
            body = json.dumps({"model": model, "messages": [{"role": "user", "content": QUESTION}]}).encode()
            headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}

            async def post() -> None:
                response = await client.post(url, content=body, headers=headers)
                response.raise_for_status()
                response.json()

            return post

        workloads = {name: (call(*target), calls) for name, target in targets.items()}
        for fn, _ in workloads.values():  # warm-up: connections, caches, LiteLLM's first-call set-up
            for _ in range(20):
                await fn()
        for concurrency in (1, 32):
            measured = await alternating(workloads, rounds=rounds, concurrency=concurrency)
            results += [stats_of(name, concurrency, lat, secs) for name, (lat, secs) in measured.items()]
    return results


def _report(results: list[Any], litellm: bool) -> str:
    rows = []
    by = {(r.name, r.concurrency): r for r in results}
    for r in results:
        direct = by[("direct -> fake", r.concurrency)]
        added = r.p50_ms - direct.p50_ms
        rows.append([*r.row(), "" if r.name.startswith("direct") else f"{added:.3f}"])
    out = [table(["workload", "conc", "calls", "p50 ms", "p99 ms", "req/s", "added p50 ms"], rows)]
    if litellm:
        for c in (1, 32):
            ours, theirs = by[("agentmesh -> fake", c)], by[("litellm -> fake", c)]
            direct = by[("direct -> fake", c)]
            out.append(
                f"concurrency {c}: added p50 agentmesh {ours.p50_ms - direct.p50_ms:.3f} ms vs litellm "
                f"{theirs.p50_ms - direct.p50_ms:.3f} ms; requests/s agentmesh {ours.throughput_per_s:.0f} vs "
                f"litellm {theirs.throughput_per_s:.0f} ({ours.throughput_per_s / theirs.throughput_per_s:.1f}x)"
            )
    else:
        out.append("LiteLLM's venv is missing (make litellm-venv): its rows are left out")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls per workload and concurrency")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    args = parser.parse_args()
    fake, fake_port = _start_fake()
    provider: subprocess.Popen[bytes] | None = None
    proxies: list[LiteLLMProxy] = []
    try:
        with LocalRedis() as redis_server, tempfile.TemporaryDirectory() as tmp:
            provider, http_port = _start_provider(Path(tmp), fake_port, redis_server.url)
            key = asyncio.run(_key(redis_server.url))
            ours = f"http://127.0.0.1:{http_port}/v1"
            upstream = f"http://127.0.0.1:{fake_port}/v1"
            targets = {
                "direct -> fake": (f"{upstream}/chat/completions", UPSTREAM_KEY, "m1"),
                "agentmesh -> fake": (f"{ours}/chat/completions", key, "fake/m1"),
            }
            litellm = available()
            if litellm:
                for name, base, model, token in (
                    ("litellm -> fake", upstream, "m1", UPSTREAM_KEY),
                    ("litellm -> agentmesh -> fake", ours, "fake/m1", key),
                ):
                    folder = Path(tmp) / name.replace(" ", "").replace(">", "")
                    folder.mkdir()
                    proxy = LiteLLMProxy(folder, {"bench": (model, base, token)}).start()
                    proxies.append(proxy)
                    targets[name] = (f"{proxy.base_url}/v1/chat/completions", proxy.master_key, "bench")
            results = asyncio.run(_measure(targets, args.calls, args.rounds))
    finally:
        for proxy in proxies:
            proxy.stop()
        if provider is not None and provider.poll() is None:
            provider.terminate()
            provider.wait(timeout=30)
        fake.terminate()
        fake.wait(timeout=10)
    print(_report(results, litellm))
    return 0


if __name__ == "__main__":
    sys.exit(main())
