"""The danger guard's policy: `policy/danger.yaml` parsed into rules, and the path-aware globs they match with.

What counts as destructive is data, not code (docs/design.md §5); `tool_svc.guard` applies it to values.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["DEFAULT_POLICY", "Finding", "Policy", "ShellRule", "Wrapper", "clip", "glob_match", "matches_any"]

DEFAULT_POLICY = Path(__file__).resolve().parent / "policy" / "danger.yaml"


@dataclass(frozen=True)
class Finding:
    """Why a value is destructive."""

    rule: str
    reason: str
    snippet: str


@dataclass(frozen=True)
class ShellRule:
    id: str
    commands: tuple[str, ...]
    reason: str
    flags_all: tuple[frozenset[str], ...] = ()
    flags_any: frozenset[str] = frozenset()
    args_any: tuple[str, ...] = ()
    targets_any: tuple[str, ...] = ()
    subcommand: str = ""


@dataclass(frozen=True)
class Wrapper:
    value_options: frozenset[str] = frozenset()
    positional: int = 0


@dataclass
class Policy:
    """The parsed danger policy."""

    wrappers: dict[str, Wrapper] = field(default_factory=dict)
    shells: frozenset[str] = frozenset()
    python: frozenset[str] = frozenset()
    remote: dict[str, Wrapper] = field(default_factory=dict)
    eval_commands: frozenset[str] = frozenset()
    find_exec: frozenset[str] = frozenset()
    protected_redirects: tuple[str, ...] = ()
    system_paths: tuple[str, ...] = ()
    rules: tuple[ShellRule, ...] = ()
    pipe_to_shell: bool = True
    raw_patterns: tuple[tuple[str, re.Pattern[str], str], ...] = ()
    max_depth: int = 5
    sql_dialect: str = ""
    sql_deny: frozenset[str] = frozenset()
    sql_require_where: frozenset[str] = frozenset()
    path_protected: tuple[str, ...] = ()
    code_shell_calls: frozenset[str] = frozenset()
    code_delete_calls: frozenset[str] = frozenset()
    code_fork_loop: bool = True

    @classmethod
    def load(cls, path: Path = DEFAULT_POLICY) -> Policy:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return cls.from_mapping(data)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Policy:
        shell = data.get("shell", {})
        sql = data.get("sql", {})
        code = data.get("code", {})

        def wrapper(spec: Mapping[str, Any] | None) -> Wrapper:
            spec = spec or {}
            return Wrapper(frozenset(spec.get("value_options", ())), int(spec.get("positional", 0)))

        rules = []
        for raw in shell.get("rules", ()):
            rules.append(
                ShellRule(
                    id=raw["id"],
                    commands=tuple(raw["commands"]),
                    reason=raw["reason"],
                    flags_all=tuple(frozenset(group) for group in raw.get("flags_all", ())),
                    flags_any=frozenset(raw.get("flags_any", ())),
                    args_any=tuple(raw.get("args_any", ())),
                    targets_any=tuple(raw.get("targets_any", ())),
                    subcommand=raw.get("subcommand", ""),
                )
            )
        return cls(
            wrappers={name: wrapper(spec) for name, spec in (shell.get("wrappers") or {}).items()},
            shells=frozenset(shell.get("shells", ())),
            python=frozenset(shell.get("python", ())),
            remote={name: wrapper(spec) for name, spec in (shell.get("remote") or {}).items()},
            eval_commands=frozenset(shell.get("eval", ())),
            find_exec=frozenset(shell.get("find_exec", ())),
            protected_redirects=tuple(shell.get("protected_redirects", ())),
            system_paths=tuple(shell.get("system_paths", ())),
            rules=tuple(rules),
            pipe_to_shell=bool(shell.get("pipe_to_shell", True)),
            raw_patterns=tuple(
                (p["id"], re.compile(p["regex"], re.IGNORECASE), p["reason"]) for p in shell.get("raw_patterns", ())
            ),
            max_depth=int(shell.get("max_depth", 5)),
            sql_dialect=sql.get("dialect", "") or "",
            sql_deny=frozenset(sql.get("deny", ())),
            sql_require_where=frozenset(sql.get("require_where", ())),
            path_protected=tuple((data.get("path") or {}).get("protected", ())),
            code_shell_calls=frozenset(code.get("shell_calls", ())),
            code_delete_calls=frozenset(code.get("recursive_delete_calls", ())),
            code_fork_loop=bool(code.get("fork_loop", True)),
        )


def clip(text: str, limit: int = 160) -> str:
    """`text` on one line, cut to `limit` characters: the snippet a Finding shows."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _normalize_path(value: str) -> str:
    if value in ("/", "~", ".", ".."):
        return value
    stripped = value.rstrip("/") or "/"
    if stripped.startswith("/"):
        return posixpath.normpath(stripped).replace("//", "/")
    return stripped


_GLOB_CACHE: dict[str, re.Pattern[str]] = {}


def _glob(pattern: str) -> re.Pattern[str]:
    """A path-aware glob: `*` stays within one path segment, `**` crosses segments, `[*]` is a literal star."""
    cached = _GLOB_CACHE.get(pattern)
    if cached is not None:
        return cached
    out, i, n = [], 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(ch))
            else:
                out.append("[" + pattern[i + 1 : end].replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    compiled = re.compile("".join(out) + r"\Z")
    _GLOB_CACHE[pattern] = compiled
    return compiled


def glob_match(value: str, pattern: str) -> bool:
    return _glob(pattern).match(value) is not None


def matches_any(value: str, patterns: Sequence[str]) -> bool:
    candidates = {value, _normalize_path(value)}
    return any(glob_match(c, p) for c in candidates for p in patterns)
