"""The scripted model's policy of a 5-agent ops relay (issue 44): bench/bench_relay.py, `agentmesh demo relay`.

`relay_policy(role=..., next_tool=...)` is the factory a scripted model's `policy_args` call. The first
role reads the service's log with `query_logs`; every role then either hands over with a brief (handoff
mode: `next_tool` is its `transfer_to_*` tool), each planted value it can see stated as a fact citing the
session message that holds it, or (baseline: no `next_tool`) answers with its whole transcript, which the
bench forwards as the next agent's goal. With an `ask_*` tool as `next_tool` (delegate and wait), the
role answers once the delegated answer is back, quoting it. `fabricate` (tests) adds a fact whose
citation does not hold its value: BuildHandoff must demote it. A tool error (the injected faults) is
answered by making the intended call again: the scripted model's corrections are clean unless
`faults.on_corrections`.
"""

from __future__ import annotations

import json
import re

from provider_svc.models.base import Message, Role
from provider_svc.models.scripted.policy import Policy, ScriptedReply, ScriptedRequest, ScriptedToolCall

PLANTED = {
    "pod": re.compile(r"\bcheckout-[0-9a-f]{4}-[0-9a-z]{5}\b"),
    "heap": re.compile(r"\bheap [0-9]\.[0-9]GiB\b"),
    "build": re.compile(r"\bbuild b[0-9a-f]{7}\b"),
    "ticket": re.compile(r"\bINC-[0-9]{5}\b"),
    "window": re.compile(r"\bbefore [0-2][0-9]:[0-5]0 UTC\b"),
}
"""The planted facts' shapes: pod, heap and build in the first agent's tool output, ticket and window in
the user's words."""

_SERVICE = re.compile(r"\bservice (svc-[0-9]+-z)\b")

_WORK = {
    "triage": "Triage: the alert is real; the checkout log shows the failing pod.",
    "logs": "Log analysis: the pod ran out of heap after the build; the other pods are healthy.",
    "remediation": "Remediation: roll the build back on the pod, respecting the user's change window.",
    "reporter": "Report: incident written up with the pod, the build and the ticket.",
    "close": "Closed: the incident is resolved and the ticket updated.",
}


def _conversation(req: ScriptedRequest) -> list[Message]:
    """The messages a session holds (no system prompt): their indexes are the citations' message_index."""
    return [m for m in req.messages if m.role != Role.SYSTEM]


def _found(text: str) -> dict[str, str]:
    return {name: m.group(0) for name, pattern in PLANTED.items() if (m := pattern.search(text)) is not None}


def _transcript(req: ScriptedRequest) -> str:
    lines = []
    for m in _conversation(req):
        calls = " ".join(f"{c.name}({c.arguments_json})" for c in m.tool_calls)
        lines.append(f"{m.role.value}: {m.content} {calls}".rstrip())
    return "\n".join(lines)


class RelayPolicy:
    """One role of the relay (module docstring)."""

    def __init__(self, role: str, next_tool: str = "", fabricate: str = "") -> None:
        self.role = role
        self.next_tool = next_tool
        self.fabricate = fabricate

    def __call__(self, req: ScriptedRequest) -> ScriptedReply:
        if self.role == "triage" and "query_logs" not in req.succeeded_tools:
            match = _SERVICE.search(req.goal)
            service = match.group(1) if match else "svc-0"
            return ScriptedReply(tool_calls=(ScriptedToolCall("query_logs", json.dumps({"service": service})),))
        work = _WORK.get(self.role, self.role)
        if not self.next_tool:
            return ScriptedReply(text=f"{work}\n--- transcript ---\n{_transcript(req)}")
        if self.next_tool.startswith("ask_") and self.next_tool in req.succeeded_tools:
            return ScriptedReply(text=f"{work}\n--- delegated answer ---\n{req.last_result_text}")
        return ScriptedReply(tool_calls=(ScriptedToolCall(self.next_tool, json.dumps(self._brief(req, work))),))

    def _brief(self, req: ScriptedRequest, work: str) -> dict[str, object]:
        facts: list[dict[str, object]] = []
        seen: set[str] = set()
        # Newest message first: a value is cited where it was last stated (a tool output over the goal).
        conversation = _conversation(req)
        for index in range(len(conversation) - 1, -1, -1):
            for name, value in _found(conversation[index].content).items():
                if name not in seen:
                    seen.add(name)
                    facts.append({"statement": name, "value": value, "citation": {"message_index": index}})
        if self.fabricate:
            # Cited to the user's first message, which never said it: a fabricated citation.
            facts.append({"statement": "root cause", "value": self.fabricate, "citation": {"message_index": 0}})
        facts.append({"statement": f"{self.role} conclusion", "basis": work})
        return {"summary": work, "facts": facts, "risks": ["A restart inside the change window breaks the SLA."]}


def relay_policy(role: str, next_tool: str = "", fabricate: str = "") -> Policy:
    """The Policy of one role (scripted `policy_args`: {role, next_tool, fabricate})."""
    return RelayPolicy(role, next_tool, fabricate)
