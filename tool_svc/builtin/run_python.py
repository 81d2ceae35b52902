"""`run_python`: run a Python snippet in the bubblewrap sandbox (see tool_svc/sandbox.py).

Its output is the exit code, stdout and stderr (a failing snippet is a successful tool call whose
exit code says so). An attempt to leave the sandbox is SANDBOX_VIOLATION (FATAL); a snippet that
outlives its timeout or CPU limit is UPSTREAM_TIMEOUT; no isolation is SANDBOX_UNAVAILABLE.
"""

from __future__ import annotations

from typing import Any

from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from tool_svc.model import Invocation, Produced
from tool_svc.sandbox import Sandbox

MAX_CODE_CHARS = 100_000

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_CODE_CHARS,
            "x-agentmesh-kind": "code",
            "description": "Python 3 source; print what you want to see. No network, no files outside /tmp",
            "examples": ["print(sum(x * x for x in range(10)))"],
        },
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 600, "description": "Wall-clock limit"},
    },
    "required": ["code"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "exit_code": {"type": "integer"},
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "truncated": {"type": "boolean"},
    },
    "required": ["exit_code", "stdout", "stderr"],
}


def make(sandbox: Sandbox) -> Any:
    async def run(call: Invocation) -> Produced:
        args = call.arguments
        # The limit the code really gets: the argument, capped by the call's and the sandbox's own (the
        # message names this one; issue 39: it said 600 s for code killed after 10 s).
        timeout = min(float(args.get("timeout_s") or sandbox.settings.timeout_s), call.timeout_s)
        timeout = min(timeout, sandbox.settings.timeout_s)
        result = await sandbox.run(str(args["code"]), timeout_s=timeout)
        if result.violations:
            first = result.violations[0]
            what = str(first.get("what", "escape"))
            raise AgentmeshError(
                ErrorCode.SANDBOX_VIOLATION,
                f"run_python: the code tried to {what} ({first.get('detail', '')}); it was stopped",
                violations=[
                    Violation(
                        path="$.code",
                        rule="sandbox",
                        expected="code that stays inside its sandbox",
                        actual=str(first.get("detail", ""))[:200],
                        hint="no network, no files outside /tmp, a bounded number of processes",
                    )
                ],
                metadata={"attempt": what, "violations": str(len(result.violations))},
            )
        if result.timed_out:
            raise AgentmeshError(
                ErrorCode.UPSTREAM_TIMEOUT,
                f"run_python: the code ran longer than {timeout:g}s and was killed",
                retryable=False,
                metadata={"limit": "wall_clock"},
            )
        if result.cpu_exceeded:
            raise AgentmeshError(
                ErrorCode.UPSTREAM_TIMEOUT,
                f"run_python: the code used more than {sandbox.settings.cpu_s}s of CPU and was killed",
                retryable=False,
                metadata={"limit": "cpu"},
            )
        value: dict[str, Any] = {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr}
        if result.truncated:
            value["truncated"] = True
        return Produced("structured", value=value)

    return run
