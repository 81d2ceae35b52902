"""Hop summaries (issue 44): what crosses from one agent to the next instead of its transcript.

An agent's transfer call carries a brief (what was done, key facts, open questions, risks, artifacts).
`build_hop` turns it into the next agent's first message:

- every fact given as confirmed is checked: its citation (a payload's `ref_id`, optionally an RFC 9535
  JSONPath or a 1-based line range, or a message of the parent session) must resolve, and the cited
  content must contain the stated value (`holds`); otherwise the fact is demoted to inferred with a
  typed reason (`Demotion`), counted;
- the parent session's user lines that state values or constraints (lines.py `states_value`: the
  same rule the summary uses to keep the user's words first) are added verbatim, newest first;
- the text is capped at `max_tokens`; what does not fit is dropped in a fixed order (handoff_text.DROP_ORDER:
  risks, open questions beyond 3, inferred facts, the summary clipped, then the rest of the open
  questions and the artifacts, and last the oldest user constraints and the confirmed facts);
- the full record (the brief, the check results and every constraint found) is offloaded as a JSON
  payload of the parent session and cited in the text; with a child session, it is granted read
  access to exactly the payloads the record cites as confirmed, the artifacts found and the record.

The values (the brief, its facts and citations, the hop) are in handoff_model.py; the citation check
(`holds`, the demotions) in handoff_check.py; the Redis side (reads, the record, the grant) is behind
`HandoffSources` (handoff_sources.py); the text's layout and cap are in handoff_text.py.
Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from agentmesh.errors import InvalidRequestError, NotFoundError, PermissionDeniedError
from agentmesh.payloads import parse_ref_id
from context_svc.handoff_check import CitationChecker
from context_svc.handoff_model import Brief, CheckedFact, FactKind, HandoffSources, Hop
from context_svc.handoff_text import HOP_HEADER, Layout, Section, fit, one_line, user_constraints, user_words
from context_svc.tokens import TokenCounter

__all__ = ["DEFAULT_MAX_TOKENS", "MAX_TOKENS_RANGE", "build_hop"]

DEFAULT_MAX_TOKENS = 800
MAX_TOKENS_RANGE = (200, 8000)
"""Below 200 the header and the record's citation leave no room for a fact."""

# Bounds of a brief: a model's arguments, checked before any work (each bad field is named).
_MAX_SUMMARY_CHARS = 8000
_MAX_FACTS = 64
_MAX_ITEMS = 32
_MAX_TEXT_CHARS = 1000
_MAX_VALUE_CHARS = 500
_MAX_JSON_PATH_CHARS = 500
_MAX_BRIEF_BYTES = 64 * 1024
_MAX_USER_MESSAGES = 200
"""The newest user messages read for constraints: bounded work whatever the session's length."""


# -- validation ----------------------------------------------------------------------------------


def _check_text(field_name: str, text: str, limit: int) -> None:
    if len(text) > limit:
        raise InvalidRequestError(field_name, f"at most {limit} characters, got {len(text)}")


def validate(brief: Brief, max_tokens: int | None) -> int:
    """InvalidRequestError naming the first bad field of the brief; the max_tokens to apply."""
    low, high = MAX_TOKENS_RANGE
    tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    if not low <= tokens <= high:
        raise InvalidRequestError("max_tokens", f"must be {low} to {high} (unset: {DEFAULT_MAX_TOKENS}), got {tokens}")
    if not brief.summary.strip() and not brief.facts:
        raise InvalidRequestError("brief", "empty: give a summary or at least one fact")
    _check_text("brief.summary", brief.summary, _MAX_SUMMARY_CHARS)
    for name, items, limit in (
        ("facts", brief.facts, _MAX_FACTS),
        ("open_questions", brief.open_questions, _MAX_ITEMS),
        ("risks", brief.risks, _MAX_ITEMS),
        ("artifacts", brief.artifacts, _MAX_ITEMS),
    ):
        if len(items) > limit:
            raise InvalidRequestError(f"brief.{name}", f"at most {limit}, got {len(items)}")
    for i, fact in enumerate(brief.facts):
        where = f"brief.facts[{i}]"
        if not fact.statement.strip():
            raise InvalidRequestError(f"{where}.statement", "required")
        _check_text(f"{where}.statement", fact.statement, _MAX_TEXT_CHARS)
        _check_text(f"{where}.value", fact.value, _MAX_VALUE_CHARS)
        if (fact.citation is None) == (fact.basis is None):
            raise InvalidRequestError(where, "give a citation (a confirmed fact) or a basis (an inferred one)")
        if fact.basis is not None:
            if not fact.basis.strip():
                raise InvalidRequestError(f"{where}.basis", "required for an inferred fact")
            _check_text(f"{where}.basis", fact.basis, _MAX_TEXT_CHARS)
        if fact.citation is not None and fact.citation.json_path is not None:
            _check_text(f"{where}.citation.json_path", fact.citation.json_path, _MAX_JSON_PATH_CHARS)
    for name, items in (("open_questions", brief.open_questions), ("risks", brief.risks)):
        for i, item in enumerate(items):
            _check_text(f"brief.{name}[{i}]", item, _MAX_TEXT_CHARS)
    for i, ref_id in enumerate(brief.artifacts):
        try:
            parse_ref_id(ref_id)
        except InvalidRequestError as exc:
            raise InvalidRequestError(f"brief.artifacts[{i}]", exc.message.split(": ", 1)[-1]) from None
    size = len(json.dumps(_brief_json(brief), ensure_ascii=False).encode("utf-8"))
    if size > _MAX_BRIEF_BYTES:
        raise InvalidRequestError("brief", f"{size} bytes exceed the maximum of {_MAX_BRIEF_BYTES}")
    return tokens


def _brief_json(brief: Brief) -> dict[str, Any]:
    return {
        "summary": brief.summary,
        "facts": [f.as_json() for f in brief.facts],
        "open_questions": list(brief.open_questions),
        "risks": list(brief.risks),
        "artifacts": list(brief.artifacts),
    }


def _fact_line(checked: CheckedFact) -> str:
    fact = checked.fact
    head = one_line(fact.statement) + (f": {one_line(fact.value)}" if fact.value.strip() else "")
    if checked.kind is FactKind.CONFIRMED:
        assert fact.citation is not None
        return f"- {head} [{one_line(fact.citation.label())}]"
    if checked.reason is not None:
        return f"- {head} (demoted, {checked.reason.value}: {one_line(checked.detail)})"
    return f"- {head} (basis: {one_line(fact.basis or '')})"


# -- the hop ---------------------------------------------------------------------------------------


async def build_hop(
    sources: HandoffSources,
    brief: Brief,
    *,
    session_id: str,
    counter: TokenCounter,
    max_tokens: int | None = None,
    child_session_id: str = "",
) -> Hop:
    """The hop summary of `brief` (see the module docstring). InvalidRequestError for a bad brief."""
    limit = validate(brief, max_tokens)
    checker = CitationChecker(sources)
    checked = [await checker.check(fact) for fact in brief.facts]
    artifacts: dict[str, str] = {}
    missing: list[str] = []
    for ref_id in dict.fromkeys(brief.artifacts):
        try:
            meta, _ = await checker.payload(ref_id)
        except (NotFoundError, PermissionDeniedError):
            missing.append(ref_id)
        else:
            artifacts[ref_id] = meta.session_id
    constraints = user_constraints(user_words(await sources.user_messages(_MAX_USER_MESSAGES)))
    record = {
        "kind": "agentmesh.handoff/v1",
        "session_id": session_id,
        "child_session_id": child_session_id,
        "brief": _brief_json(brief),
        "checked": [
            {"kind": c.kind.value, "reason": c.reason.value if c.reason else "", "detail": c.detail} for c in checked
        ],
        "user_constraints": [{"text": c.text, "message_index": c.index} for c in constraints],
        "missing_artifacts": missing,
    }
    record_ref = await sources.put_record(
        json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")
    )

    confirmed = [(i, _fact_line(c)) for i, c in enumerate(checked) if c.kind is FactKind.CONFIRMED]
    inferred = [(i, _fact_line(c)) for i, c in enumerate(checked) if c.kind is FactKind.INFERRED]
    layout = Layout(
        header=(
            f"{HOP_HEADER}{session_id}: the previous agent's brief. Confirmed facts were re-read "
            "from their citations; inferred ones were not checked."
        ),
        footer=f'Full record: read_payload(ref_id="{record_ref}")',
        summary=one_line(brief.summary),
        sections={
            "constraints": Section(
                "User constraints (verbatim, newest first):",
                [(i, f'- [#{c.index}] "{c.text}"') for i, c in enumerate(constraints)],
            ),
            "confirmed": Section("Confirmed facts [citation]:", confirmed),
            "inferred": Section("Inferred facts (not checked):", inferred),
            "questions": Section(
                "Open questions:", [(i, f"- {one_line(q)}") for i, q in enumerate(brief.open_questions) if q.strip()]
            ),
            "risks": Section("Risks:", [(i, f"- {one_line(r)}") for i, r in enumerate(brief.risks) if r.strip()]),
            "artifacts": Section("Artifacts (read_payload):", [(i, f"- {ref}") for i, ref in enumerate(artifacts)]),
        },
    )
    text = fit(layout, counter, limit)
    shown = {i for name in ("confirmed", "inferred") for i, _ in layout.sections[name].items}
    shown_constraints = [constraints[i].text for i, _ in layout.sections["constraints"].items]

    granted: tuple[str, ...] = ()
    if child_session_id:
        refs = {
            c.fact.citation.ref_id: c.owner for c in checked if c.owner and c.fact.citation and c.fact.citation.ref_id
        }
        refs |= artifacts
        refs[record_ref] = session_id
        await sources.grant(refs)
        granted = tuple(refs)
    return Hop(
        text=text,
        token_count=counter.count(text),
        facts=tuple(replace(c, shown=i in shown) for i, c in enumerate(checked)),
        record_ref_id=record_ref,
        user_constraints=tuple(shown_constraints),
        granted_ref_ids=granted,
        missing_artifacts=tuple(missing),
        omitted=layout.omitted,
        summary_clipped=layout.clipped,
    )
