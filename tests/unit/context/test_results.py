"""A tool result read back from the log (context_svc/results.py, GetToolResult, issue 39)."""

from __future__ import annotations

from agentmesh.errors import AgentmeshError, ErrorCode
from context_svc.model import Message, PendingInfo, Role
from context_svc.results import outcome_of, output_header


def test_an_inline_output_reads_back_without_its_header() -> None:
    message = Message(
        role=Role.TOOL,
        content=output_header("calc", redacted=True) + '{"sum": 3}',
        tool_call_id="c1",
        name="calc",
        structured=True,
        redacted=True,
    )
    back = Message.from_json(message.to_json())
    outcome = outcome_of(back)
    assert (outcome.inline, outcome.structured, outcome.redacted) == ('{"sum": 3}', True, True)
    assert (outcome.tool_call_id, outcome.tool_name, outcome.error, outcome.pending) == ("c1", "calc", None, None)


def test_a_message_of_an_earlier_release_reads_back_with_an_unspecified_type() -> None:
    # Stored before the result type and redaction were kept: the header still says which it was.
    raw = '{"r":"tool","t":3,"ts":1.0,"c":"[tool calc ok]\\n42","id":"c1","n":"calc"}'
    outcome = outcome_of(Message.from_json(raw))
    assert (outcome.inline, outcome.structured, outcome.redacted) == ("42", None, False)


def test_errors_and_pending_approvals_read_back_typed() -> None:
    error = AgentmeshError(ErrorCode.RATE_LIMITED, "slow down")
    failed = Message(
        role=Role.TOOL, content="[tool calc failed: RATE_LIMITED]", tool_call_id="c1", name="calc", error=error
    )
    back = outcome_of(Message.from_json(failed.to_json())).error
    assert back is not None and (back.code, back.message) == (ErrorCode.RATE_LIMITED, "slow down")
    pending = PendingInfo("ap1", "restarts checkout", 2_000_000_000.0)
    waiting = Message(
        role=Role.TOOL, content="[tool deploy awaiting approval ap1]", tool_call_id="c2", name="deploy", pending=pending
    )
    assert outcome_of(Message.from_json(waiting.to_json())).pending == pending
