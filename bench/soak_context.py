"""Soak: does context_svc's memory stay bounded over many task attempts? (issue 39)

The third red team saw context_svc grow 205 -> 215 MB over 1,000 task attempts. This runs
context_svc as its own process (`python -m context_svc`, real Redis) and plays N task attempts
against it, each as the dispatcher's run would: a new session, the goal, a few agent-loop turns
(question, tool call, a ~2 KB tool result, answer) with a BuildContext before each model call. It
samples the process's resident memory (VmRSS) as it goes and prints a table and the growth over the
second half of the run, when every per-process cache is full.

The caches that fill are bounded by entry counts (`context.token_cache_entries`,
`summary_cache_entries`, the recall indexes' LRU of 256 sessions): RSS climbs while they fill, then
stays flat. A leak shows as growth in the second half.

    .venv/bin/python -m bench.soak_context [--attempts 10000] [--concurrency 8] [--samples 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc.aio

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.dev.localredis import LocalRedis
from agentmesh.tokens import mint_token
from agentmesh.v1 import context_pb2_grpc
from bench.bench_context import AUTH_KEY, Client, _start_context, populate
from bench.common import table

MESSAGES_PER_ATTEMPT = 12


def rss_mb(pid: int) -> float:
    """Resident memory of process `pid` in MB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def soak(attempts: int, concurrency: int, samples: int) -> list[tuple[int, float, float]]:
    """(attempts done, RSS MB, seconds) at each sample point."""
    for name in [k for k in os.environ if k.startswith(("AGENTMESH_", "OTEL_"))]:
        del os.environ[name]  # the service reads only what this soak configures
    rows: list[tuple[int, float, float]] = []
    with tempfile.TemporaryDirectory() as tmpdir, LocalRedis() as redis:
        proc, target = _start_context(Path(tmpdir), redis.url)
        try:
            token = mint_token(
                AUTH_KEY.encode(), subject="soak", roles=["agent"], ttl_s=86400, agent_id="soak", task_id="soak-task"
            )
            async with grpc.aio.insecure_channel(target) as channel:
                client = Client(context_pb2_grpc.ContextServiceStub(channel), ((IDENTITY_HEADER, token),))  # type: ignore[no-untyped-call]
                started = time.perf_counter()
                rows.append((0, rss_mb(proc.pid), 0.0))
                step = max(1, attempts // samples)

                async def worker(ids: Iterator[int]) -> None:
                    for n in ids:  # shared by the workers: each id is played once
                        await populate(client, f"soak-{n}", MESSAGES_PER_ATTEMPT)

                for done in range(0, attempts, step):
                    ids = iter(range(done, min(attempts, done + step)))
                    await asyncio.gather(*(worker(ids) for _ in range(concurrency)))
                    rows.append((min(attempts, done + step), rss_mb(proc.pid), time.perf_counter() - started))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attempts", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--samples", type=int, default=10)
    args = parser.parse_args(argv)
    rows = asyncio.run(soak(args.attempts, args.concurrency, args.samples))
    print(f"context_svc in its own process, {args.attempts} task attempts of {MESSAGES_PER_ATTEMPT} messages")
    print(table(["attempts", "RSS MB", "elapsed s"], [[str(n), f"{mb:.1f}", f"{s:.0f}"] for n, mb, s in rows]))
    half = next(mb for n, mb, _ in rows if n >= args.attempts // 2)
    print(f"growth over the second half ({args.attempts // 2}..{args.attempts}): {rows[-1][1] - half:+.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
