"""Registry names of MCP tools (docs/architecture.md §16).

A server's tool `Get.Item-v2` mounted with prefix `shop` is `shop__get_item_v2`: lowercased, every
character outside [a-z0-9_] replaced by `_`. A name longer than 64 characters keeps its first 55 and
ends with `_` and 8 hex digits of sha256(original name), so two long names stay apart. The original
name is kept for the call. Two tools of one server mapping to one name is a collision, reported with
both names (an override `name` in the configuration resolves it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

MAX_NAME = 64
_HASH_CHARS = 8
_OTHER = re.compile(r"[^a-z0-9_]")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def local_part(tool: str, *, split_words: bool = False) -> str:
    """The tool's name in [a-z0-9_]: lowercased, anything else replaced by `_`; with `split_words`, a
    `_` first between the words of a camel-case name (`FindMovies` -> `find_movies`, not `findmovies`)."""
    if split_words:
        tool = _CAMEL.sub("_", tool)
    return _OTHER.sub("_", tool.lower())


def registry_name(prefix: str, tool: str, override: str | None = None, *, split_words: bool = False) -> str:
    """`<prefix>__<tool>` in [a-z0-9_], at most 64 characters (a hash of `tool` ends a shortened name).

    With an empty prefix (tools converted from OpenAI / BFCL definitions, `tool_svc.formats`, which also
    split camel-case words so DiscoverTools finds them) the name is the local part alone, `fn_` before it
    when it would not start with a letter. MCP names keep `split_words` off: their names are deployed."""
    local = override or local_part(tool, split_words=split_words)
    starts_with_letter = local[:1].isascii() and local[:1].isalpha()
    name = f"{prefix}__{local}" if prefix else local if starts_with_letter else f"fn_{local}"
    if len(name) <= MAX_NAME:
        return name
    suffix = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    return f"{name[: MAX_NAME - _HASH_CHARS - 1]}_{suffix}"


@dataclass(frozen=True)
class Collision:
    """Two of a server's tools (by their own names) that map to one registry name."""

    name: str
    first: str
    second: str

    def describe(self, server: str) -> str:
        return (
            f"MCP server {server}: tools {self.first!r} and {self.second!r} both map to {self.name}; "
            f"give one a name in tools.mcp_servers[{server}].tools.<tool>.name"
        )


def assign(
    prefix: str, tools: Iterable[str], overrides: Mapping[str, str | None]
) -> tuple[dict[str, str], list[Collision]]:
    """registry name -> original name for `tools`, and the collisions (neither tool of one is kept)."""
    taken: dict[str, str] = {}
    collided: dict[str, Collision] = {}
    for tool in tools:
        name = registry_name(prefix, tool, overrides.get(tool))
        if name in collided:
            continue
        if name in taken:
            collided[name] = Collision(name, taken.pop(name), tool)
            continue
        taken[name] = tool
    return taken, list(collided.values())
