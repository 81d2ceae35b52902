"""Templates of workflow nodes: `{{ input.x }}`, `{{ nodes.<id>.output.y[0] }}`, `{{ item.z }}`.

Deliberately not a template language: jinja2 is not a dependency of agentmesh, and a template here
only has to place values, so each `{{ ... }}` holds one reference, a root (`input`,
`nodes.<id>.output`, or `item` inside a parallel step) followed by `.name`, `[index]` or `["key"]`
selectors: a singular JSON path (RFC 9535's normalized paths are what errors show). There are no
calls, filters, attribute lookups on Python objects or loops, so nothing in a template can reach
past the JSON it is given (the sandbox is the grammar). A string that is exactly one reference takes
the value with its JSON type (a list stays a list); inside longer text a value is written as text
(strings as they are, anything else as compact JSON).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_RENDERED_CHARS", "Ref", "TemplateSyntaxError", "json_strings", "parse_ref", "refs_in", "render"]

_TAG = re.compile(r"\{\{(.*?)\}\}", re.S)
_NAME = r"[A-Za-z_][A-Za-z0-9_-]*"
_SELECTOR = re.compile(rf"\.({_NAME})|\[(\d{{1,9}})\]|\[\"([^\"\\]{{0,256}})\"\]")
_ROOT = re.compile(rf"({_NAME})")
MAX_RENDERED_CHARS = 1_000_000
"""A rendered string, at most: values placed in text must not make a goal of any size."""


class TemplateSyntaxError(ValueError):
    """A template that does not parse; the message says where."""


@dataclass(frozen=True)
class Ref:
    """One reference: `root` is input, item or nodes (then `node` is the id); `path` follows
    `input`, `item` or `nodes.<id>.output`."""

    root: str
    node: str
    path: tuple[str | int, ...]

    @property
    def json_path(self) -> str:
        """The RFC 9535 normalized path of the reference, from the template's scope."""
        head = ["$", f"['{self.root}']"] + ([f"['{self.node}']", "['output']"] if self.root == "nodes" else [])
        return "".join(head + [f"[{p}]" if isinstance(p, int) else f"['{p}']" for p in self.path])


def parse_ref(text: str) -> Ref:
    """The reference inside one `{{ ... }}`; TemplateSyntaxError saying what is wrong."""
    source = text.strip()
    root = _ROOT.match(source)
    if root is None:
        raise TemplateSyntaxError(f"{{{{ {source} }}}}: a reference starts with input, nodes.<id>.output or item")
    position = root.end()
    selectors: list[str | int] = []
    while position < len(source):
        match = _SELECTOR.match(source, position)
        if match is None:
            raise TemplateSyntaxError(
                f"{{{{ {source} }}}}: unexpected {source[position : position + 20]!r}: only .name, [index] and "
                '["key"] may follow (no calls, filters or expressions)'
            )
        name, index, key = match.groups()
        selectors.append(int(index) if index is not None else (name if name is not None else key))
        position = match.end()
    head = root.group(1)
    if head in ("input", "item"):
        return Ref(head, "", tuple(selectors))
    if head == "nodes":
        if len(selectors) < 2 or not isinstance(selectors[0], str) or selectors[1] != "output":
            raise TemplateSyntaxError(f"{{{{ {source} }}}}: a node's value is nodes.<id>.output[...]")
        return Ref("nodes", str(selectors[0]), tuple(selectors[2:]))
    raise TemplateSyntaxError(f"{{{{ {source} }}}}: unknown name {head!r}: templates see only input, nodes and item")


def json_strings(value: Any) -> Iterator[str]:
    """Every string leaf of a JSON value (the templates of a tool's arguments)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from json_strings(item)


def refs_in(template: str) -> list[Ref]:
    """The references of one template string, in order; TemplateSyntaxError on the first bad one."""
    if "{{" in _TAG.sub("", template):
        raise TemplateSyntaxError("an unclosed {{ (every {{ needs its }})")
    return [parse_ref(match.group(1)) for match in _TAG.finditer(template)]


def _lookup(ref: Ref, scope: Mapping[str, Any]) -> Any:
    if ref.root == "nodes":
        nodes = scope.get("nodes", {})
        if ref.node not in nodes:
            raise KeyError(f"{ref.json_path}: node {ref.node} has no output")
        value = nodes[ref.node]
    elif ref.root in scope:
        value = scope[ref.root]
    else:
        raise KeyError(f"{ref.json_path}: there is no {ref.root} here")
    for selector in ref.path:
        if isinstance(selector, int):
            found = isinstance(value, list) and selector < len(value)
        else:
            found = isinstance(value, Mapping) and selector in value
        if not found:
            raise KeyError(f"{ref.json_path}: no such value")
        value = value[selector]
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def render(value: Any, scope: Mapping[str, Any]) -> Any:
    """`value` (a template string or JSON holding them) with every reference replaced.

    `scope` holds `input`, `nodes` (id -> that node's output) and, in a parallel step, `item`.
    KeyError naming the JSON path of a reference that has no value; ValueError past MAX_RENDERED_CHARS."""
    if isinstance(value, Mapping):
        return {key: render(item, scope) for key, item in value.items()}
    if isinstance(value, list):
        return [render(item, scope) for item in value]
    if not isinstance(value, str) or "{{" not in value:
        return value
    whole = _TAG.fullmatch(value.strip())
    if whole is not None and "{{" not in whole.group(1):
        return _lookup(parse_ref(whole.group(1)), scope)
    refs_in(value)  # the syntax of every tag before any lookup
    out = _TAG.sub(lambda match: _text(_lookup(parse_ref(match.group(1)), scope)), value)
    if len(out) > MAX_RENDERED_CHARS:
        raise ValueError(f"the rendered text has {len(out)} characters, over {MAX_RENDERED_CHARS}")
    return out
