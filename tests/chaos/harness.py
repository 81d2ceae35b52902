"""The chaos harness of issue 18, as a library: `run_chaos(...) -> ChaosReport`.

A run: Redis (AOF, fsync always) and the four services as separate processes (`mesh.ChaosMesh`),
three counting HTTP upstreams in threads of the harness (`upstreams.Upstreams`), and an agent whose
scripted model (`policy.py`) makes 2-4 side-effecting calls per task with a fresh random nonce each.

Each round shuffles (with `random.Random(seed)`) `tasks_per_round` task starts, `kills` kill -9 of a
random target (dispatcher, tool_svc, context_svc, provider_svc, Redis; a random replica when there
are two) and `pauses` SIGSTOPs of a random service, with random gaps between them. A killed target
is restarted after a random 0.2-2 s (Redis on the same port and data dir); a stopped one gets SIGCONT
after a random 0.2-3 s. Disruptions come one at a time; tasks run throughout. Each task is driven by
`driver.Driver` (followed live, settled truthfully, approved, resumed after a resumable failure).
A round ends when its tasks are terminal (at most `drain_timeout_s`).

With `rolling` (issue 28) the disruptions are not random: each service's first replica (with two of
each: one replica of each) is killed with -9 and restarted once, in a shuffled order, spread over the
round's task starts, while the other replica keeps serving; with `cluster`, one primary of the Redis
Cluster too (its replica takes over, the killed node rejoins as a replica).

After the last round the mesh is made healthy (every replica running and ready), every task gets up
to `final_timeout_s` to end, then the invariants of `checks.py` are checked. The services' logs, the
spans, the Redis AOF, every upstream request (`upstream-requests.jsonl`) and the table (`report.txt`)
stay in the work directory.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc.aio

from agentmesh.store import Keys
from tests.chaos import checks
from tests.chaos.checks import Final
from tests.chaos.driver import TERMINAL, Client, Driver, TaskRun, read_log, status_name
from tests.chaos.mesh import ChaosMesh, Timings, optional_keys
from tests.chaos.policy import TOOLS, plan_text
from tests.chaos.report import SERVICES, TARGETS, Action, ChaosReport
from tests.chaos.upstreams import Upstreams
from tests.rediscluster import sync_client

__all__ = ["ChaosReport", "Timings", "run_chaos"]


def make_plan(rng: random.Random) -> list[list[str]]:
    """2-4 calls over the three tools; a call joins the previous one's reply with probability 0.3."""
    steps: list[list[str]] = []
    for i in range(rng.randint(2, 4)):
        tool = rng.choice(TOOLS)
        if i and rng.random() < 0.3:
            steps[-1].append(tool)
        else:
            steps.append([tool])
    return steps


class Chaos:
    """The disruptions of one run, one at a time."""

    def __init__(self, mesh: ChaosMesh, rng: random.Random, report: ChaosReport) -> None:
        self.mesh = mesh
        self.rng = rng
        self.report = report

    def _label(self, service: str) -> str:
        if service == "redis":
            return self.rng.choice(self.mesh.redis_labels())
        return self.rng.choice(self.mesh.labels(service))

    def rolling_targets(self) -> list[tuple[str, str]]:
        """(service, label) of one replica of each service (the first), and of one Redis primary on a
        cluster; shuffled."""
        targets = [(service, self.mesh.labels(service)[0]) for service in SERVICES]
        if self.mesh.redis_cluster is not None:
            targets.append(("redis", f"redis:{self.mesh.redis_cluster.primaries()[0]}"))
        self.rng.shuffle(targets)
        return targets

    async def kill(self, round_: int, target: tuple[str, str] | None = None) -> Action:
        if target is not None:
            service, label = target
        else:
            service = self.rng.choice(TARGETS)
            label = self._label(service)
        down_s = self.rng.uniform(0.2, 2.0)
        if label.startswith("redis:") and target is not None:
            # A primary killed to fail over: down past the cluster's node timeout, so its replica takes over.
            down_s = 6.0
        action = Action(round_, "kill -9", service, label, time.time())
        self.report.actions.append(action)
        await asyncio.to_thread(self.mesh.kill9, label)
        await asyncio.sleep(down_s)
        try:
            await asyncio.to_thread(self.mesh.restart, label)
        except (RuntimeError, TimeoutError) as exc:
            action.error = str(exc)[:300]
            self.report.notes.append(f"restart of {label} failed: {action.error}")
            return action
        action.back_s = time.time()
        return action

    async def pause(self, round_: int) -> Action:
        service = self.rng.choice(SERVICES)
        label = self._label(service)
        stopped_s = self.rng.uniform(0.2, 3.0)
        action = Action(round_, "SIGSTOP", service, label, time.time())
        self.report.actions.append(action)
        self.mesh.pause(label, signal.SIGSTOP)
        try:
            await asyncio.sleep(stopped_s)
        finally:
            self.mesh.pause(label, signal.SIGCONT)
        action.back_s = time.time()
        return action


async def _wait(tasks: list[asyncio.Task[None]], timeout_s: float) -> None:
    pending = [t for t in tasks if not t.done()]
    if pending:
        await asyncio.wait(pending, timeout=timeout_s)


def read_sessions(url: str, task_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each task's session log, straight from Redis (context_svc/sessions.py: `am:sess:{s}:log`)."""
    keys = Keys()
    client = sync_client(url, socket_timeout=10)
    try:
        found = {}
        for task_id in task_ids:
            raw: list[bytes] = client.lrange(keys.session(task_id, "log"), 0, -1)
            found[task_id] = [json.loads(item) for item in raw]
        return found
    finally:
        client.close()


def read_owners(url: str, task_ids: list[str]) -> Counter[str]:
    """How many of the tasks each dispatcher replica ran last (the task hash's `owner`, its consumer
    name: `<host>-<pid>`)."""
    keys = Keys()
    client = sync_client(url, socket_timeout=10)
    try:
        owners: Counter[str] = Counter()
        for task_id in task_ids:
            owner = client.hget(keys.task(task_id), "owner")
            owners[owner.decode() if owner else "(none)"] += 1
        return owners
    finally:
        client.close()


async def collect(client: Client, run: TaskRun) -> Final:
    final = Final(run)
    try:
        final.task = await client.get_task(run.task_id, within_s=20)
        final.zero, final.zero_end = await read_log(client, run.task_id, passes=1)
        complete = final.zero and final.zero[-1].sequence >= final.task.last_sequence
        final.full = final.zero if complete else (await read_log(client, run.task_id, passes=10))[0]
    except grpc.aio.AioRpcError as exc:
        final.error = f"{exc.code().name}: {exc.details()}"
    return final


async def run_chaos(
    seed: int = 0,
    rounds: int = 1,
    tasks_per_round: int = 8,
    kills: int = 3,
    pauses: int | None = None,
    *,
    dispatchers: int = 1,
    tools: int = 1,
    contexts: int = 1,
    providers: int = 1,
    cluster: bool = False,
    rolling: bool = False,
    timings: Timings | None = None,
    slow_max_s: float = 2.0,
    gap_s: tuple[float, float] = (0.1, 1.0),
    max_resumes: int = 5,
    drain_timeout_s: float = 60.0,
    final_timeout_s: float = 120.0,
    workdir: Path | None = None,
    keep_workdir: bool = True,
    progress: Callable[[str], None] | None = None,
) -> ChaosReport:
    """Runs the chaos rounds and checks the invariants (see the module docstring).

    `kills`: kill -9 per round; `pauses`: SIGSTOP per round (default kills // 3); `dispatchers`,
    `tools`, `contexts`, `providers`: replicas (1 or 2); `cluster`: a Redis Cluster; `rolling`: instead
    of `kills` and `pauses`, one kill -9 of one replica of each service (and of a Redis primary on a
    cluster) per round; `slow_max_s`: the upstreams answer after a random 0..slow_max_s;
    `gap_s`: the random pause between two scheduled starts or disruptions.
    """
    pauses = kills // 3 if pauses is None else pauses
    rng = random.Random(seed)
    say = progress or (lambda line: None)
    own_dir = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix=f"agentmesh-chaos-{seed}-")) if workdir is None else workdir
    if rolling:
        kills, pauses = 0, 0
    report = ChaosReport(
        seed, rounds, tasks_per_round, kills, pauses, dispatchers, tools, sorted(optional_keys()), workdir=str(workdir)
    )
    report.contexts, report.providers, report.cluster, report.rolling = contexts, providers, cluster, rolling
    report.max_resumes = max_resumes
    started = time.monotonic()
    upstreams = Upstreams(seed, slow_max_s).serve()
    mesh = ChaosMesh(workdir, upstreams.url, timings or Timings(), dispatchers, tools, contexts, providers, cluster)
    client: Client | None = None
    runs: list[TaskRun] = []
    drivers: list[asyncio.Task[None]] = []
    try:
        say(f"starting Redis and {len(mesh.replicas)} service processes in {workdir}")
        await asyncio.to_thread(mesh.start_all)
        client = Client(mesh.dispatcher_targets())
        driver = Driver(client, upstreams, max_resumes)
        chaos = Chaos(mesh, rng, report)
        for round_ in range(1, rounds + 1):
            schedule = ["task"] * tasks_per_round + ["kill"] * kills + ["pause"] * pauses
            rng.shuffle(schedule)
            rolling_targets = chaos.rolling_targets() if rolling else []
            if rolling:  # one each, spread evenly over the round's task starts (after the first tenth)
                step = max(1, tasks_per_round // (len(rolling_targets) + 1))
                for i in reversed(range(len(rolling_targets))):
                    schedule.insert(min(len(schedule), (i + 1) * step), "rolling")
            if "task" in schedule:
                schedule.insert(0, schedule.pop(schedule.index("task")))  # something to disrupt
            mine: list[asyncio.Task[None]] = []
            for item in schedule:
                await asyncio.sleep(rng.uniform(*gap_s))
                if item == "rolling":
                    await chaos.kill(round_, rolling_targets.pop(0))
                elif item == "task":
                    plan = make_plan(rng)
                    task_id = f"chaos-{seed}-{round_}-{len(runs) + 1}"
                    run = TaskRun(task_id, f"chaos task {task_id}: record the effects, {plan_text(plan)}", plan)
                    runs.append(run)
                    mine.append(asyncio.create_task(driver.drive(run), name=task_id))
                elif item == "kill":
                    await chaos.kill(round_)
                else:
                    await chaos.pause(round_)
            drivers.extend(mine)
            await _wait(mine, drain_timeout_s)
            done = sum(1 for t in mine if t.done())
            say(
                f"round {round_}/{rounds}: {len(mine)} tasks ({done} ended), "
                f"{len(report.actions)} disruptions so far, {time.monotonic() - started:.0f} s"
            )
        say("chaos stopped; waiting for a healthy mesh and every task to end")
        await asyncio.to_thread(mesh.wait_ready)
        await _wait(drivers, final_timeout_s)
        for task in drivers:
            task.cancel()
        await asyncio.gather(*drivers, return_exceptions=True)
        report.wall_s = time.monotonic() - started
        await _check(report, client, mesh, upstreams, runs)
        (workdir / "report.txt").write_text(report.table() + "\n")
    finally:
        for task in drivers:
            task.cancel()
        if client is not None:
            await client.close()
        await asyncio.to_thread(mesh.stop_all)
        upstreams.close()
        if own_dir and not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return report


async def _check(
    report: ChaosReport, client: Client, mesh: ChaosMesh, upstreams: Upstreams, runs: list[TaskRun]
) -> None:
    limit = asyncio.Semaphore(8)

    async def one(run: TaskRun) -> Final:
        async with limit:
            return await collect(client, run)

    finals = list(await asyncio.gather(*(one(r) for r in runs)))
    sessions = await asyncio.to_thread(read_sessions, mesh.redis_url, [r.task_id for r in runs])
    owners = await asyncio.to_thread(read_owners, mesh.redis_url, [r.task_id for r in runs])
    # A consumer is named <host>-<pid>-<random> (dispatcher_svc/service.py): shown as its replica.
    labels = {str(p.pid): label.split(".", 1)[0] for label, p in mesh.mesh.processes.items()}
    for owner, count in owners.items():
        parts = owner.rsplit("-", 2)
        report.owners[labels.get(parts[1], owner) if len(parts) == 3 else owner] += count
    for final in finals:
        final.session = sessions.get(final.task_id, [])
        report.statuses[status_name(final.status) if final.task is not None else "NOT FOUND"] += 1
        if final.status == checks.D.TASK_STATUS_SUCCEEDED and final.task is not None:
            report.answers[final.task.answer.split(":", 1)[0][:20] or "(empty)"] += 1
        report.resumes.update(final.run.resumes)
        times = [e.time.ToMilliseconds() for e in final.full if e.HasField("time")]
        if times and final.status in TERMINAL:
            report.durations_s.append((max(times) - min(times)) / 1000)
        for event in final.full:
            if event.kind == checks.D.TASK_EVENT_KIND_STATUS and ", retrying in " in event.message:
                report.outage_waits[event.message.split(" ", 1)[0]] += 1
        report.approvals += len(final.run.approvals)
        for settlement in final.run.settlements:
            report.settlements[settlement.outcome if settlement.resolved else "unresolved"] += 1
        report.notes.extend(f"{final.task_id}: {note}" for note in final.run.notes)
    report.requests.update(upstreams.counts())
    with (Path(report.workdir) / "upstream-requests.jsonl").open("w") as out:
        for r in upstreams.requests:
            out.write(json.dumps({"path": r.path, "method": r.method, "nonce": r.nonce, "key": r.idempotency_key,
                                  "time": r.time_s}) + "\n")  # fmt: skip
    report.invariants["lost"] = checks.check_lost(finals)
    report.invariants["twice"] = checks.check_twice(finals, upstreams)
    report.invariants["events"] = checks.check_events(finals)
    report.invariants["appends"] = checks.check_appends(finals)
    report.invariants["outcomes"] = checks.check_outcomes(finals, upstreams)
    report.recovery_s, report.stall_s, report.unmeasured = checks.recovery(report.actions, finals)
