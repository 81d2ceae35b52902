"""Digests of a payload that fit in a prompt, saying what they kept and what they cut (docs/design.md §4).

Pure: no store, no I/O. Structured content (JSON) keeps the first N non-empty records (empty/null ones are
filtered first); text keeps error/warning/goal lines and their neighbours; bytes that are not UTF-8 are flagged.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentmesh.payload_value import clip as _clip
from agentmesh.payload_value import is_json_media_type

__all__ = ["digest", "structured_digest", "text_digest"]

_MAX_LINE_CHARS = 240
_MAX_FIELDS = 20
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def digest(content: bytes, media_type: str, *, goal: str = "", max_chars: int = 1500) -> str:
    """A digest of `content` for a prompt: structured for JSON, text otherwise; says what was kept
    and cut. Never raises on content: non-UTF-8 bytes are flagged and shown replaced."""
    text, bad = _decode(content)
    if bad:
        note = (
            f"note: content is not valid UTF-8 ({bad} undecodable bytes of {len(content)}, shown as U+FFFD); "
            "read exact bytes with byte_range"
        )
        if _looks_binary(content, bad):
            return f"binary content: {len(content)} bytes, {bad} not UTF-8; not shown. {note}"
        return note + "\n" + text_digest(text, goal=goal, max_chars=max(200, max_chars - len(note) - 1))
    if is_json_media_type(media_type) or text.lstrip()[:1] in ("{", "["):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # nested past the parser's limit: show it as text
            if is_json_media_type(media_type):
                note = f"note: declared {media_type} but not parseable JSON; shown as text"
                return note + "\n" + text_digest(text, goal=goal, max_chars=max(200, max_chars - len(note) - 1))
        else:
            return structured_digest(value, max_chars=max_chars)
    return text_digest(text, goal=goal, max_chars=max_chars)


def _decode(content: bytes) -> tuple[str, int]:
    """The text and how many bytes were not UTF-8 (replaced by U+FFFD)."""
    try:
        return content.decode("utf-8"), 0
    except UnicodeDecodeError:
        text = content.decode("utf-8", errors="replace")
        # Each replacement char stands for at least one bad byte; a close lower bound is enough here.
        return text, max(1, text.count("\ufffd") - content.decode("utf-8", errors="ignore").count("\ufffd"))


def _looks_binary(content: bytes, bad: int) -> bool:
    sample = content[:4096]
    return b"\x00" in sample or bad > len(content) // 10


def _is_empty(value: Any) -> bool:
    """None, "", [], {} or a container whose values are all empty."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, Mapping):
        return all(_is_empty(v) for v in value.values())
    if isinstance(value, list):
        return all(_is_empty(v) for v in value)
    return False


def _path_join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    text = str(key)
    if _IDENT.fullmatch(text):
        return f"{path}.{text}"
    return f"{path}[{json.dumps(text, ensure_ascii=False)}]"


def _find_records(value: Any, path: str = "$", depth: int = 0) -> tuple[str, list[Any]] | None:
    """The largest list in `value` (the list itself, or inside objects up to depth 3)."""
    if isinstance(value, list):
        return path, value
    if not isinstance(value, Mapping) or depth >= 3:
        return None
    best: tuple[str, list[Any]] | None = None
    for key, child in value.items():
        found = _find_records(child, _path_join(path, key), depth + 1)
        if found is not None and (best is None or len(found[1]) > len(best[1])):
            best = found
    return best


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _fields(records: Sequence[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for record in records:
        if isinstance(record, Mapping):
            for key in record:
                seen.setdefault(str(key), None)
    return list(seen)


def structured_digest(value: Any, *, max_records: int = 10, max_chars: int = 1500) -> str:
    """Digest of JSON `value`: empty/null records dropped first, then the first `max_records`, with
    "total 286, shown 10, 41 empty filtered, fields: ..." and how to read what was cut."""
    found = _find_records(value)
    if found is None:
        body = _compact(value)
        kind = "object" if isinstance(value, Mapping) else type(value).__name__
        keys = f", fields: {', '.join(map(str, list(value)[:_MAX_FIELDS]))}" if isinstance(value, Mapping) else ""
        if len(body) <= max_chars - 40:
            return f"JSON {kind}{keys}\n{body}"
        return f"JSON {kind}{keys}; cut: {len(body)} chars, shown {max_chars // 2}\n{_clip(body, max_chars // 2)}"
    path, records = found
    total = len(records)
    kept = [(i, r) for i, r in enumerate(records) if not _is_empty(r)]
    empty = total - len(kept)
    names = _fields([r for _, r in kept])
    more = f" (+{len(names) - _MAX_FIELDS} more)" if len(names) > _MAX_FIELDS else ""
    fields = ", ".join(names[:_MAX_FIELDS]) + more
    context = ""
    if isinstance(value, Mapping):
        # Scalars beside the list (total, page, next_cursor...) often matter as much as the rows.
        scalars = [f"{k}={_compact(v)}" for k, v in value.items() if not isinstance(v, (list, Mapping))]
        if scalars:
            context = "\nother fields: " + _clip(", ".join(scalars), 300)

    def render(shown: int) -> str:
        head = f"JSON records at {path}: total {total}, shown {shown}, {empty} empty filtered, fields: {fields or '-'}"
        lines = [head + context]
        lines += [f"[{i}] {_clip(_compact(r), _MAX_LINE_CHARS)}" for i, r in kept[:shown]]
        rest = kept[shown:]
        if rest:
            first = rest[0][0]
            lines.append(
                f"cut: {len(rest)} more non-empty records ([{first}]..[{rest[-1][0]}]); "
                f'read them with json_path "{path}[{first}:{first + max_records}]"'
            )
        elif empty:
            lines.append(f"cut: only the {empty} empty/null records")
        return "\n".join(lines)

    shown = min(max_records, len(kept))
    text = render(shown)
    while shown > 1 and len(text) > max_chars:
        shown -= 1
        text = render(shown)
    return text if len(text) <= max_chars else _clip(text, max_chars)


# Keywords are found with str.find (a scan at memchr speed), not with a regex alternation that
# Python tries at every position: a 1 MB log is digested in milliseconds. Whole words, except CJK.
_ERROR_UPPER = ("ERR", "CRITICAL", "CRIT", "EMERG", "ALERT", "SEVERE")
_ERROR_WORDS = ("error", "fatal", "panic", "exception", "traceback", "failed", "failure", "oomkilled",
                "crashloopbackoff", "segfault")  # fmt: skip
_ERROR_CJK = ("错误", "失败", "异常", "报错", "崩溃")
_WARN_WORDS = ("warn", "warning")
_WARN_CJK = ("警告",)
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{2,}|[0-9][A-Za-z0-9_.-]{2,}")
_CJK_RUN_RE = re.compile(r"[\u4e00-\u9fff]{2,}")
_DIGITS_RE = re.compile(r"\d+")
_STOPWORDS = frozenset(
    {
        *("the", "and", "for", "with", "from", "that", "this", "what", "why", "how", "when", "where", "which"),
        *("into", "about", "over", "after", "before", "check", "find", "show", "give", "tell", "please"),
        *("there", "their", "them", "they", "have", "has", "had", "was", "were", "are", "been", "any", "all"),
        *("some", "can", "could", "should", "would", "will", "not"),
    }
)
_SCORE_ERROR, _SCORE_WARN, _SCORE_GOAL = 3, 2, 1


def _goal_keywords(goal: str) -> tuple[list[str], list[str]]:
    """(words, CJK bigrams) of the goal. Words match at a word start ("out" does not match
    "checkout"; "payments" matches "payment"); Chinese has no spaces, so its character bigrams
    match anywhere, as DiscoverTools does."""
    words = {w.lower().strip(".-") for w in _WORD_RE.findall(goal)}
    words = {w[:-1] if len(w) >= 5 and w.endswith("s") else w for w in words if len(w) >= 3 and w not in _STOPWORDS}
    bigrams = {run[i : i + 2] for run in _CJK_RUN_RE.findall(goal) for i in range(len(run) - 1)}
    return sorted(words), sorted(bigrams)


def _is_word_char(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch == "_")


def _lines_with(
    text: str, keywords: Iterable[str], starts: Sequence[int], *, word_start: bool, word_end: bool
) -> set[int]:
    """Numbers (0-based) of the lines of `text` (line i begins at starts[i]) holding a keyword."""
    found: set[int] = set()
    last = len(starts) - 2
    for keyword in keywords:
        i = text.find(keyword)
        while i != -1:
            end = i + len(keyword)
            line = bisect.bisect_right(starts, i) - 1
            if (not word_start or i == 0 or not _is_word_char(text[i - 1])) and (
                not word_end or end == len(text) or not _is_word_char(text[end])
            ):
                found.add(line)
                # One hit per line is enough: go on from the next line.
                i = text.find(keyword, starts[line + 1]) if line < last else -1
            else:
                i = text.find(keyword, i + 1)
    return found


def text_digest(text: str, *, goal: str = "", max_chars: int = 1500) -> str:
    """Digest of text such as a log: error and warning lines, lines with goal keywords, and their
    neighbours (identical messages shown once with a count), then what was cut."""
    lines = text.splitlines()
    n = len(lines)
    size = len(text.encode("utf-8", "replace"))
    if len(text) <= max_chars:
        return f"text: {n} lines, {size} bytes, shown whole\n{text}"
    joined = "\n".join(lines)
    lower = joined.lower()
    starts = list(itertools.accumulate((len(line) + 1 for line in lines), initial=0))
    words, bigrams = _goal_keywords(goal)
    errors = _lines_with(joined, _ERROR_UPPER, starts, word_start=True, word_end=True)
    errors |= _lines_with(lower, _ERROR_WORDS, starts, word_start=True, word_end=True)
    errors |= _lines_with(joined, _ERROR_CJK, starts, word_start=False, word_end=False)
    warnings = _lines_with(lower, _WARN_WORDS, starts, word_start=True, word_end=True)
    warnings |= _lines_with(joined, _WARN_CJK, starts, word_start=False, word_end=False)
    warnings -= errors
    relevant = _lines_with(lower, words, starts, word_start=True, word_end=False)
    relevant |= _lines_with(joined, bigrams, starts, word_start=False, word_end=False)
    relevant -= errors | warnings
    scores = {i: _SCORE_ERROR for i in errors} | {i: _SCORE_WARN for i in warnings}
    scores |= {i: _SCORE_GOAL for i in relevant}
    # Identical messages (digits ignored) are one group: a line repeated 500 times is shown once.
    groups: dict[tuple[int, str], list[int]] = {}
    for i in sorted(scores):
        groups.setdefault((scores[i], _DIGITS_RE.sub("#", lines[i]).strip()), []).append(i)
    ranked = sorted(groups.items(), key=lambda item: (-item[0][0], item[1][0]))
    counts = {_SCORE_ERROR: len(errors), _SCORE_WARN: len(warnings), _SCORE_GOAL: len(relevant)}

    chosen: dict[int, str] = {}
    budget = max_chars - 260  # header and footer

    def line_text(i: int, repeats: list[int] | None = None) -> str:
        note = f" (x{len(repeats)}, last L{repeats[-1] + 1})" if repeats and len(repeats) > 1 else ""
        return f"L{i + 1}{note}: {_clip(lines[i], _MAX_LINE_CHARS)}"

    def used() -> int:
        return sum(len(t) + 1 for t in chosen.values())

    def add(i: int, repeats: list[int] | None = None) -> bool:
        if i in chosen or not 0 <= i < n:
            return True
        rendered = line_text(i, repeats)
        if used() + len(rendered) + 1 > budget:
            return False
        chosen[i] = rendered
        return True

    shown_groups = 0
    for (kind, _), indexes in ranked:
        first = indexes[0]
        if not add(first, indexes):
            break
        shown_groups += 1
        if len(indexes) > 1:
            # The last occurrence too: two errors that differ only in numbers are both shown.
            add(indexes[-1])
        # Neighbours give the context of an error or a match (the request before, the stack after).
        if kind >= _SCORE_WARN or len(chosen) < 12:
            add(first - 1)
            add(first + 1)
    # The first and last lines say what the text is and where it ended, when there is room.
    add(0)
    add(n - 1)

    out: list[str] = []
    previous = -1
    for i in sorted(chosen):
        if i > previous + 1:
            out.append(f"... {i - previous - 1} lines cut ...")
        out.append(chosen[i])
        previous = i
    if previous < n - 1:
        out.append(f"... {n - 1 - previous} lines cut ...")
    shown_lines = len(chosen)
    head = (
        f"text: {n} lines, {size} bytes; kept {shown_lines} lines "
        f"({counts[_SCORE_ERROR]} error, {counts[_SCORE_WARN]} warning, {counts[_SCORE_GOAL]} goal-matching lines "
        f"in the text, identical ones shown once, with neighbours); cut {n - shown_lines} lines"
    )
    footer = []
    missing = len(ranked) - shown_groups
    if missing > 0:
        footer.append(f"cut: {missing} more distinct error/warning/goal lines did not fit")
    footer.append("read more with line_range (e.g. the lines around an L-number above)")
    result = "\n".join([head, *out, *footer])
    return result if len(result) <= max_chars else _clip(result, max_chars)
