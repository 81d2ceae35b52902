"""A 5-agent-style alert chain (the seeds' benchmark) as one scripted policy, for bench_longchain.

The stages a chain of agents would split between them: triage reads the service's log
(`query_logs`), metrics reads the error rate (`query_metrics`), diagnosis asks the deployment
registry (`get_deployment`, which may not know the service), remediation restarts it
(`restart_service`), and the reporter answers. Faults (malformed JSON, schema violations, unknown
tools, a dangerous command) are injected on top by the scripted model at seeded rates.

How it reacts to errors depends on what the system shows it, which is the point of the benchmark:
- a typed error (agentmesh's `model_text`): CONTRACT -> fix the call from the hints; ENGINEERING
  -> take the named fallback tool, or move on without that stage;
- an untyped error string ("Error: ...", the baseline): retry the same stage blindly, at most
  `blind_retries` times, then give up on it (a naive agent with a retry cap).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from provider_svc.models.base import Role
from provider_svc.testing.scripted import (
    ScriptedReply,
    ScriptedRequest,
    ScriptedToolCall,
    fix_last_call,
    tool_error_of,
)

STAGES = ("query_logs", "query_metrics", "get_deployment", "restart_service")
_SERVICE = re.compile(r"\b([a-z][a-z0-9-]*-svc)\b")


def stage_arguments(stage: str, service: str) -> dict[str, object]:
    """The correct arguments of each stage (what a model that makes no mistake would send)."""
    if stage == "query_logs":
        return {"service": service, "limit": 2000}
    if stage == "query_metrics":
        return {"service": service, "metric": "error_rate", "window": "15m"}
    if stage == "restart_service":
        return {"service": service, "reason": "error rate above SLO after the pool exhaustion"}
    return {"service": service}


def _is_untyped_error(text: str) -> bool:
    return text.startswith("Error")


def factory(blind_retries: int = 3) -> Callable[[ScriptedRequest], ScriptedReply]:
    def alert_chain(req: ScriptedRequest) -> ScriptedReply:
        match = _SERVICE.search(req.goal)
        service = match.group(1) if match else "payment-svc"
        err = req.last_error
        if err is not None:
            if err.is_contract and req.failed_call is not None:
                return fix_last_call(req)
            if err.is_engineering and err.fallback_tool and err.fallback_tool not in req.called_tools:
                return _call(err.fallback_tool, {"service": service})
        # Where each stage stands, from the tool results in the prompt.
        done: set[str] = set()
        attempts: dict[str, int] = {}
        for message in req.messages:
            if message.role != Role.TOOL:
                continue
            call = req.call_by_id(message.tool_call_id)
            name = call.name if call is not None else message.name
            stage = "get_deployment" if name == "list_pods" else name
            attempts[stage] = attempts.get(stage, 0) + 1
            if _is_untyped_error(message.content):
                continue  # the baseline's opaque failure: this stage is not done
            typed = tool_error_of(message)
            if typed is None or typed.is_engineering:
                done.add(stage)  # a result, or a typed fault the model must not retry
        for stage in STAGES:
            if stage in done:
                continue
            if attempts.get(stage, 0) > blind_retries:
                continue  # a naive agent gives up on a stage after a few identical failures
            return _call(stage, stage_arguments(stage, service))
        findings = sorted(done)
        return ScriptedReply(text=f"Report for {service}: stages {', '.join(findings) or 'none'} completed.")

    return alert_chain


def _call(name: str, args: dict[str, object]) -> ScriptedReply:
    return ScriptedReply(tool_calls=(ScriptedToolCall(name, json.dumps(args, separators=(",", ":"))),))


policy = factory()
