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

The Redis side (reads, the record, the grant) is behind `HandoffSources` (handoff_sources.py); the
text's layout and cap are in handoff_text.py.
Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import jsonpath_rfc9535

from agentmesh.errors import InvalidRequestError, NotFoundError, PermissionDeniedError, echo
from agentmesh.payloads import StoredPayload, check_selectors, parse_ref_id, select
from context_svc.facts.facts import find_facts, kept, occurs
from context_svc.handoff_text import HOP_HEADER, Layout, Section, fit, one_line, user_constraints, user_words
from context_svc.tokens import TokenCounter

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "MAX_TOKENS_RANGE",
    "Brief",
    "CheckedFact",
    "Citation",
    "Demotion",
    "Fact",
    "FactKind",
    "HandoffSources",
    "Hop",
    "build_hop",
    "holds",
    "normalize",
    "user_constraints",
]

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
_MAX_CITED_CHARS = 256 * 1024
"""A citation points at a part: a larger one (a whole big payload) is MALFORMED, asked to narrow it."""
_MAX_SPELLING_SCAN_CHARS = 16 * 1024
_MAX_USER_MESSAGES = 200
"""The newest user messages read for constraints: bounded work whatever the session's length."""


class FactKind(enum.Enum):
    """A fact's final kind."""

    CONFIRMED = "confirmed"
    INFERRED = "inferred"


class Demotion(enum.Enum):
    """Why a fact given as confirmed is inferred after the check."""

    CITATION_NOT_FOUND = "citation_not_found"
    VALUE_NOT_IN_SOURCE = "value_not_in_source"
    NO_ACCESS = "no_access"
    MALFORMED = "malformed"


@dataclass(frozen=True)
class Citation:
    """Where a confirmed fact was read: a payload (`ref_id`) or a message of the parent session."""

    ref_id: str | None = None
    message_index: int | None = None
    json_path: str | None = None
    line_range: tuple[int, int] | None = None

    def label(self) -> str:
        where = f"message #{self.message_index}" if self.ref_id is None else self.ref_id
        if self.json_path is not None:
            return f"{where} {self.json_path}"
        if self.line_range is not None:
            return f"{where} L{self.line_range[0]}-{self.line_range[1]}"
        return where

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.ref_id is not None:
            data["ref_id"] = self.ref_id
        if self.message_index is not None:
            data["message_index"] = self.message_index
        if self.json_path is not None:
            data["json_path"] = self.json_path
        if self.line_range is not None:
            data["line_range"] = list(self.line_range)
        return data


@dataclass(frozen=True)
class Fact:
    """A fact of the brief: confirmed when it has a citation, inferred when it has a basis."""

    statement: str
    value: str = ""
    citation: Citation | None = None
    basis: str | None = None

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"statement": self.statement, "value": self.value}
        if self.citation is not None:
            data["citation"] = self.citation.as_json()
        if self.basis is not None:
            data["basis"] = self.basis
        return data


@dataclass(frozen=True)
class Brief:
    """The brief as the model wrote it in its transfer call."""

    summary: str = ""
    facts: tuple[Fact, ...] = ()
    open_questions: tuple[str, ...] = ()
    risks: tuple[str, ...] = ()
    artifacts: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckedFact:
    """A fact after the check."""

    fact: Fact
    kind: FactKind
    reason: Demotion | None = None
    detail: str = ""
    shown: bool = True
    owner: str = ""
    """For a confirmed payload citation: the session the payload is stored in (what a grant points at)."""


@dataclass(frozen=True)
class Hop:
    """What BuildHandoff answers."""

    text: str
    token_count: int
    facts: tuple[CheckedFact, ...]
    record_ref_id: str
    user_constraints: tuple[str, ...]
    granted_ref_ids: tuple[str, ...] = ()
    missing_artifacts: tuple[str, ...] = ()
    omitted: int = 0
    summary_clipped: bool = False

    @property
    def confirmed(self) -> int:
        return sum(1 for f in self.facts if f.kind is FactKind.CONFIRMED)

    @property
    def inferred(self) -> int:
        return len(self.facts) - self.confirmed

    @property
    def demoted(self) -> int:
        return sum(1 for f in self.facts if f.reason is not None)


class HandoffSources(Protocol):
    """What a hop reads and writes, with the parent session's access rules applied by the implementation."""

    async def payload(self, ref_id: str) -> tuple[StoredPayload, bytes]:
        """A payload the parent session may read (its own, or one granted to it). NotFoundError when
        unknown, expired or not readable; PermissionDeniedError when it exists but is refused."""
        ...

    async def message(self, index: int) -> str:
        """The content of message `index` of the parent session's log; NotFoundError past its end."""
        ...

    async def user_messages(self, limit: int) -> list[tuple[int, str]]:
        """(index, content) of the parent session's newest `limit` user messages, newest first."""
        ...

    async def put_record(self, content: bytes) -> str:
        """Stores the record as a JSON payload of the parent session; its ref id."""
        ...

    async def grant(self, refs: dict[str, str]) -> None:
        """Lets the child session read each ref id (mapped to the session the payload is stored in)."""
        ...


# -- the value check -----------------------------------------------------------------------------

# A thousands separator between digits ("2,259", "2_259", "2'259", "2 259" with a no-break or thin
# space); a plain space is not one ("80 443" stays two numbers).
_THOUSANDS = re.compile(r"(?<=\d)[,_'\u00a0\u2009\u202f](?=\d{3}(?!\d))")
_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    """Whitespace runs as one space, thousands separators removed, case folded (Latin and other cased
    scripts; CJK is unchanged)."""
    return _SPACE.sub(" ", _THOUSANDS.sub("", text)).strip().casefold()


def holds(value: str, content: str) -> bool:
    """Whether `content` contains `value`: normalized (`normalize`), as a whole token ("12" is not in
    "120"). A value that is one fact (facts.py) also holds in another spelling of the same value
    ("three thousand dollars" and "$3,000") when the cited part is at most 16 KiB; other numbers in
    words are not recognised."""
    wanted = normalize(value)
    if wanted and occurs(wanted, normalize(content)):
        return True
    if len(content) > _MAX_SPELLING_SCAN_CHARS:
        return False  # finding every fact of a large text takes seconds: normalized text only
    stripped = value.strip()
    facts = list(find_facts(stripped))
    return len(facts) == 1 and facts[0].text == stripped and kept(facts[0], content)


def _flatten(value: Any) -> str:
    """The scalars (and keys) of a JSON value as lines: strings unescaped, so the value check reads
    what the JSON says, not its escapes. Iterative: nesting depth costs no recursion."""
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                stack.append(child)
                stack.append(str(key))
        elif isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, str):
            out.append(item)
        else:
            out.append(json.dumps(item))
    return "\n".join(out)


@dataclass
class _Checker:
    """Checks facts against their sources; each payload is read once per hop."""

    sources: HandoffSources
    payloads: dict[str, tuple[StoredPayload, bytes] | Exception] = field(default_factory=dict)
    parsed: dict[str, Any] = field(default_factory=dict)
    """Each JSON payload parsed once per hop, however many facts cite it by JSONPath."""

    async def payload(self, ref_id: str) -> tuple[StoredPayload, bytes]:
        found = self.payloads.get(ref_id)
        if found is None:
            try:
                found = await self.sources.payload(ref_id)
            except (NotFoundError, PermissionDeniedError) as exc:
                found = exc
            self.payloads[ref_id] = found
        if isinstance(found, Exception):
            raise found
        return found

    async def check(self, fact: Fact) -> CheckedFact:
        citation = fact.citation
        if citation is None:
            return CheckedFact(fact, FactKind.INFERRED)
        problem = _malformed(fact, citation)
        if problem:
            return _demoted(fact, Demotion.MALFORMED, problem)
        try:
            owner, content = await self._cited(citation)
        except NotFoundError as exc:
            return _demoted(fact, Demotion.CITATION_NOT_FOUND, exc.message)
        except PermissionDeniedError as exc:
            return _demoted(fact, Demotion.NO_ACCESS, exc.message)
        except InvalidRequestError as exc:
            # Lines past the end are a citation of nothing; other selector errors (JSONPath on text).
            reason = Demotion.CITATION_NOT_FOUND if exc.field == "line_range.start" else Demotion.MALFORMED
            return _demoted(fact, reason, exc.message)
        if len(content) > _MAX_CITED_CHARS:
            return _demoted(
                fact,
                Demotion.MALFORMED,
                f"{citation.label()} is {len(content):,} characters, over {_MAX_CITED_CHARS:,}: "
                "cite the part that holds the value (a narrower json_path or line_range)",
            )
        if not holds(fact.value, content):
            return _demoted(
                fact, Demotion.VALUE_NOT_IN_SOURCE, f"{citation.label()} does not contain {echo(fact.value)!r}"
            )
        return CheckedFact(fact, FactKind.CONFIRMED, owner=owner)

    async def _cited(self, citation: Citation) -> tuple[str, str]:
        """(the session storing the source, the cited content as text)."""
        if citation.ref_id is None:
            assert citation.message_index is not None
            text = await self.sources.message(citation.message_index)
            if citation.line_range is not None:
                text = select(
                    text.encode("utf-8"), "", json_path=None, line_range=citation.line_range, byte_range=None
                )[0].decode("utf-8", "replace")
            return "", text
        meta, content = await self.payload(citation.ref_id)
        if citation.json_path is not None:
            values = [
                node.value for node in jsonpath_rfc9535.compile(citation.json_path).find(self._json(meta, content))
            ]
            if not values:
                raise NotFoundError(f"{citation.json_path} matches nothing in {meta.ref_id}")
            return meta.session_id, _flatten(values)
        selected, _ = select(content, meta.ref_id, json_path=None, line_range=citation.line_range, byte_range=None)
        return meta.session_id, selected.decode("utf-8", "replace")

    def _json(self, meta: StoredPayload, content: bytes) -> Any:
        """The payload's JSON value (parsed once); InvalidRequestError (json_path) when it is not JSON."""
        if meta.ref_id not in self.parsed:
            try:
                self.parsed[meta.ref_id] = json.loads(content.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                raise InvalidRequestError(
                    "json_path", f"payload {meta.ref_id} is not JSON ({type(exc).__name__}); cite it by line_range"
                ) from exc
        return self.parsed[meta.ref_id]


def _malformed(fact: Fact, citation: Citation) -> str:
    """Why the citation cannot be resolved as written ("" when it can)."""
    if not fact.value.strip():
        return "a confirmed fact needs the value its citation holds"
    if (citation.ref_id is None) == (citation.message_index is None):
        return "a citation names a payload ref_id or a message_index"
    if citation.json_path is not None and citation.line_range is not None:
        return "give json_path or line_range, not both"
    if citation.message_index is not None:
        if citation.message_index < 0:
            return f"message_index must be >= 0, got {citation.message_index}"
        if citation.json_path is not None:
            return "json_path applies to payloads; cite a message whole or by line_range"
    try:
        if citation.ref_id is not None:
            parse_ref_id(citation.ref_id)
        check_selectors(citation.json_path, citation.line_range, None)
    except InvalidRequestError as exc:
        return exc.message
    return ""


def _demoted(fact: Fact, reason: Demotion, detail: str) -> CheckedFact:
    return CheckedFact(fact, FactKind.INFERRED, reason=reason, detail=detail)


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
    checker = _Checker(sources)
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
