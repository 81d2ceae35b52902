"""The console tests' stack: the four services in-process (tests/contract/stack.py) with the HTTP
listeners open, the console on the dispatcher's, tool_svc's Connect edge allowing the console's origin,
and an agent `console` whose scripted model:
- for "apply <expr>": calls `apply_change` (the calculator as a write that needs approval), then
  answers with its output;
- for "read the hostile logs": calls `query_logs` on a log whose line is hostile markup, then answers
  with hostile markup and a line of 1 MB;
- for "note ...": calls `post_note` (a write whose upstream is slower than its timeout: a settlement).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from provider_svc.models.base import Role
from provider_svc.testing.scripted import ScriptedReply, ScriptedRequest, ScriptedToolCall
from tests.console.browser import free_port
from tests.contract.stack import AGENT, Stack

CONSOLE_AGENT = "console"
HOSTILE = (
    "<script>window.__pwned='script'</script><img src=x onerror=\"window.__pwned='img'\">"
    " <a href=\"javascript:window.__pwned='link'\">click</a> javascript:window.__pwned='text'"
    " \u202etxt.exe \u2067isolate\u2069"
)
ONE_MB_LINE = ("lorem ipsum dolor sit amet " * 40_000)[:1_000_000]
_APPLY = re.compile(r"apply ([0-9*+ -]+)")


def policy(req: ScriptedRequest) -> ScriptedReply:
    """The `console` agent's model (module docstring)."""
    results = [m for m in req.messages if m.role == Role.TOOL]
    if "note" in req.goal:
        if not results:
            return ScriptedReply(tool_calls=(ScriptedToolCall("post_note", json.dumps({"q": "deploy done"})),))
        return ScriptedReply(text=f"ANSWER: {results[-1].content[:200]}")
    if "hostile" in req.goal:
        if not results:
            return ScriptedReply(tool_calls=(ScriptedToolCall("query_logs", json.dumps({"service": "hostile-svc"})),))
        return ScriptedReply(text=f"ANSWER: {HOSTILE}\n{ONE_MB_LINE}")
    if not results:
        match = _APPLY.search(req.goal)
        expression = match.group(1).strip() if match else "1+1"
        return ScriptedReply(tool_calls=(ScriptedToolCall("apply_change", json.dumps({"expression": expression})),))
    return ScriptedReply(text=f"ANSWER: {results[-1].content[:200]}")


def console_stack(
    redis_url: str, workdir: Path, extra: dict[str, Any] | None = None, *, note_upstream: str = ""
) -> tuple[Stack, int]:
    """The stack (not started) and the dispatcher's HTTP port, chosen first so tool_svc can allow its origin.
    With `note_upstream` (a base URL), the agent also has `post_note`: a write POSTed there that is
    not gated but times out after 0.5 s, so a slow upstream leaves its outcome unknown (a settlement)."""
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    (logs / "hostile-svc.log").write_text(f"2026-01-01T00:00:00Z ERROR [hostile-svc] {HOSTILE}\n", encoding="utf-8")
    port, tool_port, provider_port = free_port(), free_port(), free_port()
    origin = f"http://127.0.0.1:{port}"
    overrides: dict[str, Any] = {
        "providers": {
            "backends": [
                {
                    "name": "scripted",
                    "type": "scripted",
                    "models": [
                        {"name": "smoke", "policy": "tests.contract.stack:policy"},
                        {
                            "name": "console",
                            "policy": "tests.console.scenario:policy",
                            "input_price_per_mtok": 0.5,
                            "output_price_per_mtok": 1.5,
                        },
                    ],
                }
            ]
        },
        "tools": {
            "builtins": ["calculator", "read_payload", "query_logs"],
            "logs_dir": str(logs),
            "registry": [
                {"name": "calculator", "executor": "builtin", "timeout_s": 60},
                {
                    "name": "apply_change",
                    "executor": "builtin",
                    "builtin": "calculator",
                    "description": "Use when a computed change must be applied (needs an operator's approval).",
                    "timeout_s": 60,
                    "requires_approval": True,
                    "impact": "Applies the change to production (the calculator standing in for a write).",
                    "permission": {"environment": "*", "group": "ops.write", "access": "write"},
                },
            ],
        },
        "agents": [
            {"id": AGENT, "model": "scripted/smoke", "tools": ["calculator"], "permissions": ["*:*:*"], "max_steps": 4},
            {
                "id": CONSOLE_AGENT,
                "model": "scripted/console",
                "tools": ["apply_change", "query_logs"],
                "permissions": ["*:*:*"],
                "max_steps": 4,
                "max_output_tokens": 400_000,
                "token_budget": 2_000_000,
            },
        ],
        # The Spend page shows the console agent's daily budget (far above what the tests spend).
        "gateway": {"agents": {CONSOLE_AGENT: {"budget_usd_day": 50.0}}},
        **(extra or {}),
    }
    if note_upstream:
        overrides["tools"]["http_allowlist"] = [f"{note_upstream}/"]
        overrides["tools"]["registry"].append(
            {
                "name": "post_note",
                "description": "Use when a note must be posted to the change log.",
                "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
                "executor": "http",
                "endpoint_url": f"{note_upstream}/slow",
                "permission": {"environment": "*", "group": "ops.write", "access": "write"},
                "requires_approval": False,
                "timeout_s": 0.5,
            }
        )
        overrides["agents"][1]["tools"].append("post_note")
    stack = Stack(
        redis_url,
        workdir,
        overrides,
        http=True,
        http_addresses={
            "dispatcher": f"127.0.0.1:{port}",
            "tool": f"127.0.0.1:{tool_port}",
            "provider": f"127.0.0.1:{provider_port}",
        },
        service_overrides={
            # The console finds tool_svc's and provider_svc's edges on the page's host at their http_port ...
            "dispatcher": {"services": {"tool": {"http_port": tool_port}, "provider": {"http_port": provider_port}}},
            # ... which let the console's origin call them.
            "tool": {"server": {"cors_allowed_origins": [origin]}},
            "provider": {"server": {"cors_allowed_origins": [origin]}},
        },
    )
    return stack, port
