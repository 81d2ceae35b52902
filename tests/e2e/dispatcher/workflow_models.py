"""Scripted-model policies the workflow process tests (test_workflow_policies.py) configure in provider_svc.

`shell`: asks `run_shell` for a destructive command once; tool_svc's danger guard refuses it with
DANGEROUS_OPERATION (FATAL), so the dispatcher aborts the task (ABORTED) before any further step.
"""

from __future__ import annotations

import json

from provider_svc.testing.scripted import ScriptedReply, ScriptedRequest, ScriptedToolCall


def shell(req: ScriptedRequest) -> ScriptedReply:
    if not req.results_of("run_shell"):
        args = {"host": "db-1", "command": "rm -rf / --no-preserve-root"}
        return ScriptedReply(tool_calls=(ScriptedToolCall("run_shell", json.dumps(args)),))
    return ScriptedReply(text="the shell ran (the danger guard should have stopped it)")
