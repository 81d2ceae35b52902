"""Where a task's Redis commands come from: per service, per command, per Lua script (issue 45).

Runs bench_scale's task (or bench_peer's with `--peer`) through the four services on a redis-server
of its own, with Redis MONITOR on while the measured tasks run. Every command MONITOR reports is
charged to the service whose connection sent it (the client port mapped to a process by `ss -tnp`);
a Lua script's own commands (MONITOR's "lua" client, printed right after the EVALSHA that ran them,
Redis being single-threaded) are charged to that EVALSHA's service and named by script (the SHA1 of
each `*_LUA` constant of the services' modules).

Run: `.venv/bin/python -m bench.redis_mix [--tasks 60] [--concurrency 8] [--peer]`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib
import pkgutil
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import ThreadingHTTPServer
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmesh.authenticator import Authenticator
from agentmesh.config import AuthSettings
from agentmesh.dev.localredis import LocalRedis
from bench import bench_peer
from bench.bench_scale import AUTH_KEY, REPO, Mesh, _Upstream, config, run_tasks

_SS_LINE = re.compile(r"127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:(\d+)\s+users:\(\(\"[^\"]*\",pid=(\d+)")


def script_names() -> dict[str, str]:
    """SHA1 -> name of every `*_LUA` string constant in the services' and agentmesh's modules."""
    names: dict[str, str] = {}
    for package in ("agentmesh", "context_svc", "tool_svc", "provider_svc", "dispatcher_svc"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            if info.name.endswith("__main__") or ".cli" in info.name:
                continue  # importing them runs them
            try:
                module = importlib.import_module(info.name)
            except Exception:  # a module that needs what this process lacks: its scripts go unnamed
                continue
            for attr, value in vars(module).items():
                if attr.endswith("_LUA") and isinstance(value, str):
                    names[hashlib.sha1(value.encode()).hexdigest()] = f"{info.name.rsplit('.', 1)[-1]}.{attr}"
    return names


def port_owners(redis_port: int, pids: dict[int, str]) -> dict[int, str]:
    """Client port -> service, for every connection to Redis from one of `pids`."""
    out = subprocess.run(["ss", "-tnp"], capture_output=True, text=True, check=True).stdout
    owners: dict[int, str] = {}
    for local, peer, pid in _SS_LINE.findall(out):
        if int(peer) == redis_port and int(pid) in pids:
            owners[int(local)] = pids[int(pid)]
    return owners


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="redis_mix", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--peer", action="store_true", help="bench_peer's calculator task instead")
    bench_peer.add_no_pack_events(parser, "with --peer")
    args = parser.parse_args(argv)
    shas = script_names()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{server.server_address[1]}"
    lines: list[str] = []
    with LocalRedis() as local, tempfile.TemporaryDirectory(prefix="agentmesh-redis-mix-") as tmp:
        settings = bench_peer.settings(pack_events=args.pack_events) if args.peer else config(upstream)
        mesh = Mesh(1, local.url, Path(tmp), upstream, settings=settings, repo=REPO)
        agent = "peer" if args.peer else "scale"
        try:
            mesh.start()
            asyncio.run(_run(mesh, 8, 4, agent, "warm"))
            port = int(local.url.rsplit(":", 1)[1].split("/", 1)[0])
            stop = threading.Event()

            def monitor() -> None:
                client = redis.Redis.from_url(local.url)
                with client.monitor() as m:  # type: ignore[no-untyped-call]
                    for raw in m.listen():
                        lines.append(f"{raw['client_address']}:{raw['client_port']} {raw['command']}")
                        if stop.is_set():
                            return

            reader = threading.Thread(target=monitor, daemon=True)
            reader.start()
            time.sleep(0.5)
            owners = port_owners(port, {p.pid: label.split("-", 1)[0] for label, p in mesh.processes.items()})
            asyncio.run(_run(mesh, args.tasks, args.concurrency, agent, "mix"))
            owners.update(port_owners(port, {p.pid: label.split("-", 1)[0] for label, p in mesh.processes.items()}))
            stop.set()
            redis.Redis.from_url(local.url).ping()  # one more line so the reader sees the flag
            reader.join(5)
        finally:
            mesh.stop()
    server.shutdown()
    by_service: Counter[str] = Counter()
    by_command: Counter[tuple[str, str]] = Counter()
    current = ("?", "?")
    for line in lines:
        who, _, command = line.partition(" ")
        words = command.split(" ")
        name = words[0].strip('"').lower()
        if who.startswith("lua"):
            service, script = current
            by_service[service] += 1
            by_command[(service, f"  {script}: {name}")] += 1
            continue
        port_text = who.rsplit(":", 1)[-1]
        service = owners.get(int(port_text), "other") if port_text.isdigit() else "other"
        if name in ("evalsha", "eval"):
            sha = words[1].strip('"') if len(words) > 1 else ""
            current = (service, shas.get(sha, sha[:10]) if name == "evalsha" else "eval")
            name = f"evalsha {current[1]}"
        by_service[service] += 1
        by_command[(service, name)] += 1
    n = args.tasks
    which = "bench_peer" if args.peer else "bench_scale"
    print(f"redis_mix: {n} tasks at concurrency {args.concurrency} ({which}'s task)")
    print(f"commands per task: {sum(by_service.values()) / n:.1f} (MONITOR's own last PING included)")
    for service, count in by_service.most_common():
        print(f"{service:>12} {count / n:6.1f}")
        for (s, name), c in sorted(by_command.items(), key=lambda kv: -kv[1]):
            if s == service:
                print(f"{'':>14}{c / n:6.2f}  {name}")
    return 0


async def _run(mesh: Mesh, tasks: int, concurrency: int, agent: str, tag: str) -> None:
    if agent == "scale":
        ok = await run_tasks(mesh.dispatcher_targets(), tasks, concurrency, tag)
        if ok != tasks:
            raise RuntimeError(f"{tasks - ok} of {tasks} tasks did not succeed")
        return
    peer = bench_peer.Agentmesh.__new__(bench_peer.Agentmesh)
    peer.mesh, peer.tag, peer.workdir = mesh, tag, mesh.workdir
    peer.client = redis.Redis.from_url(mesh.redis_url)
    peer.token = Authenticator(AuthSettings(key=AUTH_KEY), "dev").mint(subject="bench", roles=("operator",))
    try:
        await peer.run(tasks, concurrency, tag)
    finally:
        peer.client.close()


if __name__ == "__main__":
    sys.exit(main())
