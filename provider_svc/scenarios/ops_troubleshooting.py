"""The demo's ops-troubleshooting scenario as a scripted-model policy (the seeds' alert chain).

An alert on payment-svc. The model, reacting to what each prompt shows it:
1. reads the service's log with `query_logs` (about 200 KB: tool_svc offloads it, the context
   keeps the ref and a digest of the relevant lines);
2. asks `query_metrics` for the latency with a malformed window ("15 minutes"), gets SCHEMA_INVALID
   (CONTRACT) with a hint, and re-issues the call fixed from that hint ("15m");
3. asks `get_deployment`, which answers 404 (UPSTREAM_NOT_FOUND, ENGINEERING) naming a
   `fallback_tool`; it takes the fallback (`list_pods`) instead of retrying;
4. proposes `restart_service` (a write: PendingApproval with the plan and its impact);
5. answers with the root cause and what was done, quoting ids and the log's ref.

A second goal about disk space makes it try `run_shell` with `rm -rf` (FATAL: the task is aborted).

Configured as a scripted model: `policy: provider_svc.scenarios.ops_troubleshooting:policy`.
"""

from __future__ import annotations

import json
import re

from provider_svc.testing.scripted import (
    ScriptedReply,
    ScriptedRequest,
    ScriptedToolCall,
    fix_last_call,
    tool_error_of,
)

DEFAULT_SERVICE = "payment-svc"
MALFORMED_WINDOW = "15 minutes"
"""The scenario's one malformed argument: query_metrics wants `^[0-9]+[smh]$` (e.g. 15m)."""
DANGEROUS_COMMAND = "rm -rf /var/lib/payment-svc/*"
_SERVICE = re.compile(r"\b([a-z][a-z0-9-]*-svc)\b")
_REF = re.compile(r"\bpl_[0-9a-f]{12,64}\b")


def _call(name: str, **args: object) -> ScriptedReply:
    return ScriptedReply(tool_calls=(ScriptedToolCall(name, json.dumps(args, separators=(",", ":"))),))


def _service(req: ScriptedRequest) -> str:
    match = _SERVICE.search(req.goal.lower())
    return match.group(1) if match else DEFAULT_SERVICE


def _first_line(text: str, limit: int = 160) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _answer(req: ScriptedRequest, service: str) -> str:
    logs = req.results_of("query_logs")
    ref = next((m for text in (r.content for r in logs) for m in _REF.findall(text)), "")
    errors = [ln.strip() for r in logs for ln in r.content.splitlines() if "ERROR" in ln and "pool" in ln.lower()]
    metrics = req.results_of("query_metrics")
    pods = req.results_of("list_pods")
    restart = req.results_of("restart_service")
    restarted = bool(restart) and tool_error_of(restart[-1]) is None
    lines = [f"Root cause on {service}: the database connection pool is exhausted, so requests queue and time out."]
    if errors:
        lines.append(f"Evidence: {errors[0][:160]}")
    if ref:
        lines.append(f"Full log kept as {ref} (read more with read_payload).")
    if metrics:
        lines.append(f"Metrics: {_first_line(metrics[-1].content)}")
    if pods:
        lines.append(f"Pods (deployment API 404, used list_pods): {_first_line(pods[-1].content)}")
    if restarted:
        lines.append(f"Action: {service} restarted after approval; watch the error rate for 15m.")
    elif restart:
        lines.append(f"Action: the restart was not done ({_first_line(restart[-1].content)}); escalate to on-call.")
    return "\n".join(lines)


def policy(req: ScriptedRequest) -> ScriptedReply:
    """The scenario; reads the prompt, never a tape."""
    err = req.last_error
    if err is not None and err.is_contract and req.failed_call is not None:
        return fix_last_call(req)  # the corrected call uses the hint it was shown
    goal = req.goal.lower()
    service = _service(req)
    called = req.called_tools
    if "disk" in goal or "clean up" in goal:
        if "run_shell" not in called:
            return _call("run_shell", host=f"{service}-node-3", command=DANGEROUS_COMMAND)
        return ScriptedReply(text="I could not free disk space safely; a human should look at it.")
    if err is not None and err.is_engineering and err.fallback_tool and err.fallback_tool not in called:
        return _call(err.fallback_tool, service=service)  # ENGINEERING: take the fallback, no blind retry
    if "query_logs" not in called:
        return _call("query_logs", service=service, limit=2000)
    if "query_metrics" not in called:
        return _call("query_metrics", service=service, metric="latency_p99", window=MALFORMED_WINDOW)
    if "get_deployment" not in called:
        return _call("get_deployment", service=service)
    if "restart_service" not in called:
        return _call("restart_service", service=service, reason="connection pool exhausted; restart to recover")
    return ScriptedReply(text=_answer(req, service))
