"""Selecting part of a payload's content: RFC 9535 JSONPath, a line range or a byte range (docs/design.md §4).

Pure: no store, no I/O. `agentmesh.payloads.PayloadStore.read` selects after reading; tool_svc runs `select` in a
worker process. A bad selector, or content a selector cannot apply to, is an InvalidRequestError naming it.
"""

from __future__ import annotations

import json
from functools import lru_cache

import jsonpath_rfc9535
from jsonpath_rfc9535.exceptions import JSONPathError

from agentmesh.errors import InvalidRequestError

__all__ = ["Range", "check_selectors", "select", "select_bytes", "select_json", "select_lines"]

Range = tuple[int, int]


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
