"""The check of a hop's confirmed facts (issue 44): a citation must resolve and hold the stated value.

`CitationChecker` resolves each citation (a payload `ref_id`, optionally an RFC 9535 JSONPath or a
1-based line range, or a message of the parent session) through the hop's `HandoffSources`, reading and
parsing each payload once per hop, and confirms the fact when the cited content contains its value
(`holds`: normalized, a whole token, or another spelling of the same single fact); otherwise the fact is
demoted to inferred with a typed reason (`Demotion`). A model's bad citation demotes its fact, it never
fails the hop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import jsonpath_rfc9535

from agentmesh.errors import InvalidRequestError, NotFoundError, PermissionDeniedError, echo
from agentmesh.payloads import StoredPayload, check_selectors, parse_ref_id, select
from context_svc.facts.facts import find_facts, kept, occurs
from context_svc.handoff_model import CheckedFact, Citation, Demotion, Fact, FactKind, HandoffSources

__all__ = ["CitationChecker", "holds", "normalize"]

_MAX_CITED_CHARS = 256 * 1024
"""A citation points at a part: a larger one (a whole big payload) is MALFORMED, asked to narrow it."""
_MAX_SPELLING_SCAN_CHARS = 16 * 1024

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
class CitationChecker:
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
