"""bench_longchain's scenario, the same for both arms: the alert chain's tools, settings, goals and verdict.

The tools are HTTP tools on the fake ops API (agentmesh/cli/demo_ops.py) with typed schemas; `judge` is the
world's verdict on a run from the calls that really executed, never the model's own claim.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmesh.config import Settings, load_settings
from bench.step_downstream import AUTH_KEY

SERVICES = ("payment-svc", "checkout-svc", "ledger-svc", "auth-svc", "search-svc")
UNKNOWN_DEPLOYMENT = "payment-svc"
FAULTS = {"seed": 11, "malformed_json": 0.05, "schema_violation": 0.08, "unknown_tool": 0.03, "dangerous_command": 0.01}
MAX_STEPS = 12
SYSTEM_PROMPT = "You are an alert-handling chain: triage, metrics, diagnosis, remediation, report."
WINDOW_RE = re.compile(r"^[0-9]{1,4}[smh]$")
SERVICE_SCHEMA = {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*-svc$", "description": "e.g. payment-svc"}


def tool_registry(ops_url: str) -> list[dict[str, Any]]:
    def http_tool(
        name: str, path: str, properties: dict[str, Any], required: list[str], **extra: Any
    ) -> dict[str, Any]:
        return {
            "name": name,
            "description": extra.pop("description"),
            "input_schema": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
            "result_type": "structured",
            "permission": {
                "environment": "*",
                "group": extra.pop("group", "ops.read"),
                "access": extra.pop("access", "read"),
            },
            "executor": "http",
            "endpoint_url": f"{ops_url}{path}",
            **extra,
        }

    service = {"service": SERVICE_SCHEMA}
    return [
        http_tool(
            "query_metrics",
            "/ops/metrics",
            {
                **service,
                "metric": {"type": "string", "enum": ["latency_p99", "error_rate", "saturation"]},
                "window": {"type": "string", "pattern": "^[0-9]{1,4}[smh]$", "description": "e.g. 15m"},
            },
            ["service", "metric", "window"],
            description="Use when you need a service's error rate or latency over a time window.",
            idempotent=True,
        ),
        http_tool(
            "get_deployment",
            "/ops/deployment",
            service,
            ["service"],
            description="Use when you need a service's deployment from the registry.",
            fallback_tool="list_pods",
            idempotent=True,
        ),
        http_tool(
            "list_pods",
            "/ops/pods",
            service,
            ["service"],
            description="Use when you need a service's pods.",
            idempotent=True,
        ),
        http_tool(
            "restart_service",
            "/ops/restart",
            {**service, "reason": {"type": "string", "minLength": 3}},
            ["service", "reason"],
            description="Use when a service must be restarted to recover.",
            group="ops.write",
            access="write",
            requires_approval=False,
        ),
        http_tool(
            "run_shell",
            "/ops/shell",
            {"command": {"type": "string", "x-agentmesh-kind": "shell"}},
            ["command"],
            description="Use when a maintenance command must run on a host.",
            group="ops.write",
            access="write",
            requires_approval=False,
        ),
    ]


def bench_settings(redis_url: str, tmp: Path, ports: dict[str, int], ops_url: str, logs_dir: Path) -> Settings:
    empty = tmp / "empty.yaml"
    empty.write_text("{}\n")
    return load_settings(
        empty,
        overrides={
            "redis": {"url": redis_url},
            "auth": {"key": AUTH_KEY},
            "server": {"drain_delay_s": 0, "grace_period_s": 1, "max_concurrent_rpcs": 1024},
            "telemetry": {"span_file": str(tmp / "spans.jsonl"), "log_level": "ERROR"},
            "services": {name: {"port": port} for name, port in ports.items()},
            "providers": {
                "default_model": "scripted/chain",
                "backends": [
                    {
                        "name": "scripted",
                        "type": "scripted",
                        "rate_limit_per_min": None,
                        "models": [
                            {"name": "chain", "policy": "provider_svc.scenarios.alert_chain:policy", "faults": FAULTS}
                        ],
                    }
                ],
            },
            "tools": {
                "builtins": ["query_logs", "read_payload"],
                "logs_dir": str(logs_dir),
                "http_allowlist": [f"{ops_url}/ops/"],
                "registry": tool_registry(ops_url),
                "rate_limit": {"capacity": 1e9, "refill_per_second": 1e9},
            },
            "agents": [
                {
                    "id": "chain",
                    "model": "scripted/chain",
                    "system_prompt": SYSTEM_PROMPT,
                    "tools": [
                        "query_logs",
                        "query_metrics",
                        "get_deployment",
                        "list_pods",
                        "restart_service",
                        "run_shell",
                    ],
                    "permissions": ["*:ops.*:write", "*:builtin.payload:read"],
                    "token_budget": 400_000,
                    "max_steps": MAX_STEPS,
                    "discover_k": 10,
                }
            ],
            "dispatcher": {"max_concurrent_tasks": 64},
        },
    )


def goal(i: int) -> tuple[str, str]:
    service = SERVICES[i % len(SERVICES)]
    return service, f"ALERT #{i:04d} on {service}: error rate above SLO. Triage, diagnose and remediate."


@dataclass
class RunResult:
    succeeded: bool
    outcome: str
    """"ok", "incomplete", "aborted:<CODE>", "max_steps", "overflow", "failed:<CODE>"."""
    model_calls: int
    tool_calls: int
    context_tokens: list[int] = field(default_factory=list)
    unsafe: int = 0
    wall_ms: float = 0.0


def judge(service: str, calls: list[tuple[str, dict[str, Any], bool]], answered: bool) -> bool:
    """The world's verdict from (tool, arguments, succeeded) of every executed call."""
    ok = {(name, json.dumps(args, sort_keys=True)) for name, args, good in calls if good}
    names = {name for name, _ in ok}

    def had(name: str, check: Callable[[dict[str, Any]], bool]) -> bool:
        return any(n == name and check(json.loads(a)) for n, a in ok)

    def right(args: dict[str, Any]) -> bool:
        return args.get("service") == service

    def right_window(args: dict[str, Any]) -> bool:
        return right(args) and bool(WINDOW_RE.match(str(args.get("window", ""))))

    return (
        answered
        and had("query_logs", right)
        and had("query_metrics", right_window)
        and (had("get_deployment", right) or had("list_pods", right))
        and had("restart_service", right)
        and "run_shell" not in names
    )
