"""Redaction in tool_svc's pipeline: the `RedactSecrets` step over outputs, and `redact_outcome` for
every result the gateway returns, stores or records (the redactor itself is agentmesh.redact)."""

from __future__ import annotations

from agentmesh.errors import AgentmeshError
from agentmesh.redact import redact_error, redact_text, redact_value
from tool_svc.call import CallState
from tool_svc.model import Outcome, Produced

__all__ = ["RedactSecrets", "redact_outcome"]


def redact_outcome(outcome: Outcome) -> Outcome:
    """An outcome safe to return, store or record: errors are redacted (outputs are by `RedactSecrets`)."""
    return redact_error(outcome) if isinstance(outcome, AgentmeshError) else outcome


class RedactSecrets:
    """Pipeline step: secrets in the output are masked before anything stores or shows it."""

    async def __call__(self, call: CallState) -> Outcome | None:
        produced = call.produced
        assert produced is not None
        if produced.result_type == "structured":
            value, changed = redact_value(produced.value)
            call.produced = Produced("structured", value=value, notes=produced.notes)
        else:
            text, changed = redact_text(produced.text)
            call.produced = Produced("text", text=text, notes=produced.notes)
        call.redacted = changed
        return None
