"""Shared bench plumbing: the bare gRPC round-trip floor, latency stats, tables and plots.

Every benchmark measures our hop beside a bare grpc.aio round trip in the same run, so the figures
we quote are ratios on this machine at this moment, not absolute times on a noisy shared host.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

BENCH_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Stats:
    """Latency distribution and throughput of one measured workload."""

    name: str
    concurrency: int
    calls: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    throughput_per_s: float

    def row(self) -> list[str]:
        """The stats as table cells."""
        return [
            self.name,
            str(self.concurrency),
            str(self.calls),
            f"{self.p50_ms:.3f}",
            f"{self.p99_ms:.3f}",
            f"{self.throughput_per_s:.0f}",
        ]


STATS_HEADER = ["workload", "conc", "calls", "p50 ms", "p99 ms", "calls/s"]


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of samples, nearest-rank."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def sample(call: Callable[[], Awaitable[Any]], *, calls: int, concurrency: int) -> tuple[list[float], float]:
    """Runs `call` `calls` times from `concurrency` workers: each call's latency (ms), and the
    seconds the whole batch took."""
    latencies: list[float] = []
    remaining = calls

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            start = time.perf_counter()
            await call()
            latencies.append((time.perf_counter() - start) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - began


async def alternating(
    workloads: dict[str, tuple[Callable[[], Awaitable[Any]], int]], *, rounds: int, concurrency: int
) -> dict[str, tuple[list[float], float]]:
    """Runs each workload's `calls` in `rounds` alternating rounds (each round runs every workload
    in turn), so a change in the machine's speed during the run weighs on all of them alike: each
    workload's latencies (ms) and total seconds."""
    results: dict[str, tuple[list[float], float]] = {name: ([], 0.0) for name in workloads}
    for _ in range(rounds):
        for name, (call, calls) in workloads.items():
            got, elapsed = await sample(call, calls=calls // rounds, concurrency=concurrency)
            latencies, seconds = results[name]
            results[name] = (latencies + got, seconds + elapsed)
    return results


def stats_of(name: str, concurrency: int, latencies: Sequence[float], elapsed_s: float) -> Stats:
    """Stats of measured latencies (ms) that took `elapsed_s` in all."""
    return Stats(
        name=name,
        concurrency=concurrency,
        calls=len(latencies),
        p50_ms=percentile(latencies, 0.50),
        p99_ms=percentile(latencies, 0.99),
        mean_ms=statistics.fmean(latencies),
        throughput_per_s=len(latencies) / elapsed_s,
    )


async def measure(
    name: str, call: Callable[[], Awaitable[Any]], *, calls: int, concurrency: int, warmup: int = 20
) -> Stats:
    """Runs `call` `calls` times from `concurrency` workers; latency per call, throughput overall."""
    for _ in range(warmup):
        await call()
    latencies, elapsed = await sample(call, calls=calls, concurrency=concurrency)
    return stats_of(name, concurrency, latencies, elapsed)


class BareEchoServer:
    """A grpc.aio server with one echo method and no interceptors: the floor every hop is compared to."""

    def __init__(self) -> None:
        self.server = grpc.aio.server()
        self.port = 0

        async def echo(request: bytes, context: Any) -> bytes:
            return request

        handler = grpc.unary_unary_rpc_method_handler(
            echo, request_deserializer=lambda b: b, response_serializer=lambda b: b
        )
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", {"Echo": handler}),))

    async def __aenter__(self) -> BareEchoServer:
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop(0)


async def _echo_roundtrips(name: str, port: int, calls: int, concurrency: int, payload: bytes) -> Stats:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        echo = channel.unary_unary("/bench.Echo/Echo")  # type: ignore[call-arg]
        return await measure(name, lambda: echo(payload), calls=calls, concurrency=concurrency)


async def bare_roundtrip(calls: int, concurrency: int, payload: bytes = b"x" * 64) -> Stats:
    """Stats of bare unary round trips to a local echo server (new server, one channel)."""
    async with BareEchoServer() as server:
        return await _echo_roundtrips("bare gRPC round trip", server.port, calls, concurrency, payload)


async def bare_roundtrip_other_process(calls: int, concurrency: int, payload: bytes = b"x" * 64) -> Stats:
    """Like bare_roundtrip, but the echo server runs in its own process, as our services do: the
    floor including the cross-process wake-ups every real hop pays (shown beside the in-process one)."""
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.common", "echo-server", cwd=BENCH_DIR.parent, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        port = int((await server.stdout.readline()).split()[1])
        name = "bare gRPC round trip, other process"
        return await _echo_roundtrips(name, port, calls, concurrency, payload)
    finally:
        server.kill()
        await server.wait()


async def _serve_echo() -> None:
    async with BareEchoServer() as server:
        print(f"PORT {server.port}", flush=True)
        await asyncio.Event().wait()


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain aligned text table."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(header, widths, strict=False))]
    lines.append("  ".join("-" * width for width in widths))
    lines += ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)) for row in rows]
    return "\n".join(lines)


def bar_plot(path: Path, title: str, labels: Sequence[str], values: Sequence[float], ylabel: str) -> Path:
    """Writes a bar chart PNG (matplotlib, headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(list(labels), list(values), color="#4c72b0")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


if __name__ == "__main__" and sys.argv[1:] == ["echo-server"]:
    asyncio.run(_serve_echo())


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, of its children it has waited for, and of its live
    descendants (tool_svc's CPU pool workers: their work is the service's)."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
    children: dict[int, list[int]] = {}
    for child, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(child)  # fields[1]: the parent's pid
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        found = stats.get(current)
        if found is None:
            continue
        total += sum(int(found[i]) for i in (11, 12, 13, 14))
        todo += children.get(current, [])
    return total / CLK_TCK
