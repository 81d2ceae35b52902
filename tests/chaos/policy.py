"""The chaos agents' scripted policy: a plan of 2-4 side-effecting calls, each with a fresh nonce.

Loaded by provider_svc from the harness's configuration (`policy: tests.chaos.policy:policy`). The
plan is in the goal the harness writes: `... plan: post_effect+keyed_effect,put_effect` is two
steps, the first with two calls in one reply. Every call carries `{"seq": n, "nonce": <random>}`;
the nonce is random (uuid4), never derived from the prompt, so a reply regenerated after a crash
instead of resumed from its checkpoint asks a different call, which the counting upstreams see.

The policy counts the tool results in the conversation like a naive model would: a result appended
twice makes it skip a planned call (it then answers `PLAN BROKEN`). On any tool error it stops and
answers `GAVE UP: <code>`; it never re-issues a failed call under a new nonce.
Its answers start with `DONE`, `GAVE UP` or `PLAN BROKEN` (the harness reads them).
"""

from __future__ import annotations

import json
import re
import uuid

from provider_svc.models.base import Role
from provider_svc.testing.scripted import ScriptedReply, ScriptedRequest, ScriptedToolCall

PLAN = re.compile(r"plan: ([a-z_+,]+)")
TOOLS = ("put_effect", "post_effect", "keyed_effect")


def parse_plan(goal: str) -> list[list[str]]:
    """The steps of the plan in a goal: `a+b,c` -> [[a, b], [c]]."""
    match = PLAN.search(goal)
    if match is None:
        return []
    return [[name for name in step.split("+") if name] for step in match.group(1).split(",") if step]


def plan_text(steps: list[list[str]]) -> str:
    """The goal fragment `parse_plan` reads."""
    return "plan: " + ",".join("+".join(step) for step in steps)


def policy(req: ScriptedRequest) -> ScriptedReply:
    err = req.last_error
    if err is not None:
        # Even a CONTRACT error: the harness's calls are always valid, so one is a finding, not a typo.
        return ScriptedReply(text=f"GAVE UP: {err.code}: {err.message[:120]}")
    steps = parse_plan(req.goal)
    results = [m for m in req.messages if m.role == Role.TOOL]
    done = len(results)
    issued = 0
    for step in steps:
        if issued == done:
            calls = tuple(
                ScriptedToolCall(name, json.dumps({"seq": issued + i + 1, "nonce": uuid.uuid4().hex}))
                for i, name in enumerate(step)
            )
            return ScriptedReply(tool_calls=calls)
        issued += len(step)
    if issued != done:
        return ScriptedReply(text=f"PLAN BROKEN: {done} results for a plan of {issued} calls")
    nonces = []
    for m in req.messages:
        for call in m.tool_calls:
            nonces.append(str(json.loads(call.arguments_json).get("nonce", "?")))
    return ScriptedReply(text="DONE: " + " ".join(nonces))
