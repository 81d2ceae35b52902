"""JSON text of tool calls: compact dumping, lenient reading and repair of cut-short objects.

Kept apart because every other module needs it: the policies and fault injection dump arguments
with `_dump`, fixing and fault injection read arguments back with `_repair_json` (which closes an
object the malformed-JSON fault or a length limit cut short), filling reads example values with
`_from_json_text`.
"""

from __future__ import annotations

import json
import re
from typing import Any


def _dump(args: Any) -> str:
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


def _from_json_text(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text.strip("'\"")


def _repair_json(text: str) -> dict[str, Any] | None:
    """The JSON object `text` holds, repaired when it was cut short (see `_close_cut_object`) or
    written with single quotes; None when it is not (the start of) a JSON object."""
    for candidate in (text, text.replace("'", '"')):
        try:
            value = json.loads(candidate)
        except ValueError:
            closed = _close_cut_object(candidate)
            if closed is None:
                continue
            try:
                value = json.loads(closed)
            except ValueError:
                continue
        if isinstance(value, dict):
            return value
    return None


_CLOSER = {"{": "}", "[": "]"}
# A string from its opening quote: each complete character or escape, then the closing quote if any.
_STRING = re.compile(r'"(?:[^"\\]|\\u[0-9A-Fa-f]{4}|\\[^u])*("?)')
_CUT_ESCAPE = re.compile(r"\\(?:u[0-9A-Fa-f]{0,3})?")
_SCALAR = re.compile(r"[A-Za-z0-9+\-.]+")


def _close_cut_object(text: str) -> str | None:
    """`text`, the start of a JSON object, cut back to its last complete value and closed.

    A tiny scanner keeps the open brackets on a stack and remembers the last point where closing
    them gives valid JSON: after an opening bracket and after each complete value. At the end of the
    text it cuts back there, which drops a dangling key (`,"ke`, `,"key"`, `,"key":`), a trailing
    comma, and a number or literal the text ends in (`tr`, `1e`, `25` that may have been `250`); a
    string value cut short is closed instead (without a half escape). A comma right after an opening
    bracket (the scripted fault turns `{}` into `{,"`) or right before a closing one is dropped.
    None when `text` is not such a start: another value, a syntax error, or text after the object.
    """
    out: list[str] = []  # the tokens read; a comma is written only once a value follows it
    stack: list[str] = []  # the open brackets
    expect = "value"  # value | key | colon | next (a comma or a closing bracket)
    comma = False
    safe = (0, "")  # (tokens, closing brackets) of the longest prefix that closes cleanly
    i = 0
    while i < len(text):
        ch, end = text[i], i + 1
        if ch.isspace():
            i = end
            continue
        if out and not stack:
            return None  # more text after the object
        if ch in _CLOSER and expect == "value" and (stack or ch == "{"):
            stack.append(ch)
            token, then = ch, "key" if ch == "{" else "value"
        elif not stack:
            return None  # not an object
        elif ch == _CLOSER[stack[-1]] and (expect in ("next", "key") or (expect == "value" and ch == "]")):
            stack.pop()
            token, then, comma = ch, "next", False
        elif ch == ",":
            if expect == "next":
                expect, comma = ("key" if stack[-1] == "{" else "value"), True
            elif comma or out[-1][-1] not in _CLOSER:
                return None  # two commas, or a comma where a key or value belongs
            i = end
            continue
        elif ch == ":" and expect == "colon":
            token, then = ch, "value"
        elif ch == '"' and expect in ("key", "value"):
            string = _STRING.match(text, i)
            assert string is not None  # it matches at every quote
            token, end = string.group(), string.end()
            if string.group(1):
                then = "colon" if expect == "key" else "next"
            elif not (end == len(text) or _CUT_ESCAPE.fullmatch(text, end)):
                return None  # a bad escape
            elif expect == "key":
                break  # a dangling key: dropped
            else:
                token, then, end = token + '"', "next", len(text)  # a value cut short: closed
        elif expect == "value" and (scalar := _SCALAR.match(text, i)) is not None:
            token, then, end = scalar.group(), "next", scalar.end()
            if end == len(text) and token not in ("true", "false", "null"):
                break  # a number or literal that may be cut short (250 -> 25): dropped
            try:
                json.loads(token)
            except ValueError:
                return None
        else:
            return None
        out.append(("," if comma else "") + token)
        expect, comma, i = then, False, end
        if then == "next" or token in _CLOSER:
            safe = (len(out), "".join(_CLOSER[b] for b in reversed(stack)))
    if not stack:
        return "".join(out) or None
    tokens, closing = safe
    return "".join(out[:tokens]) + closing
