"""Session-scoped payloads: large content stored once in Redis, and digests that fit in a prompt.

Used by tool_svc (offload at the source) and context_svc (anything large that still arrives, and `GetPayload`).
docs/architecture.md §4:

- content-addressed within a session: `am:payload:{<session>}:<sha256>` with a TTL, so the same bytes are stored
  once per session and one session can never read another's (the session is part of the key, never a field a
  caller could point elsewhere) unless a hop granted it that one ref (payload_grants.py);
- `put` is one MULTI/EXEC (all or nothing) and refuses content over `max_bytes` before writing;
- `read` selects by JSONPath (RFC 9535, the `jsonpath-rfc9535` library), 1-based inclusive line range or 0-based
  half-open byte range; content that is not UTF-8 is returned as raw bytes;
- a digest says what it kept and what it cut: structured content keeps the first N non-empty records (empty/null
  ones are filtered first), text keeps error/warning/goal lines and neighbours.

Besides the payload keys, `put` keeps a set of the session's payload digests at `am:sess:{<session>}:payloads`
(same hash slot) so DeleteSession can remove them without SCAN.

Domain code: no grpc, no protobuf.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Final

import jsonpath_rfc9535
from jsonpath_rfc9535.exceptions import JSONPathError

from agentmesh.errors import InvalidRequestError, NotFoundError, PayloadTooLargeError
from agentmesh.payload_grants import granted_fields
from agentmesh.payload_value import (
    MEDIA_JSON,
    MEDIA_TEXT,
    OFFLOAD_THRESHOLD_BYTES,
    StoredPayload,
    is_json_media_type,
    parse_ref_id,
    ref_id_for,
)
from agentmesh.payload_value import (
    clip as _clip,
)
from agentmesh.store import Store

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TTL_S",
    "MEDIA_JSON",
    "MEDIA_TEXT",
    "OFFLOAD_THRESHOLD_BYTES",
    "PayloadStore",
    "StoredPayload",
    "digest",
    "is_json_media_type",
    "parse_ref_id",
    "ref_id_for",
    "select",
    "structured_digest",
    "text_digest",
]

DEFAULT_TTL_S: Final = 86400
DEFAULT_MAX_BYTES: Final = 16 * 1024 * 1024

_MAX_MEDIA_TYPE_LEN = 255
PAYLOAD_INDEX_PART: Final = "payloads"  # the part of the session's keys (am:sess:{<session>}:payloads) listing them

# KEYS: the payload hash, the session's index (one hash tag). ARGV: content, media type, size, expire_at,
# ttl s, sha256. Each put sets now + ttl on the index: never earlier than a previous payload's expiry.
_PUT_LUA: Final = """redis.call('HSET', KEYS[1], 'content', ARGV[1], 'media_type', ARGV[2], 'size', ARGV[3],
  'expire_at', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('SADD', KEYS[2], ARGV[6])
return redis.call('EXPIRE', KEYS[2], ARGV[5])"""
Range = tuple[int, int]


def _check_media_type(media_type: str) -> str:
    if not media_type or len(media_type) > _MAX_MEDIA_TYPE_LEN or not media_type.isprintable():
        raise InvalidRequestError("media_type", f"must be a printable MIME type of 1-{_MAX_MEDIA_TYPE_LEN} characters")
    return media_type


class PayloadStore:
    """Session-scoped, content-addressed payloads in Redis (see the module docstring)."""

    def __init__(self, store: Store, *, ttl_s: int = DEFAULT_TTL_S, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s}")
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        self.store = store
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes

    async def put(self, session_id: str, content: bytes, media_type: str) -> StoredPayload:
        """Stores `content` for `session_id`; the same content again refreshes its TTL.

        PayloadTooLargeError above `max_bytes` (nothing is written). InvalidRequestError for a bad
        session id or media type. UnavailableError when Redis is down.
        """
        size = len(content)
        if size > self.max_bytes:
            raise PayloadTooLargeError(
                f"payload of {size} bytes exceeds the maximum of {self.max_bytes} bytes",
                metadata={"size_bytes": str(size), "max_bytes": str(self.max_bytes)},
            )
        _check_media_type(media_type)
        sha = hashlib.sha256(content).hexdigest()
        key = self.store.keys.payload(session_id, sha)
        index = self.store.keys.session(session_id, PAYLOAD_INDEX_PART)
        expire_at = time.time() + self.ttl_s
        # One script: content and metadata appear together or not at all (and on replicas first: durable).
        async with self.store.guard("put payload"):
            await self.store.script("payload_put", _PUT_LUA, durable=True)(
                keys=[key, index], args=[content, media_type, size, repr(expire_at), self.ttl_s, sha]
            )
        return StoredPayload(
            ref_id=ref_id_for(sha),
            session_id=session_id,
            size_bytes=size,
            media_type=media_type,
            sha256=sha,
            expire_at=expire_at,
        )

    async def get(self, session_id: str, ref_id: str) -> tuple[StoredPayload, bytes]:
        """The payload and its whole content. NotFoundError (metadata ref_id) when it is unknown,
        expired or another session's; InvalidRequestError for a malformed ref id."""
        sha = parse_ref_id(ref_id)
        key = self.store.keys.payload(session_id, sha)
        # The client is created with decode_responses=False: keys and values are bytes.
        fields: Mapping[Any, Any] = await self.store.call("get payload", self.store.redis.hgetall(key))
        content = fields.get(b"content")
        if content is None:  # not its own: a ref a hop granted it (payload_grants.py), stored in another session
            session_id, fields = await granted_fields(self.store, session_id, sha, ref_id)
            content = fields.get(b"content")
        if content is None:
            # One message for all three cases: telling them apart would confirm another session's refs.
            raise NotFoundError(
                f"payload {ref_id} not found in session {session_id} (unknown, expired or another session's)",
                metadata={"ref_id": ref_id, "session_id": session_id},
            )
        meta = StoredPayload(
            ref_id=ref_id,
            session_id=session_id,
            size_bytes=int(fields.get(b"size", b"0") or 0) or len(content),
            media_type=fields.get(b"media_type", b"application/octet-stream").decode("utf-8", "replace"),
            sha256=sha,
            expire_at=float(fields.get(b"expire_at", b"0") or 0),
        )
        return meta, content

    async def read(
        self,
        session_id: str,
        ref_id: str,
        *,
        json_path: str | None = None,
        line_range: tuple[int, int] | None = None,
        byte_range: tuple[int, int] | None = None,
    ) -> tuple[StoredPayload, bytes, bool]:
        """(meta, selected content, partial). At most one selector; none reads the whole payload.

        json_path: RFC 9535 JSONPath; the content is the JSON array of the matched values.
        line_range: 1-based inclusive (start, end); end beyond the last line is clipped.
        byte_range: 0-based half-open (start, end); end beyond the size is clipped.
        InvalidRequestError (naming the selector) for a bad selector or content it cannot apply to.
        """
        check_selectors(json_path, line_range, byte_range)  # before the Redis round trip
        meta, content = await self.get(session_id, ref_id)
        return meta, *select(content, ref_id, json_path=json_path, line_range=line_range, byte_range=byte_range)

    async def list_shas(self, session_id: str) -> list[str]:
        """sha256 digests of the session's payloads (some may have expired)."""
        index = self.store.keys.session(session_id, PAYLOAD_INDEX_PART)
        members: Iterable[Any] = await self.store.call("list payloads", self.store.redis.smembers(index))
        return sorted(m.decode("ascii", "replace") if isinstance(m, bytes) else str(m) for m in members)


# --------------------------------------------------------------------------------------------
# Selection
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _compile_json_path(json_path: str) -> jsonpath_rfc9535.JSONPathQuery:
    if not json_path.strip():
        raise InvalidRequestError("json_path", 'must not be empty (e.g. "$.items[10:20]")')
    try:
        return jsonpath_rfc9535.compile(json_path)
    except JSONPathError as exc:
        raise InvalidRequestError("json_path", f"not a valid JSONPath (RFC 9535): {exc}") from exc


def check_selectors(json_path: str | None, line_range: Range | None, byte_range: Range | None) -> None:
    """InvalidRequestError (naming the selector) unless at most one is given and it is well formed."""
    selectors = (("json_path", json_path), ("line_range", line_range), ("byte_range", byte_range))
    given = [name for name, selector in selectors if selector is not None]
    if len(given) > 1:
        raise InvalidRequestError("selector", f"give at most one of json_path, line_range, byte_range, got {given}")
    if json_path is not None:
        _compile_json_path(json_path)
    if line_range is not None:
        _check_range("line_range", line_range, first=1)
    if byte_range is not None:
        _check_range("byte_range", byte_range, first=0)


def select(
    content: bytes, ref_id: str, *, json_path: str | None, line_range: Range | None, byte_range: Range | None
) -> tuple[bytes, bool]:
    """(selection, partial) by the one selector given (`check_selectors`); tool_svc runs it in a worker process."""
    if json_path is not None:
        return select_json(content, _compile_json_path(json_path), json_path, ref_id)
    if line_range is not None:
        return select_lines(content, line_range)
    return (content, False) if byte_range is None else select_bytes(content, byte_range)


def _check_range(field: str, bounds: tuple[int, int], *, first: int) -> None:
    start, end = bounds
    if start < first:
        raise InvalidRequestError(f"{field}.start", f"must be >= {first}, got {start}")
    # Lines are inclusive (end >= start), bytes half-open (end > start).
    if (first == 1 and end < start) or (first == 0 and end <= start):
        relation = ">=" if first == 1 else ">"
        raise InvalidRequestError(f"{field}.end", f"must be {relation} start ({start}), got {end}")


def select_json(
    content: bytes, query: jsonpath_rfc9535.JSONPathQuery, json_path: str, ref_id: str
) -> tuple[bytes, bool]:
    """The JSON array of values `query` matches in `content`, and whether that is partial."""
    try:
        value = json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidRequestError(
            "json_path",
            f"payload {ref_id} is not JSON ({type(exc).__name__}); read it with line_range or byte_range",
            metadata={"ref_id": ref_id},
        ) from exc
    nodes = query.find(value)
    values = [node.value for node in nodes]
    whole = len(nodes) == 1 and nodes[0].path() == "$"
    return json.dumps(values, ensure_ascii=False).encode("utf-8"), not whole


def select_lines(content: bytes, line_range: tuple[int, int]) -> tuple[bytes, bool]:
    """Lines start..end (1-based, inclusive) of `content`, bytes as stored (any encoding)."""
    start, end = line_range
    # bytes.splitlines splits on \n, \r and \r\n only, so non-UTF-8 content is never decoded.
    lines = content.splitlines(keepends=True)
    if start > len(lines):
        raise InvalidRequestError("line_range.start", f"payload has {len(lines)} lines, got start {start}")
    end = min(end, len(lines))
    return b"".join(lines[start - 1 : end]), not (start == 1 and end == len(lines))


def select_bytes(content: bytes, byte_range: tuple[int, int]) -> tuple[bytes, bool]:
    """Bytes start..end (0-based, half-open) of `content`."""
    start, end = byte_range
    if start >= len(content):
        raise InvalidRequestError("byte_range.start", f"payload has {len(content)} bytes, got start {start}")
    end = min(end, len(content))
    return content[start:end], not (start == 0 and end == len(content))


# --------------------------------------------------------------------------------------------
# Digests
# --------------------------------------------------------------------------------------------

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
