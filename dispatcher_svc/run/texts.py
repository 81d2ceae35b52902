"""The texts of a run's events (pure)."""

from __future__ import annotations

from dispatcher_svc.model import ToolOutcome

_CLIP = 160


def clip(text: str, limit: int = _CLIP) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def outcome_summary(outcome: ToolOutcome) -> str:
    if outcome.pending is not None:
        return f"{outcome.tool_name} -> waiting for approval {outcome.pending.approval_id}"
    if outcome.error is not None:
        err = outcome.error
        return f"{outcome.tool_name} -> {err.code.name} ({err.error_class.name}): {clip(err.message, 100)}"
    out = outcome.output
    assert out is not None
    if out.ref is not None:
        return (
            f"{outcome.tool_name} -> ok, {out.ref.size_bytes} bytes offloaded as {out.ref.ref_id[:15]}…, "
            f"context keeps the digest"
        )
    return f"{outcome.tool_name} -> ok: {clip(out.inline or '', 100)}"


def raw_tokens_of(outcome: ToolOutcome, appended_tokens: int) -> int:
    """Tokens the result would have cost appended raw: offloaded outputs at ~4 bytes per token."""
    out = outcome.output
    if out is not None and out.ref is not None:
        return max(appended_tokens, out.ref.size_bytes // 4)
    return appended_tokens


def reply_text(tool_call_names: list[str], text: str) -> str:
    """The MODEL_REPLY event's text."""
    if tool_call_names:
        return f"model asked for {len(tool_call_names)} tool call(s): {', '.join(tool_call_names)}"
    return f"model answered: {clip(text, 120)}" if text.strip() else "model replied with nothing"
