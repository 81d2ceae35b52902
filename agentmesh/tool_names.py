"""Names the model sees for tools that are not in the registry's own namespace: MCP tools
(`<prefix>__<tool>`, tool_svc/mcp) and handoff tools (`transfer_to_<agent>`, `ask_<agent>`,
dispatcher_svc/handoffs.py). One mapping for both, so the two never disagree on what a valid name is.

A name is lowercased and every character outside [a-z0-9_] replaced by `_`. A name longer than 64
characters keeps its first 55 and ends with `_` and 8 hex digits of sha256(original name), so two long
names stay apart. Callers report two originals mapping to one name as a collision.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_NAME", "local_part", "mapped_name"]

MAX_NAME = 64
_HASH_CHARS = 8
_OTHER = re.compile(r"[^a-z0-9_]")


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def local_part(name: str, *, split_words: bool = False) -> str:
    """`name` in [a-z0-9_]: lowercased, anything else replaced by `_`; with `split_words`, a `_` first
    between the words of a camel-case name (`FindMovies` -> `find_movies`, not `findmovies`)."""
    if split_words:
        name = _CAMEL.sub("_", name)
    return _OTHER.sub("_", name.lower())


def mapped_name(
    prefix: str, name: str, *, sep: str = "__", override: str | None = None, split_words: bool = False
) -> str:
    """`<prefix><sep><name>` in [a-z0-9_], at most 64 characters (a hash of `name` ends a shortened one).

    With an empty prefix (tools converted from OpenAI / BFCL definitions, `tool_svc.formats`) the name is
    the local part alone, `fn_` before it when it would not start with a letter."""
    local = override or local_part(name, split_words=split_words)
    if prefix:
        full = f"{prefix}{sep}{local}"
    else:
        full = local if local[:1].isascii() and local[:1].isalpha() else f"fn_{local}"
    if len(full) <= MAX_NAME:
        return full
    suffix = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    return f"{full[: MAX_NAME - _HASH_CHARS - 1]}_{suffix}"
