"""What one task costs each service and Redis, with 1, 2 and 4 dispatchers, and the capacity model
derived from those costs (issue 28; README "Capacity").

The four services run as separate processes on one redis-server (one context_svc, tool_svc and
provider_svc; 1, 2 or 4 dispatcher replicas). A task of agent `scale` takes two steps: its scripted
model calls `lookup` (an HTTP GET tool on a local upstream that answers at once), then answers. The
client runs `--tasks` tasks through RunTask, `--concurrency` at a time, round-robin over the
dispatchers. Measured per configuration, over the tasks only (after a warm-up):
- CPU-seconds per task of each service: user + system time from /proc/<pid>/stat (all replicas of a
  service together), and of Redis's main thread (INFO cpu: what saturates a Redis primary);
- Redis commands per task from INFO commandstats (Lua scripts' own commands counted, as Redis counts
  them), script runs per task, and bytes in and out per task (INFO stats);
- the idle cost of a dispatcher replica: Redis commands per second with no task (its queue polling).

The queue stream `am:tasks` is one key, so one Redis primary whatever the cluster's size: its share
is measured apart, by replaying a task's queue operations (enqueue-and-take, the claim renewals a
task of this length made, the acknowledgement) through `dispatcher_svc.queue`/`worker` on a fresh
redis-server, 1,000 times (the median of three replays).

The capacity model (printed last) takes those per-task costs, not throughput on this machine (two
cores shared by every process here cannot show scaling): N machines of `--cores` cores give the
services N x cores / (service CPU per task) tasks/s; a Redis primary gives 1 / (Redis CPU per task);
K primaries of a cluster share every key but the queue stream, whose primary also carries the whole
queue: K primaries hold lambda tasks/s while lambda x ((R - Q) / K + Q) < 1, so the queue caps the
cluster at 1 / Q tasks/s, where one stream must be split into several (docs/design.md §10).

Run: `.venv/bin/python -m bench.bench_scale [--tasks 120] [--concurrency 24] [--cores 8]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc.aio
import redis
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.supervisor import health_status
from agentmesh.config import AuthSettings, DispatcherSettings, RedisSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.store import Store
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from bench.common import cpu_s, table
from dispatcher_svc.queue import ACK_IF_MINE_LUA, TaskQueue
from dispatcher_svc.tasks import TaskStore
from provider_svc.models.base import Role
from provider_svc.testing.scripted import ScriptedReply, ScriptedRequest, ScriptedToolCall

REPO = Path(__file__).resolve().parents[1]
AUTH_KEY = "bench-scale-key-" + "s" * 32
SERVICES = ("context", "tool", "provider", "dispatcher")
QUEUE_COMMANDS = ("xreadgroup", "xautoclaim", "xpending", "xclaim", "xack", "xdel")
"""Commands only the task queue stream receives (its XADD is one per task; the event streams' are not)."""
D = dispatcher_pb2


def policy(req: ScriptedRequest) -> ScriptedReply:
    """Step 1 looks the goal's item up; step 2 answers with what the tool said."""
    results = [m for m in req.messages if m.role == Role.TOOL]
    if not results:
        return ScriptedReply(tool_calls=(ScriptedToolCall("lookup", json.dumps({"item": req.goal[-12:]})),))
    return ScriptedReply(text=f"FOUND {results[-1].content[:80]}")


class _Upstream(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"stock": 42, "warehouse": "east"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def config(upstream: str) -> dict[str, Any]:
    return {
        "environment": "dev",
        "server": {"drain_delay_s": 0, "grace_period_s": 1},
        "telemetry": {"log_level": "WARNING"},
        "providers": {
            "default_model": "scripted/scale",
            "backends": [
                {
                    "name": "scripted",
                    "type": "scripted",
                    "rate_limit_per_min": None,
                    "concurrency": 256,
                    "models": [{"name": "scale", "policy": "bench.bench_scale:policy"}],
                }
            ],
        },
        "tools": {
            "builtins": ["read_payload"],
            "http_allowlist": [upstream + "/"],
            "rate_limit": {"capacity": 1_000_000, "refill_per_second": 1_000_000},
            "registry": [
                {
                    "name": "lookup",
                    "description": "Use when asked where an item is stocked.",
                    "input_schema": {
                        "type": "object",
                        "properties": {"item": {"type": "string"}},
                        "required": ["item"],
                    },
                    "executor": "http",
                    "method": "GET",
                    "endpoint_url": upstream + "/stock",
                    "timeout_s": 10,
                }
            ],
        },
        "agents": [
            {
                "id": "scale",
                "model": "scripted/scale",
                "tools": ["lookup"],
                "permissions": ["*:*:read"],
                "max_steps": 4,
                "token_budget": 50_000,
            }
        ],
        "dispatcher": {"max_concurrent_tasks": 256, "call_timeout_s": 30},
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Mesh:
    """The services as processes on one Redis (module docstring)."""

    dispatchers: int
    redis_url: str
    workdir: Path
    upstream: str
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    settings: dict[str, Any] | None = None
    """The configuration; None: this bench's (config(upstream))."""
    repo: Path = REPO
    """The checkout whose services run (bench_peer runs a baseline checkout beside this one)."""
    tag: str = ""

    def start(self) -> None:
        cfg = self.workdir / f"agentmesh-scale-{self.tag}{self.dispatchers}.yaml"
        settings = self.settings if self.settings is not None else config(self.upstream)
        cfg.write_text(yaml.safe_dump(settings, sort_keys=False))
        labels = ["context", "tool", "provider", *(f"dispatcher-{i}" for i in range(1, self.dispatchers + 1))]
        self.ports = {label: free_port() for label in labels}
        # Free HTTP listener ports too: the defaults (50061-50064) may be taken by another mesh on this machine.
        http = {label: free_port() for label in labels}
        services = {
            s: {"host": "127.0.0.1", "port": self.ports[s], "http_port": http[s]}
            for s in ("context", "tool", "provider")
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "OTEL_"))}
        env.update(
            {
                "AGENTMESH_AUTH_KEY": AUTH_KEY,
                "AGENTMESH_CONFIG": str(cfg),
                "AGENTMESH_REDIS_URL": self.redis_url,
                "AGENTMESH_TELEMETRY_SPAN_FILE": str(self.workdir / "spans.jsonl"),
                "PYTHONPATH": str(self.repo),
            }
        )
        for label in labels:
            service = label.split("-", 1)[0]
            mine = {**services, service: {"host": "127.0.0.1", "port": self.ports[label], "http_port": http[label]}}
            log = (self.workdir / f"{self.tag}{label}-{self.dispatchers}.log").open("wb")
            self.processes[label] = subprocess.Popen(
                [sys.executable, "-m", f"{service}_svc"],
                env={**env, "AGENTMESH_SERVICES": json.dumps(mine)},
                cwd=self.repo,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        for label in labels:
            deadline = time.monotonic() + 120
            while health_status(f"127.0.0.1:{self.ports[label]}", timeout_s=1.0) != "SERVING":
                if self.processes[label].poll() is not None or time.monotonic() > deadline:
                    self.stop()  # the others too: left running they would skew every later measurement
                    raise RuntimeError(f"{label} did not start; see {self.workdir}")
                time.sleep(0.1)

    def cpu(self) -> dict[str, float]:
        used = dict.fromkeys(SERVICES, 0.0)
        for label, process in self.processes.items():
            used[label.split("-", 1)[0]] += cpu_s(process.pid)
        return used

    def dispatcher_targets(self) -> list[str]:
        return [f"127.0.0.1:{p}" for label, p in self.ports.items() if label.startswith("dispatcher")]

    def stop(self) -> None:
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()


@dataclass
class RedisSnapshot:
    commands: Counter[str]
    usec: Counter[str]
    cpu_main_s: float
    bytes_in: int
    bytes_out: int

    @staticmethod
    def take(client: redis.Redis) -> RedisSnapshot:
        stats: Any = client.info("commandstats")
        cpu: Any = client.info("cpu")
        net: Any = client.info("stats")
        commands: Counter[str] = Counter()
        usec: Counter[str] = Counter()
        for name, values in stats.items():
            command = name.removeprefix("cmdstat_")
            commands[command] = int(values["calls"])
            usec[command] = int(values["usec"])
        return RedisSnapshot(
            commands,
            usec,
            float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"]),
            int(net["total_net_input_bytes"]),
            int(net["total_net_output_bytes"]),
        )

    def minus(self, before: RedisSnapshot) -> RedisSnapshot:
        return RedisSnapshot(
            self.commands - before.commands,
            self.usec - before.usec,
            self.cpu_main_s - before.cpu_main_s,
            self.bytes_in - before.bytes_in,
            self.bytes_out - before.bytes_out,
        )


@dataclass
class Measured:
    dispatchers: int
    tasks: int
    wall_s: float
    cpu: dict[str, float]
    redis: RedisSnapshot
    idle_commands_per_s: float
    """Redis commands per second per dispatcher replica with no task."""

    def per_task(self, value: float) -> float:
        return value / self.tasks

    @property
    def commands(self) -> int:
        return sum(self.redis.commands.values())

    @property
    def queue_commands(self) -> int:
        return sum(self.redis.commands[c] for c in QUEUE_COMMANDS) + self.tasks  # + each task's XADD


async def run_tasks(targets: list[str], tasks: int, concurrency: int, tag: str) -> int:
    """Runs `tasks` tasks through RunTask, round-robin over `targets`; how many SUCCEEDED."""
    token = Authenticator(AuthSettings(key=AUTH_KEY), "dev").mint(subject="bench", roles=("operator",))
    channels = [grpc.aio.insecure_channel(t) for t in targets]
    stubs = [dispatcher_pb2_grpc.DispatcherServiceStub(c) for c in channels]  # type: ignore[no-untyped-call]
    limit = asyncio.Semaphore(concurrency)
    ok = 0

    async def one(i: int) -> None:
        nonlocal ok
        async with limit:
            start = D.StartTaskRequest(agent_id="scale", goal=f"where is item {tag}-{i:06d}")
            call = stubs[i % len(stubs)].RunTask(
                D.RunTaskRequest(start=start), metadata=((IDENTITY_HEADER, token),), timeout=120
            )
            last = None
            async for reply in call:
                last = reply.event
            ok += last is not None and last.status == D.TASK_STATUS_SUCCEEDED

    try:
        await asyncio.gather(*(one(i) for i in range(tasks)))
    finally:
        for channel in channels:
            await channel.close(None)
    return ok


def measure(dispatchers: int, tasks: int, concurrency: int, upstream: str, workdir: Path) -> Measured:
    with LocalRedis() as server:
        client = redis.Redis.from_url(server.url)
        mesh = Mesh(dispatchers, server.url, workdir, upstream)
        try:
            mesh.start()
            warm = asyncio.run(run_tasks(mesh.dispatcher_targets(), 4 * dispatchers, concurrency, "warm"))
            if warm != 4 * dispatchers:
                raise RuntimeError(f"warm-up: {warm} of {4 * dispatchers} tasks succeeded; see {workdir}")
            idle_before = RedisSnapshot.take(client)
            time.sleep(3.0)
            idle = RedisSnapshot.take(client).minus(idle_before)
            idle_rate = (sum(idle.commands.values()) - 3) / 3.0 / dispatchers  # less our own 3 INFO
            cpu_before, redis_before = mesh.cpu(), RedisSnapshot.take(client)
            began = time.monotonic()
            ok = asyncio.run(run_tasks(mesh.dispatcher_targets(), tasks, concurrency, f"d{dispatchers}"))
            wall = time.monotonic() - began
            cpu_after, redis_after = mesh.cpu(), RedisSnapshot.take(client)
            if ok != tasks:
                raise RuntimeError(f"{tasks - ok} of {tasks} tasks did not succeed; see {workdir}")
        finally:
            mesh.stop()
            client.close()
    cpu = {s: cpu_after[s] - cpu_before[s] for s in SERVICES}
    return Measured(dispatchers, tasks, wall, cpu, redis_after.minus(redis_before), idle_rate)


async def queue_cost(tasks: int, renewals_per_task: float) -> float:
    """Redis main-thread CPU-seconds per task of the queue stream alone: each task enqueued and taken
    in one step, its claim renewed `renewals_per_task` times, then acknowledged (dispatcher_svc)."""
    with LocalRedis() as server:
        store = await Store.connect(RedisSettings(url=server.url), "dev")
        client = redis.Redis.from_url(server.url)
        try:
            queue = TaskQueue(store, "dispatchers", "bench-1")
            await queue.ensure_group()
            ack = store.script("dispatcher_ack_if_mine", ACK_IF_MINE_LUA)
            TaskStore(store, DispatcherSettings())  # registers the scripts the way a dispatcher does
            before = RedisSnapshot.take(client)
            owed = 0.0
            for i in range(tasks):
                reply = await queue.enqueue_script(keys=[queue.key], args=[f"t{i}", queue.group, queue.consumer])
                msg_id = reply[0].decode()
                owed += renewals_per_task
                while owed >= 1:
                    await queue.touch(msg_id)
                    owed -= 1
                await ack(keys=[queue.key], args=[queue.group, queue.consumer, msg_id])
            spent = RedisSnapshot.take(client).minus(before)
        finally:
            client.close()
            await store.close()
    return spent.cpu_main_s / tasks


def capacity(rows: list[Measured], queue_s: float, cores: int) -> str:
    """The model of the module docstring, from the per-task costs of the 1-dispatcher run."""
    base = rows[0]
    service_s = sum(base.per_task(v) for v in base.cpu.values())
    redis_s = base.per_task(base.redis.cpu_main_s)
    share = {s: base.per_task(v) / service_s for s, v in base.cpu.items()}
    lines = [
        "capacity model (per-task costs of the 1-dispatcher run; not throughput on this machine):",
        f"  services: {service_s * 1000:.1f} CPU-ms per task "
        f"({', '.join(f'{s} {share[s]:.0%}' for s in SERVICES)});"
        f" a {cores}-core machine runs {cores / service_s:.0f} tasks/s",
        f"  Redis: {redis_s * 1000:.2f} ms of a primary's main thread per task -> one primary "
        f"{1 / redis_s:.0f} tasks/s; the queue stream alone {queue_s * 1000:.3f} ms -> its primary caps a "
        f"cluster at {1 / queue_s:.0f} tasks/s",
        "",
    ]
    header = ["machines", "cores", "services tasks/s", "primaries needed", "first to saturate"]
    body = []
    for machines in (1, 2, 4, 8, 16, 32, 64):
        services_cap = machines * cores / service_s
        needed = "-"
        limit = "services"
        if services_cap * queue_s >= 1:
            needed = "queue stream sharded"
            limit = f"queue stream at {1 / queue_s:.0f} tasks/s"
        else:
            # smallest K with lambda x ((R - Q) / K + Q) < 1 at lambda = services_cap
            k = 1
            while services_cap * ((redis_s - queue_s) / k + queue_s) >= 1:
                k += 1
            needed = str(k)
            if k > 1:
                limit = f"services (Redis needs {k} primaries)"
        body.append([str(machines), str(machines * cores), f"{services_cap:.0f}", needed, limit])
    return "\n".join([*lines, table(header, body)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=120)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--dispatchers", default="1,2,4", help="comma-separated replica counts")
    parser.add_argument("--cores", type=int, default=8, help="cores per machine in the capacity model")
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{server.server_address[1]}"
    rows: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="agentmesh-bench-scale-") as tmp:
        for count in (int(c) for c in args.dispatchers.split(",")):
            rows.append(measure(count, args.tasks, args.concurrency, upstream, Path(tmp)))
    server.shutdown()
    renewals = rows[0].redis.commands["xclaim"] / rows[0].tasks
    # A small figure on a shared machine: the median of three replays of 1,000 tasks each.
    queue_s = sorted(asyncio.run(queue_cost(1000, renewals)) for _ in range(3))[1]

    print(f"bench_scale: {args.tasks} tasks per run at concurrency {args.concurrency}; this machine: "
          f"{os.cpu_count()} cores (every process shares them: compare costs, not throughput)")  # fmt: skip
    print(
        "per task: CPU ms of each service (all its replicas), of Redis's main thread; Redis commands (Lua\n"
        "scripts' own included), script runs, queue-stream commands, KiB into and out of Redis; and Redis\n"
        "commands per second of one idle dispatcher replica (its queue polling)"
    )
    header = [
        "dispatchers",
        "tasks/s",
        *(f"{s} ms" for s in SERVICES),
        "Redis ms",
        "cmds",
        "scripts",
        "queue cmds",
        "KiB in",
        "KiB out",
        "idle cmds/s",
    ]
    body = []
    for m in rows:
        body.append(
            [
                str(m.dispatchers),
                f"{m.tasks / m.wall_s:.1f}",
                *(f"{m.per_task(m.cpu[s]) * 1000:.1f}" for s in SERVICES),
                f"{m.per_task(m.redis.cpu_main_s) * 1000:.2f}",
                f"{m.per_task(m.commands):.1f}",
                f"{m.per_task(m.redis.commands['evalsha']):.1f}",
                f"{m.per_task(m.queue_commands):.1f}",
                f"{m.per_task(m.redis.bytes_in) / 1024:.1f}",
                f"{m.per_task(m.redis.bytes_out) / 1024:.1f}",
                f"{m.idle_commands_per_s:.1f}",
            ]
        )
    print(table(header, body))
    top = rows[0].redis.commands.most_common(12)
    print("Redis commands per task (1 dispatcher): " + ", ".join(f"{c} {n / rows[0].tasks:.1f}" for c, n in top))
    print(
        f"queue stream alone (3 replays of 1,000 tasks, median; {renewals:.2f} claim renewals per task): "
        f"{queue_s * 1000:.3f} Redis CPU ms/task"
    )
    print()
    print(capacity(rows, queue_s, args.cores))
    return 0


if __name__ == "__main__":
    sys.exit(main())
