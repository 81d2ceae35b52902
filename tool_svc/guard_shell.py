"""Shell parsing for the danger guard (`tool_svc.guard`): words, simple commands, flags, substitutions.

Lexing only, no judgement: shlex splits a value into words and operators (so `rm -r -f`, `rm -fr` and
`--recursive --force` are all seen as flags of `rm`), `split_commands` cuts the words into simple
commands at `;`, `&`, `|`, parentheses and newlines, and `substitutions` finds the bodies of `$(...)`
and backticks. What counts as destructive is decided by `DangerGuard` from the policy file.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator, Sequence

_SEPARATORS = frozenset(";&|()\n")
_REDIRECT_CHARS = frozenset("<>")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


_OPERATOR_CHARS = ";&|()<>\n"
_WORD_OFFSET = 0xF0000
"""A quoted or escaped operator character is lexed as a private-use stand-in (plane 15), so shlex keeps it
in its word instead of cutting the command there."""


def _protect_quoted_operators(text: str) -> str:
    """`text` with each operator character that is escaped or quoted replaced by its stand-in."""
    out: list[str] = []
    in_single = in_double = False
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and not in_single and i + 1 < n:
            nxt = text[i + 1]
            out.append(ch + (chr(_WORD_OFFSET + ord(nxt)) if nxt in _OPERATOR_CHARS else nxt))
            i += 2
            continue
        if ch == "'" and not in_double:
            in_single = not in_single
        elif ch == '"' and not in_single:
            in_double = not in_double
        elif (in_single or in_double) and ch in _OPERATOR_CHARS:
            ch = chr(_WORD_OFFSET + ord(ch))
        out.append(ch)
        i += 1
    return "".join(out)


def _restore(token: str) -> str:
    """A token with its stand-ins back as the characters they stood for; a word made only of operator
    characters (find's `\\;`) keeps a leading backslash, so `split_commands` never takes it for one."""
    restored = "".join(
        chr(ord(c) - _WORD_OFFSET) if ord(c) >= _WORD_OFFSET + 1 and ord(c) < _WORD_OFFSET + 128 else c for c in token
    )
    if restored != token and set(restored) <= set(_OPERATOR_CHARS):
        return "\\" + restored
    return restored


def tokenize(text: str) -> list[str]:
    protected = _protect_quoted_operators(text)
    for suffix in ("", '"', "'"):
        lexer = shlex.shlex(protected + suffix, posix=True, punctuation_chars=_OPERATOR_CHARS)
        lexer.whitespace = " \t\r"
        lexer.whitespace_split = True
        lexer.commenters = ""
        try:
            return [_restore(token) for token in lexer]
        except ValueError:
            continue
    # Still unbalanced (e.g. mixed quotes): plain words are the best view left, and still see `rm -rf`.
    return text.replace(";", " ; ").replace("|", " | ").replace("&", " & ").split()


def substitutions(text: str) -> Iterator[str]:
    """Bodies of `$(...)` and backticks outside single quotes (they run even inside double quotes)."""
    i, n = 0, len(text)
    in_single = in_double = False
    while i < n:
        ch = text[i]
        if ch == "\\" and not in_single:
            i += 2
            continue
        if ch == "'" and not in_double:
            in_single = not in_single
        elif ch == '"' and not in_single:
            in_double = not in_double
        elif not in_single and ch == "$" and i + 1 < n and text[i + 1] == "(":
            depth, j = 1, i + 2
            while j < n and depth:
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                j += 1
            yield text[i + 2 : j - 1]
            i = j
            continue
        elif not in_single and ch == "`":
            end = text.find("`", i + 1)
            if end == -1:
                yield text[i + 1 :]
                return
            yield text[i + 1 : end]
            i = end + 1
            continue
        i += 1


def split_commands(tokens: list[str]) -> list[tuple[list[str], list[str], str]]:
    """Simple commands as (argv, redirect targets, the separator that followed)."""
    commands: list[tuple[list[str], list[str], str]] = []
    argv: list[str] = []
    redirects: list[str] = []
    expect_target = False
    for token in tokens:
        if token and set(token) <= _SEPARATORS:
            commands.append((argv, redirects, token))
            argv, redirects, expect_target = [], [], False
        elif token and set(token) <= _SEPARATORS | _REDIRECT_CHARS and set(token) & _REDIRECT_CHARS:
            expect_target = True
        elif expect_target:
            redirects.append(token)
            expect_target = False
        else:
            argv.append(token)
    commands.append((argv, redirects, ""))
    return commands


def option_flags(args: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("--"):
            found.add(arg.split("=", 1)[0])
        elif arg.startswith("-") and len(arg) > 1:
            found.update(arg[1:])
    return found


def positional_args(args: Sequence[str]) -> list[str]:
    out: list[str] = []
    options_done = False
    for arg in args:
        if not options_done and arg == "--":
            options_done = True
        elif options_done or not arg.startswith("-") or arg == "-":
            out.append(arg)
    return out


def command_name(word: str) -> str:
    return posixpath.basename(word.strip("\\"))
