"""Danger guard: destructive commands in fields marked `x-agentmesh-kind` are FATAL (docs/design.md §5).

Values are parsed, not grepped: shell with shlex (so `rm -r -f`, `rm -fr`, `--recursive --force`,
`sudo`, `bash -c`, `$(...)`, `find -exec` and pipelines are all seen as the commands they run), SQL with
sqlglot (a `TRUNCATE` inside a string literal is not a statement), Python with ast. What counts as
destructive is the policy file `policy/danger.yaml`, not code, parsed by `tool_svc.guard_policy`. The shell
lexing is `tool_svc.guard_shell`.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import shlex
from collections.abc import Sequence
from typing import Any

import sqlglot
from sqlglot import TokenType, exp
from sqlglot.errors import ParseError, TokenError

from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from tool_svc.call import CallState
from tool_svc.guard_policy import Finding, Policy, ShellRule, clip, glob_match, matches_any
from tool_svc.guard_shell import (
    ASSIGNMENT,
    command_name,
    option_flags,
    positional_args,
    split_commands,
    substitutions,
    tokenize,
)
from tool_svc.model import Outcome
from tool_svc.validation import marked_values


class DangerGuard:
    """Checks values by kind; `check(kind, value, write=...)` returns the first Finding or None."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or Policy.load()

    # -- entry points ------------------------------------------------------------------------------

    def check(self, kind: str, value: Any, *, write: bool = False) -> Finding | None:
        if isinstance(value, list):
            words = [str(v) for v in value]
            if kind == "shell":
                return self.check_argv(words)
            for word in words:
                found = self.check(kind, word, write=write)
                if found:
                    return found
            return None
        if not isinstance(value, str):
            return None
        if kind == "shell":
            return self.check_shell(value)
        if kind == "sql":
            return self.check_sql(value)
        if kind == "path":
            return self.check_path(value) if write else None
        if kind == "code":
            return self.check_code(value)
        return None

    def check_shell(self, text: str, depth: int = 0) -> Finding | None:
        policy = self.policy
        if depth > policy.max_depth:
            return Finding("shell_nesting", f"command nested deeper than {policy.max_depth} levels", clip(text))
        squeezed = re.sub(r"\s+", "", text)
        for rule_id, pattern, reason in policy.raw_patterns:
            if pattern.search(squeezed):
                return Finding(rule_id, reason, clip(text))
        for inner in substitutions(text):
            found = self.check_shell(inner, depth + 1)
            if found:
                return found
        commands = split_commands(tokenize(text))
        for index, (argv, redirects, separator) in enumerate(commands):
            for target in redirects:
                if matches_any(target, policy.protected_redirects):
                    return Finding("protected_redirect", f"redirects output onto {target}", clip(text))
            found = self._check_command(argv, depth, text)
            if found:
                return found
            if policy.pipe_to_shell and separator == "|" and index + 1 < len(commands):
                nxt = self._unwrap(commands[index + 1][0])
                reads_stdin = "-c" not in nxt[1:] and not positional_args(nxt[1:])
                if nxt and command_name(nxt[0]) in policy.shells and reads_stdin:
                    return Finding("pipe_to_shell", "pipes data into a shell, which cannot be inspected", clip(text))
        return None

    def check_argv(self, argv: Sequence[str]) -> Finding | None:
        return self._check_command(list(argv), 0, shlex.join(argv))

    # -- shell internals ---------------------------------------------------------------------------

    def _unwrap(self, argv: list[str]) -> list[str]:
        """Drops variable assignments and wrapper commands (sudo, env, xargs, timeout, ...)."""
        argv = list(argv)
        for _ in range(16):
            while argv and ASSIGNMENT.match(argv[0]):
                argv.pop(0)
            if not argv:
                return argv
            wrapper = self.policy.wrappers.get(command_name(argv[0]))
            if wrapper is None:
                return argv
            rest = argv[1:]
            i, skipped_positional = 0, 0
            while i < len(rest):
                word = rest[i]
                if word == "--":
                    i += 1
                    break
                if word.startswith("-") and len(word) > 1:
                    i += 2 if word in wrapper.value_options else 1
                    continue
                if ASSIGNMENT.match(word):
                    i += 1
                    continue
                if skipped_positional < wrapper.positional:
                    skipped_positional += 1
                    i += 1
                    continue
                break
            argv = rest[i:]
        return argv

    def _check_command(self, argv: list[str], depth: int, text: str) -> Finding | None:
        policy = self.policy
        argv = self._unwrap(argv)
        if not argv:
            return None
        name = command_name(argv[0])
        args = argv[1:]
        if name in policy.shells and "-c" in args:
            index = args.index("-c")
            if index + 1 < len(args):
                return self.check_shell(args[index + 1], depth + 1)
        if name in policy.python and "-c" in args:
            index = args.index("-c")
            if index + 1 < len(args):
                return self.check_code(args[index + 1], depth + 1)
        if name in policy.eval_commands and args:
            return self.check_shell(" ".join(args), depth + 1)
        remote = policy.remote.get(name)
        if remote is not None:
            i = 0
            while i < len(args) and args[i].startswith("-"):
                i += 2 if args[i] in remote.value_options else 1
            if i + 1 < len(args):
                found = self.check_shell(" ".join(args[i + 1 :]), depth + 1)
                if found:
                    return found
        if name == "find":
            for i, word in enumerate(args):
                if word in policy.find_exec:
                    inner = []
                    for token in args[i + 1 :]:
                        if token in (";", "\\;", "+"):  # `\\;` is find's own, escaped from the shell
                            break
                        inner.append(token)
                    found = self._check_command(inner, depth + 1, text)
                    if found:
                        return found
        for rule in policy.rules:
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in rule.commands) and self._rule_matches(rule, args):
                return Finding(f"shell.{rule.id}", rule.reason, clip(text))
        return None

    def _rule_matches(self, rule: ShellRule, args: list[str]) -> bool:
        flags = option_flags(args)
        positionals = positional_args(args)
        if rule.subcommand and (not positionals or positionals[0] != rule.subcommand):
            return False
        if any(not (group & flags) for group in rule.flags_all):
            return False
        if rule.flags_any and not (rule.flags_any & flags):
            return False
        if rule.args_any and not any(glob_match(arg, p) for arg in args for p in rule.args_any):
            return False
        return not rule.targets_any or any(matches_any(target, rule.targets_any) for target in positionals)

    # -- SQL ---------------------------------------------------------------------------------------

    def check_sql(self, text: str) -> Finding | None:
        policy = self.policy
        try:
            statements = sqlglot.parse(text, dialect=policy.sql_dialect or None)
        except (ParseError, TokenError, ValueError, RecursionError):
            return self._check_sql_tokens(text)
        for statement in statements:
            if statement is None:
                continue
            for node in statement.walk():
                found = self._check_sql_node(node, text)
                if found:
                    return found
            if isinstance(statement, exp.Command):
                # Statements sqlglot does not model are kept as raw commands: judge them by tokens.
                found = self._check_sql_tokens(statement.sql())
                if found:
                    return found
        return None

    def _check_sql_node(self, node: exp.Expr, text: str) -> Finding | None:
        deny, require_where = self.policy.sql_deny, self.policy.sql_require_where
        if isinstance(node, exp.Drop) and "drop" in deny:
            kind = node.args.get("kind") or "object"
            return Finding("sql.drop", f"DROP {kind} destroys it and its data", clip(text))
        if isinstance(node, exp.TruncateTable) and "truncate" in deny:
            return Finding("sql.truncate", "TRUNCATE deletes every row", clip(text))
        actions = node.args.get("actions") or () if isinstance(node, exp.Alter) else ()
        if "alter_drop" in deny and any(isinstance(action, exp.Drop) for action in actions):
            return Finding("sql.alter_drop", "ALTER ... DROP removes a column or constraint", clip(text))
        for kind, cls in (("delete", exp.Delete), ("update", exp.Update)):
            if kind in require_where and isinstance(node, cls):
                where = node.args.get("where")
                if where is None:
                    return Finding(
                        f"sql.{kind}_without_where", f"{kind.upper()} without WHERE hits every row", clip(text)
                    )
                if not any(True for _ in where.find_all(exp.Column)):
                    return Finding(
                        f"sql.{kind}_without_where",
                        f"{kind.upper()} with a WHERE that references no column hits every row",
                        clip(text),
                    )
        return None

    def _check_sql_tokens(self, text: str) -> Finding | None:
        # Unparseable SQL cannot be proven safe structurally; keywords (never string literals) decide.
        try:
            tokens = sqlglot.tokenize(text, dialect=self.policy.sql_dialect or None)
        except (TokenError, ValueError, RecursionError):
            words = re.findall(r"[A-Za-z_]+", re.sub(r"'[^']*'|\"[^\"]*\"", " ", text))
            upper = [w.upper() for w in words]
            if "DROP" in upper or "TRUNCATE" in upper:
                return Finding("sql.unparseable_destructive", "unparseable SQL with DROP/TRUNCATE", clip(text))
            return None
        types = [t.token_type for t in tokens]
        texts = [t.text.upper() for t in tokens]
        if TokenType.DROP in types and "drop" in self.policy.sql_deny:
            return Finding("sql.drop", "DROP destroys an object and its data", clip(text))
        if "TRUNCATE" in texts and any(t != TokenType.STRING for t in types):
            idx = texts.index("TRUNCATE")
            if types[idx] != TokenType.STRING and "truncate" in self.policy.sql_deny:
                return Finding("sql.truncate", "TRUNCATE deletes every row", clip(text))
        if TokenType.DELETE in types and TokenType.WHERE not in types and "delete" in self.policy.sql_require_where:
            return Finding("sql.delete_without_where", "DELETE without WHERE hits every row", clip(text))
        return None

    # -- paths -------------------------------------------------------------------------------------

    def check_path(self, text: str) -> Finding | None:
        if matches_any(text.strip(), self.policy.path_protected):
            return Finding("path.protected", f"writes to the protected path {text.strip()}", clip(text))
        return None

    # -- Python code -------------------------------------------------------------------------------

    def check_code(self, text: str, depth: int = 0) -> Finding | None:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None  # the sandbox reports the syntax error; nothing here can run
        policy = self.policy
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _dotted(node.func)
                if name in policy.code_shell_calls and node.args:
                    found = self._check_code_command(node.args[0], depth)
                    if found:
                        return found
                if name in policy.code_delete_calls and node.args:
                    target = _literal_str(node.args[0])
                    if target is not None and matches_any(target, policy.system_paths):
                        return Finding("code.recursive_delete", f"{name}({target!r}) deletes a system path", clip(text))
            if policy.code_fork_loop and isinstance(node, ast.While) and _always_true(node.test):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Call) and _dotted(inner.func) in ("os.fork", "os.forkpty"):
                        return Finding("code.fork_loop", "os.fork() in an endless loop (fork bomb)", clip(text))
        return None

    def _check_code_command(self, arg: ast.expr, depth: int) -> Finding | None:
        text = _literal_str(arg)
        if text is not None:
            return self.check_shell(text, depth + 1)
        if isinstance(arg, ast.List | ast.Tuple):
            words = [_literal_str(e) for e in arg.elts]
            if words and all(w is not None for w in words):
                return self._check_command([w for w in words if w is not None], depth + 1, " ".join(map(str, words)))
        return None


def _dotted(node: ast.expr) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _literal_str(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        # f-strings: the literal parts are what we can see; placeholders become a neutral word.
        return "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)  # type: ignore[misc]
    return None


def _always_true(test: ast.expr) -> bool:
    return isinstance(test, ast.Constant) and bool(test.value)


def danger_error(tool: str, path: str, kind: str, finding: Finding) -> AgentmeshError:
    """DANGEROUS_OPERATION (FATAL) for a finding in the field at `path`."""
    return AgentmeshError(
        ErrorCode.DANGEROUS_OPERATION,
        f"{tool}: {path} ({kind}) is destructive: {finding.reason}; the call was not run",
        violations=[
            Violation(path=path, rule=finding.rule, expected="a non-destructive command", actual=finding.snippet)
        ],
        metadata={"rule": finding.rule, "kind": kind},
    )


class GuardArguments:
    """Pipeline step: DANGEROUS_OPERATION (FATAL) when a marked field carries a destructive command."""

    def __init__(self, guard: DangerGuard) -> None:
        self.guard = guard

    async def __call__(self, call: CallState) -> Outcome | None:
        if call.tool is None or not call.tool.marked:
            return None
        spec = call.spec
        for path, kind, value in marked_values(spec.input_schema, call.arguments):
            finding = self.guard.check(kind, value, write=not spec.read_only)
            if finding is not None:
                return danger_error(spec.name, path, kind, finding)
        return None
