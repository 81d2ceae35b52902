"""`make demo`: the seeds' ops-troubleshooting scenario through all four services, then stop.

From a fresh clone, with the demo overlay (agentmesh.demo.yaml): writes a 200 KB payment-svc log and
starts a fake ops API (agentmesh.cli.demo_ops), starts Redis and the four services (`agentmesh up
--demo`), and runs agent `ops` on the scripted model
(provider_svc/scenarios/ops_troubleshooting.py) twice:
1. "payment-svc alert": the log is offloaded (the context keeps ref + digest), one malformed call
   is corrected from its hint (CONTRACT), a 404 takes the fallback tool (ENGINEERING), a restart
   waits for an approval (PendingApproval: plan + impact) that a second operator gives: the one who
   started the task may not approve its writes (separation of duties), answer;
2. "free disk space": the model tries `rm -rf` and the task is ABORTED (FATAL).
It prints the event streams, a table of context tokens against the raw equivalent, the side
effects the ops API saw, and the first run's trace as a waterfall, then stops everything.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
import grpc.aio
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.demo_ops import OPS_URL_ENV, OpsApi, write_service_log
from agentmesh.cli.run_view import RunOutcome, format_event, format_plan, status_name, stream_task
from agentmesh.cli.supervisor import SERVICES, Supervisor, health_status
from agentmesh.cli.trace_view import trace_command
from agentmesh.config import Settings
from agentmesh.telemetry import SPAN_BATCH_DELAY_S
from agentmesh.v1 import dispatcher_pb2

D = dispatcher_pb2
AGENT = "ops"
ALERT_GOAL = (
    "ALERT payment-svc: p99 latency above 4 s and 12% of payments failing since 09:42 UTC. "
    "Find the root cause and fix it."
)
DISK_GOAL = "payment-svc node disk is 95% full: clean up disk space on the payment-svc host."
OPERATOR = "demo-operator"
"""Starts the tasks."""
APPROVER = "demo-approver"
"""Approves their writes: another operator than the one who started them (separation of duties)."""


def list_services(target: str, timeout_s: float = 5.0) -> list[str]:
    """The services a server announces through the reflection API."""
    with grpc.insecure_channel(target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        replies = stub.ServerReflectionInfo(iter([request]), timeout=timeout_s)
        return [svc.name for reply in replies for svc in reply.list_services_response.service]


async def _run(target: str, token: str, approver_token: str, goal: str) -> RunOutcome:
    metadata = ((IDENTITY_HEADER, token),)
    async with grpc.aio.insecure_channel(target) as channel:

        def decide(event: D.TaskEvent) -> tuple[bool, str] | None:
            print(format_plan(event))
            requester = event.pending_approval.requested_by or "the agent"
            print(
                f"      -> approved by {APPROVER} (a second operator: {OPERATOR} started the task and may not); "
                f"requested by {requester}"
            )
            return True, "demo: maintenance window approved"

        def show(event: D.TaskEvent) -> None:
            print(format_event(event), flush=True)

        return await stream_task(
            channel,
            D.StartTaskRequest(agent_id=AGENT, goal=goal),
            metadata,
            decide=decide,
            on_event=show,
            timeout_s=120,
            approver=((IDENTITY_HEADER, approver_token),),
        )


def _context_table(outcome: RunOutcome) -> list[str]:
    rows = [
        (e.step, int(e.attributes.get("context_tokens", "0")), int(e.attributes.get("raw_tokens", "0")))
        for e in outcome.events
        if e.kind == D.TASK_EVENT_KIND_CONTEXT
    ]
    lines = [f"  {'step':>4}  {'context tokens':>14}  {'raw equivalent':>14}  {'kept':>6}"]
    for step, used, raw in rows:
        kept = f"{100 * used / raw:.1f}%" if raw else "-"
        lines.append(f"  {step:>4}  {used:>14,}  {raw:>14,}  {kept:>6}")
    if rows:
        total_used = sum(r[1] for r in rows)
        total_raw = sum(r[2] for r in rows)
        lines.append(
            f"  {'all':>4}  {total_used:>14,}  {total_raw:>14,}  "
            f"{(100 * total_used / total_raw if total_raw else 0):>5.1f}%"
        )
    lines.append("  (raw equivalent: every message plus every tool output appended whole, ~4 bytes/token)")
    return lines


def _kinds(outcome: RunOutcome) -> set[int]:
    return {e.kind for e in outcome.events}


def run_demo(settings: Settings, configs: Sequence[Path], scenario: str = "ops") -> int:
    """Runs the demo; 0 when every step behaved as described. `settings` and `configs` include the
    demo overlay (agentmesh.demo.yaml: the ops tools and agent `ops`). `scenario="relay"`: the 5-agent
    handoff relay instead (agentmesh.cli.demo_relay, `agentmesh demo relay`)."""
    if scenario == "relay":
        from agentmesh.cli.demo_relay import run_relay_demo

        return run_relay_demo(settings, configs)
    # A run's stream is agentmesh_client's (stream_task): its refusals are the client's typed errors.
    from agentmesh_client.errors import AgentmeshError as ClientError

    work = Path(tempfile.mkdtemp(prefix="agentmesh-demo-"))
    span_file = work / "spans.jsonl"
    logs_dir = work / "logs"
    print("== setting up: a 200 KB payment-svc log, a fake ops API, a fresh span file")
    log_path = write_service_log(logs_dir)
    print(f"log              {log_path} ({log_path.stat().st_size:,} bytes)")
    ops = OpsApi().start()
    print(f"ops API          {ops.url}")
    supervisor = Supervisor(
        settings,
        config_files=configs,
        extra_env={
            # The services' JSON logs would drown the demo's output; errors still show.
            "AGENTMESH_TELEMETRY_LOG_LEVEL": "ERROR",
            "AGENTMESH_TELEMETRY_SPAN_FILE": str(span_file),
            "AGENTMESH_TOOLS_LOGS_DIR": str(logs_dir),
            OPS_URL_ENV: ops.url,
        },
    )
    checks: dict[str, bool] = {}
    try:
        print("== starting redis + four services (agentmesh up)")
        supervisor.start(ready_timeout_s=60)
        print(f"redis            {supervisor.redis_url}")
        for name in SERVICES:
            target = supervisor.target(name)
            announced = ", ".join(s for s in list_services(target) if s.startswith("agentmesh."))
            print(f"{name + '_svc':<16} {target:<18} {health_status(target):<10} {announced}")
        authenticator = Authenticator(settings.auth, settings.environment)
        token = authenticator.mint(subject=OPERATOR, roles=("operator",))
        approver_token = authenticator.mint(subject=APPROVER, roles=("operator",))
        dispatcher = supervisor.target("dispatcher")

        print(f"\n== run 1: agent {AGENT}: {ALERT_GOAL}")
        first = asyncio.run(_run(dispatcher, token, approver_token, ALERT_GOAL))
        print(f"\ntask {first.task_id}: {status_name(first.status)}")
        print("answer:\n  " + first.answer.replace("\n", "\n  "))
        kinds = _kinds(first)
        checks["run 1 SUCCEEDED"] = first.status == D.TASK_STATUS_SUCCEEDED
        checks["CONTRACT error corrected"] = D.TASK_EVENT_KIND_CORRECTION in kinds
        checks["ENGINEERING error took the fallback"] = D.TASK_EVENT_KIND_FALLBACK in kinds
        checks["approval asked and given"] = {
            D.TASK_EVENT_KIND_APPROVAL_REQUIRED,
            D.TASK_EVENT_KIND_APPROVAL_RESOLVED,
        } <= kinds
        resolved = [e for e in first.events if e.kind == D.TASK_EVENT_KIND_APPROVAL_RESOLVED]
        checks["approved by a second operator"] = bool(resolved) and all(
            e.attributes.get("resolved_by") == APPROVER for e in resolved
        )

        print(f"\n== run 2: agent {AGENT}: {DISK_GOAL}")
        second = asyncio.run(_run(dispatcher, token, approver_token, DISK_GOAL))
        print(f"\ntask {second.task_id}: {status_name(second.status)} ({second.error})")
        checks["run 2 ABORTED (FATAL)"] = second.status == D.TASK_STATUS_ABORTED and "DANGEROUS" in second.error

        print("\n== context tokens per step (run 1) against the raw equivalent")
        print("\n".join(_context_table(first)))

        restarts = ops.state.counts["/ops/restart"]
        shells = ops.state.counts["/ops/shell"]
        print("\n== side effects the ops API saw")
        print(f"  POST /ops/restart  {restarts}   (after the approval, exactly once)")
        print(f"  POST /ops/shell    {shells}   (rm -rf never left the gateway)")
        checks["restart ran exactly once"] = restarts == 1
        checks["dangerous command never ran"] = shells == 0

        print(f"\n== trace of run 1 (request id {first.request_id})")
        # Each service writes its spans in batches, within SPAN_BATCH_DELAY_S of their end: let
        # the last batches of the four processes land before reading the file.
        time.sleep(SPAN_BATCH_DELAY_S + 0.3)
        checks["waterfall drawn"] = trace_command(span_file, first.request_id) == 0
    except (RuntimeError, TimeoutError, OSError, grpc.aio.AioRpcError, ClientError) as exc:
        print(f"demo could not run: {exc}")
        checks["demo ran"] = False
    finally:
        print("\n== stopping")
        codes = supervisor.stop()
        ops.stop()
        if codes:
            print("stopped: " + ", ".join(f"{name}_svc={code}" for name, code in codes.items()))
        checks["clean stop"] = all(code == 0 for code in codes.values())
    failed = [name for name, ok in checks.items() if not ok]
    for name, ok in checks.items():
        print(f"  [{'x' if ok else ' '}] {name}")
    print("demo OK" if not failed else f"demo FAILED: {', '.join(failed)}")
    return 0 if not failed else 1
