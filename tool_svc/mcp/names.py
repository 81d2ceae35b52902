"""Registry names of MCP tools (docs/design.md §16).

A server's tool `Get.Item-v2` mounted with prefix `shop` is `shop__get_item_v2`: lowercased, every
character outside [a-z0-9_] replaced by `_`. A name longer than 64 characters keeps its first 55 and
ends with `_` and 8 hex digits of sha256(original name), so two long names stay apart. The original
name is kept for the call (the mapping is agentmesh.tool_names', shared with handoff tools). Two
tools of one server mapping to one name is a collision, reported with both names (an override `name`
in the configuration resolves it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agentmesh.tool_names import MAX_NAME, local_part, mapped_name

__all__ = ["MAX_NAME", "Collision", "assign", "local_part", "registry_name"]


def registry_name(prefix: str, tool: str, override: str | None = None, *, split_words: bool = False) -> str:
    """`<prefix>__<tool>` in [a-z0-9_], at most 64 characters (agentmesh.tool_names.mapped_name). With
    an empty prefix (tools converted from OpenAI / BFCL definitions, `tool_svc.formats`, which also split
    camel-case words so DiscoverTools finds them) the local part alone. MCP names keep `split_words` off:
    their names are deployed."""
    return mapped_name(prefix, tool, sep="__", override=override, split_words=split_words)


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
