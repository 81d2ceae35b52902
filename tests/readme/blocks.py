"""The shell blocks of a Markdown file, in order, with their skip markers.

A block is a fenced code block whose info string is `sh`, `bash`, `shell` or `console` (fences may be
indented, as in a list item: the indentation is removed from every line). In a `console` block only
the lines starting with `$ ` are commands. A block is skipped when the nearest non-blank line above
its fence is `<!-- readme-test: skip (reason) -->`; the README allows that for the Docker, Jaeger and
Kubernetes blocks only (tests/readme/test_readme.py checks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SHELL_LANGS = frozenset({"sh", "bash", "shell", "console"})
SKIP_MARKER = re.compile(r"^<!--\s*readme-test:\s*skip\s*\((?P<reason>[^)]*)\)\s*-->$")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")


@dataclass(frozen=True)
class Block:
    """One shell block: where it starts (1-based line of the fence), its language, its commands."""

    line: int
    lang: str
    text: str
    skip: str | None = None
    """The skip marker's reason, None when the block runs."""


def parse_blocks(markdown: str) -> list[Block]:
    """Every shell block of the document, in order (skipped ones included, with their reason)."""
    lines = markdown.splitlines()
    blocks: list[Block] = []
    index = 0
    previous = ""
    while index < len(lines):
        line = lines[index]
        opening = _FENCE.match(line)
        if opening is None:
            if line.strip():
                previous = line.strip()
            index += 1
            continue
        indent, fence, info = opening.group("indent"), opening.group("fence"), opening.group("info").lower()
        body: list[str] = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            text = lines[index]
            body.append(text[len(indent) :] if text.startswith(indent) else text.lstrip())
            index += 1
        start = index - len(body)
        index += 1  # the closing fence
        if info in SHELL_LANGS:
            if info == "console":
                body = [item[2:] for item in body if item.startswith("$ ")]
            marker = SKIP_MARKER.match(previous)
            blocks.append(Block(start, info, "\n".join(body) + "\n", marker.group("reason") if marker else None))
        previous = fence
    return blocks
