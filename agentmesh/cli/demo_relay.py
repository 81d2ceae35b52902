"""`agentmesh demo relay`: a 5-agent ops relay over handoffs (issue 44) on the scripted model, then stop.

The alert goes triage (reads the service's log with query_logs) -> log analyst -> remediation -> reporter
-> a carrier of the capability `closing` (verifier or closer, picked by capability routing). The log
analyst's transfers are checked by a verifier agent first (`verify_with: relay_checker`): its first brief
states a root cause cited to a message that does not hold it, the verifier (re-reading the hop's record
with read_payload) rejects it, and the analyst hands over again without it. Each agent
hands over with `transfer_to_<next>`; context_svc builds each hop summary (BuildHandoff: the user's
constraints verbatim, every confirmed fact's citation re-read, capped). The demo prints each hop summary
with its confirmed and inferred facts and their citations, and the tokens it carried against the
transcript it replaced (the handing agent's context with every message and tool output whole). The
agents, their scripted models (provider_svc/scenarios/relay.py) and the service log are written to a
temporary overlay; it needs no demo overlay of its own. Not yet here: an approval in the remediation hop.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import yaml

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.supervisor import Supervisor
from agentmesh.config import ConfigError, Settings, read_layers, settings_from_layers
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc

D = dispatcher_pb2
ROLES = ("triage", "logs", "remediation", "reporter")
SERVICE = "svc-7-z"
PLANTED = {
    "pod": "checkout-3f9a-kq7zt",
    "heap": "heap 3.2GiB",
    "build": "build b41c9e07",
    "ticket": "INC-48213",
    "window": "before 18:00 UTC",
}
"""Pod, heap and build in the triage agent's tool output; ticket and change window in the user's words."""
GOAL = (
    f"Alert on service {SERVICE}: checkout requests fail. The customer ticket is {PLANTED['ticket']}; "
    f"do not restart anything {PLANTED['window']}. Find the cause and get it fixed."
)
UNSUPPORTED = "a cache leak in v2.1"
"""The log analyst's first brief states it as confirmed, cited to the user's message: the verifier rejects it."""
HOP_CAP = 800
"""context_svc's default cap on a hop summary (tokens)."""


def overlay(logs_dir: Path) -> dict[str, Any]:
    """The relay's agents and their scripted models (one policy role each)."""
    chain = [f"relay_{r}" for r in ROLES]
    models: list[dict[str, Any]] = []
    agents: list[dict[str, Any]] = []

    def add(agent_id: str, policy_role: str, next_tool: str, fabricate: str = "", **extra: Any) -> None:
        models.append(
            {
                "name": agent_id,
                "policy": "provider_svc.scenarios.relay:relay_policy",
                "policy_args": {"role": policy_role, "next_tool": next_tool, "fabricate": fabricate},
            }
        )
        agents.append(
            {
                "id": agent_id,
                "model": f"scripted/{agent_id}",
                "permissions": ["*:*:*"],
                "max_steps": 8,
                "token_budget": 60_000,
                **extra,
            }
        )

    for i, role in enumerate(ROLES):
        last = i + 1 == len(chain)
        target = "closing" if last else chain[i + 1]
        handoffs: list[Any] = [{"capability": "closing"}] if last else [target]
        tools = ["query_logs"] if role == "triage" else ["none_here"]
        checked: dict[str, Any] = {"verify_with": "relay_checker", "fabricate": UNSUPPORTED} if role == "logs" else {}
        add(chain[i], role, f"transfer_to_{target}", tools=tools, handoffs=handoffs, **checked)
    for closer in ("relay_verifier", "relay_closer"):
        add(closer, "close", "", tools=["none_here"], capabilities=["closing"])
    add("relay_checker", "verify", "", tools=["read_payload"], role="verifier")
    return {
        "providers": {
            "backends": [{"name": "scripted", "type": "scripted", "rate_limit_per_min": None, "models": models}]
        },
        "tools": {"logs_dir": str(logs_dir)},
        "agents": agents,
    }


def write_log(logs_dir: Path) -> Path:
    """The service's log: noise around the one line that holds the pod, the heap and the build."""
    logs_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"2026-12-06T03:00:{s:02d}Z INFO [{SERVICE}] request served in {10 + s % 40} ms" for s in range(40)]
    lines.insert(
        20,
        f"2026-12-06T03:00:20Z ERROR [{SERVICE}] pod {PLANTED['pod']} OOMKilled: {PLANTED['heap']} over its limit "
        f"since {PLANTED['build']} rolled out",
    )
    path = logs_dir / f"{SERVICE}.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


async def _events(stub: Any, md: Any, task_id: str) -> list[D.TaskEvent]:
    call = stub.WatchTask(D.WatchTaskRequest(task_id=task_id), metadata=md, timeout=120)
    return [r.event async for r in call if r.event.sequence]


async def _relay(target: str, token: str) -> tuple[list[tuple[D.Task, list[D.TaskEvent]]], list[D.Task]]:
    """The chain from the triage task to the last one, each task with its events; the verifiers' tasks."""
    md = ((IDENTITY_HEADER, token),)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        started = await stub.StartTask(D.StartTaskRequest(agent_id="relay_triage", goal=GOAL), metadata=md)
        task_id, chain, checks = started.task.task_id, [], []
        while True:
            events = await _events(stub, md, task_id)
            reply: D.GetTaskResponse = await stub.GetTask(D.GetTaskRequest(task_id=task_id), metadata=md)
            chain.append((reply.task, events))
            for e in events:
                if e.kind == D.TASK_EVENT_KIND_HANDOFF and e.attributes.get("mode") == "verify":
                    checked = D.GetTaskRequest(task_id=e.attributes["child_task_id"])
                    checks.append((await stub.GetTask(checked, metadata=md)).task)
            if reply.task.status != D.TASK_STATUS_HANDED_OFF or len(chain) > len(ROLES):
                return chain, checks
            task_id = reply.task.child_task_id


def replaced_tokens(events: Sequence[D.TaskEvent]) -> int:
    """The transcript a hop replaces: the handing agent's last context, every message and output whole."""
    raw = [int(e.attributes.get("raw_tokens", "0")) for e in events if e.kind == D.TASK_EVENT_KIND_CONTEXT]
    return raw[-1] if raw else 0


def print_hops(chain: Sequence[tuple[D.Task, Sequence[D.TaskEvent]]]) -> list[tuple[int, int]]:
    """Prints every hop; (hop tokens, transcript tokens replaced) of each."""
    carried = []
    for (parent, events), (child, _) in itertools.pairwise(chain):
        hop = next(
            (
                e
                for e in events
                if e.kind == D.TASK_EVENT_KIND_HANDOFF and e.attributes.get("child_task_id") == child.task_id
            ),
            None,
        )
        if hop is None:
            continue
        tokens, replaced = int(hop.attributes["hop_tokens"]), replaced_tokens(events)
        carried.append((tokens, replaced))
        print(
            f"\n== hop {len(carried)}: {parent.agent_id} -> {child.agent_id}: {tokens} tokens carried against a "
            f"transcript of {replaced:,}; {hop.attributes['confirmed']} confirmed / {hop.attributes['inferred']} "
            f"inferred facts ({hop.attributes['demoted']} demoted)"
        )
        print("  " + child.goal.replace("\n", "\n  "))
    return carried


def print_verdicts(checks: Sequence[D.Task]) -> list[str]:
    """Prints each verifier task's verdict; the verdicts in order."""
    verdicts = []
    for task in checks:
        try:
            verdict = json.loads(task.output_json)
        except ValueError:
            verdict = {"verdict": D.TaskStatus.Name(task.status), "reasons": [task.error.message]}
        verdicts.append(str(verdict.get("verdict")))
        reasons = "; ".join(verdict.get("reasons", [])) or "-"
        print(f"\n== verifier {task.agent_id} on the log analyst's handoff: {verdict.get('verdict')} ({reasons})")
    return verdicts


def run_relay_demo(settings: Settings, configs: Sequence[Path]) -> int:
    """Runs the relay; 0 when it completed with every planted value at the last agent, each hop under its cap."""
    work = Path(tempfile.mkdtemp(prefix="agentmesh-demo-relay-"))
    print(f"== setting up: the service log {write_log(work / 'logs')}, the relay's agents")
    overlay_path = work / "relay.yaml"
    overlay_path.write_text(yaml.safe_dump(overlay(work / "logs")), encoding="utf-8")
    files = [*configs, overlay_path]
    try:
        settings = settings_from_layers(read_layers(files))
    except ConfigError as exc:
        print(f"agentmesh demo relay: {exc}")
        return 2
    supervisor = Supervisor(
        settings,
        config_files=files,
        extra_env={
            "AGENTMESH_TELEMETRY_LOG_LEVEL": "ERROR",
            "AGENTMESH_TELEMETRY_SPAN_FILE": str(work / "spans.jsonl"),
        },
    )
    checks: dict[str, bool] = {}
    try:
        print("== starting redis + four services (agentmesh up)")
        supervisor.start(ready_timeout_s=60)
        token = Authenticator(settings.auth, settings.environment).mint(subject="demo-operator", roles=("operator",))
        print(f"\n== the alert: {GOAL}")
        chain, verifier_tasks = asyncio.run(_relay(supervisor.target("dispatcher"), token))
        verdicts = print_verdicts(verifier_tasks)
        carried = print_hops(chain)
        last, _ = chain[-1]
        print(f"\n== {last.agent_id}: {D.TaskStatus.Name(last.status).removeprefix('TASK_STATUS_')}")
        print("  " + last.answer.split("\n--- transcript ---")[0])
        print("\n== tokens each hop carried against the transcript it replaced")
        for i, (tokens, replaced) in enumerate(carried, 1):
            share = f"{100 * tokens / replaced:.0f}%" if replaced else "-"
            print(f"  hop {i}: {tokens:>5} against {replaced:>6,}  ({share})")
        checks["the verifier rejected the unsupported root cause once, then accepted"] = verdicts == [
            "rejected",
            "accepted",
        ] and all(UNSUPPORTED not in task.goal for task, _ in chain[2:])
        checks["the relay completed"] = last.status == D.TASK_STATUS_SUCCEEDED and len(chain) == len(ROLES) + 1
        checks["every planted value reached the last agent"] = all(v in last.goal for v in PLANTED.values())
        checks[f"every hop under {HOP_CAP} tokens"] = bool(carried) and all(t <= HOP_CAP for t, _ in carried)
    except (RuntimeError, TimeoutError, OSError, grpc.aio.AioRpcError) as exc:
        print(f"demo could not run: {exc}")
        checks["demo ran"] = False
    finally:
        print("\n== stopping")
        codes = supervisor.stop()
        checks["clean stop"] = all(code == 0 for code in codes.values())
    for name, ok in checks.items():
        print(f"  [{'x' if ok else ' '}] {name}")
    failed = [name for name, ok in checks.items() if not ok]
    print("demo OK" if not failed else f"demo FAILED: {', '.join(failed)}")
    return 0 if not failed else 1
