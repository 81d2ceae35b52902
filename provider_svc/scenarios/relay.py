"""The scripted model's policy of a 5-agent ops relay (issue 44): bench/bench_relay.py, `agentmesh demo relay`.

`relay_policy(role=..., next_tool=...)` is the factory a scripted model's `policy_args` call. The first
role reads the service's log with `query_logs`; every role then either hands over with a brief (handoff
mode: `next_tool` is its `transfer_to_*` tool), each planted value it can see stated as a fact citing the
session message that holds it, or (baseline: no `next_tool`) answers with its whole transcript, which the
bench forwards as the next agent's goal. With an `ask_*` tool as `next_tool` (delegate and wait), the
role answers once the delegated answer is back, quoting it. `fabricate` (tests) adds a fact whose
citation does not hold its value: BuildHandoff must demote it, and a verifier rejects the hop; told so
(VERIFICATION_REJECTED), the role hands over again without it unless `stubborn`. The `verify` role is a
verifier (`role: verifier`): it re-reads the hop's full record with read_payload and rejects a brief
with a fact its citation did not support, naming each, else accepts (its typed verdict). A tool error
(the injected faults) is answered by making the intended call again: the scripted model's corrections
are clean unless `faults.on_corrections`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from provider_svc.models.base import Message, Role
from provider_svc.testing.scripted.policy import Policy, ScriptedReply, ScriptedRequest, ScriptedToolCall

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

    def __init__(self, role: str, next_tool: str = "", fabricate: str = "", stubborn: bool = False) -> None:
        self.role = role
        self.next_tool = next_tool
        self.fabricate = fabricate
        self.stubborn = stubborn

    def __call__(self, req: ScriptedRequest) -> ScriptedReply:
        if self.role == "triage" and "query_logs" not in req.succeeded_tools:
            match = _SERVICE.search(req.goal)
            service = match.group(1) if match else "svc-0"
            return ScriptedReply(tool_calls=(ScriptedToolCall("query_logs", json.dumps({"service": service})),))
        if self.role == "verify":
            return _verify(req)
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
        err = req.last_error
        told = err is not None and err.code == "VERIFICATION_REJECTED"
        if self.fabricate and (self.stubborn or not told):
            # Cited to the user's first message, which never said it: a fabricated citation.
            facts.append({"statement": "root cause", "value": self.fabricate, "citation": {"message_index": 0}})
        facts.append({"statement": f"{self.role} conclusion", "basis": work})
        return {"summary": work, "facts": facts, "risks": ["A restart inside the change window breaks the SLA."]}


_RECORD_REF = re.compile(r'read_payload\(ref_id="(pl_[0-9a-f]{64})"\)')


def _record_of(result: str) -> dict[str, Any]:
    """The hop record in read_payload's result (a status line, then {"content": "<the record's JSON>", ...})."""
    try:
        value = json.loads(result[result.find("{") :])
        record = json.loads(value["content"]) if isinstance(value, dict) and "content" in value else value
    except (ValueError, TypeError):
        return {}
    return record if isinstance(record, dict) else {}


def _verify(req: ScriptedRequest) -> ScriptedReply:
    """A verifier's step: read the hop's full record, then the verdict on the facts it was handed."""
    found = _RECORD_REF.search(req.goal)
    if found is None:
        return ScriptedReply(text=json.dumps({"verdict": "rejected", "reasons": ["the hop cites no record"]}))
    if "read_payload" not in req.succeeded_tools:
        return ScriptedReply(tool_calls=(ScriptedToolCall("read_payload", json.dumps({"ref_id": found.group(1)})),))
    record = _record_of(req.last_result_text)
    facts, checked = record.get("brief", {}).get("facts", []), record.get("checked", [])
    reasons = [
        f"{fact.get('statement')} = {fact.get('value')!r}: its citation does not support it ({check['reason']})"
        for fact, check in zip(facts, checked, strict=False)
        if check.get("reason")
    ]
    if not checked:
        reasons = ["the record holds no checked facts"]
    verdict = {"verdict": "rejected" if reasons else "accepted", "reasons": reasons}
    return ScriptedReply(text=json.dumps(verdict))


def relay_policy(role: str, next_tool: str = "", fabricate: str = "", stubborn: bool = False) -> Policy:
    """The Policy of one role (scripted `policy_args`: {role, next_tool, fabricate, stubborn})."""
    return RelayPolicy(role, next_tool, fabricate, stubborn)
