"""The Redis Lua scripts live as package data, `<package>/lua/<name>.lua` (issue 47), and nowhere else.

- No Python string literal of the packages holds Lua (a `redis.call(` in a literal is a script that did not
  move to a file).
- Every script constant (a module-level name ending in `_LUA` or `_LUA_FN`, or assigned from
  `package_lua(...)`) is a non-empty string in which the text of one of the files stands, piece by piece in
  order (a file's `{NAME}` placeholders are filled in Python), with no placeholder left unfilled.
- Every `.lua` file is used by some constant: no orphan that the code stopped loading.
- `package_lua` reads a file as it is, and a name it does not have fails at once.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from agentmesh.lua_source import package_lua

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agentmesh", "context_svc", "tool_svc", "provider_svc", "dispatcher_svc")
CONSTANT_NAME = re.compile(r"^_?[A-Z0-9_]*_LUA(_FN)?$")
PLACEHOLDER = re.compile(r"\n?\{[A-Z][A-Z_]*\}\n?")
"""A `{NAME}` token the composing module replaces (with the newlines around it, when it has a line)."""


def _py_files() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")) if "v1" not in p.relative_to(ROOT).parts]


def _lua_files() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("lua/*.lua"))]


def _calls_package_lua(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "package_lua" for n in ast.walk(node)
    )


def script_constants() -> dict[str, str]:
    """`module.NAME` -> value of every script constant, found in the source (no module is imported for the search)."""
    found: dict[str, str] = {}
    for path in _py_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = []
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                if isinstance(target, ast.Name) and (CONSTANT_NAME.match(target.id) or _calls_package_lua(node.value)):
                    names.append(target.id)
        if names:
            module_name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            module = importlib.import_module(module_name)
            for name in names:
                found[f"{module_name}.{name}"] = getattr(module, name)
    return found


def _pieces(text: str) -> list[str]:
    return [piece for piece in PLACEHOLDER.split(text) if piece]


def _holds(value: str, source: str) -> bool:
    """Whether the pieces of `source` (split at its placeholders) stand in `value` in order."""
    at = 0
    for piece in _pieces(source):
        at = value.find(piece, at)
        if at < 0:
            return False
        at += len(piece)
    return True


@pytest.fixture(scope="module")
def constants() -> dict[str, str]:
    return script_constants()


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in _lua_files()}


def test_no_lua_is_left_in_python_literals() -> None:
    inline = []
    for path in _py_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if "redis.call(" in node.value or "redis.pcall(" in node.value:
                inline.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not inline, f"Lua in a Python string: move it to <package>/lua/<name>.lua: {inline}"


def test_the_search_finds_the_scripts(constants: dict[str, str], sources: dict[str, str]) -> None:
    # A few known ones, so a broken search cannot pass the tests below vacuously.
    for name in (
        "agentmesh.store.TOKEN_BUCKET_LUA",
        "dispatcher_svc.task_scripts.ACQUIRE_LUA",
        "context_svc.session_scripts.CREATE_APPEND_LOAD_LUA",
        "tool_svc.shared_breaker.ADMIT_LUA",
        "provider_svc.quota_scripts.RESERVE_LUA",
    ):
        assert name in constants
    assert len(constants) >= 40 and len(sources) >= 40, (len(constants), len(sources))


def test_every_script_constant_comes_from_a_file(constants: dict[str, str], sources: dict[str, str]) -> None:
    for name, value in constants.items():
        assert isinstance(value, str) and value.strip(), name
        assert "redis.call(" in value or "local function" in value, f"{name} does not look like Lua"
        assert not PLACEHOLDER.search(value), f"{name} keeps an unfilled placeholder"
        assert any(_holds(value, source) for source in sources.values()), f"{name} is not the text of a .lua file"


def test_every_lua_file_is_loaded_by_a_constant(constants: dict[str, str], sources: dict[str, str]) -> None:
    orphans = [path for path, source in sources.items() if not any(_holds(v, source) for v in constants.values())]
    assert not orphans, f"no script constant uses these files: {orphans}"


def test_a_composed_script_is_its_fragments_then_its_file(constants: dict[str, str]) -> None:
    def lua(name: str) -> str:
        return package_lua("context_svc", name)

    assert constants["context_svc.session_scripts.APPEND_LOAD_LUA"] == (
        lua("seen_fn") + lua("append_fn") + lua("load_fn") + lua("append_load")
    )
    admit = constants["tool_svc.shared_breaker.ADMIT_LUA"]
    assert admit.count(package_lua("tool_svc", "now_ms")) == 1
    acquire = constants["dispatcher_svc.task_scripts.ACQUIRE_LUA"]
    assert "local names = {'task_id', 'agent_id', " in acquire  # RECORD_FIELDS as a Lua list
    assert "redis.call('PEXPIRE', KEYS[1], 3456000000)" in constants["provider_svc.quota_scripts.SETTLE_LUA"]


def test_package_lua_reads_the_file_as_it_is() -> None:
    path = ROOT / "agentmesh" / "lua" / "token_bucket.lua"
    assert package_lua("agentmesh", "token_bucket") == path.read_bytes().decode("utf-8")
    with pytest.raises(FileNotFoundError):
        package_lua("agentmesh", "no_such_script")
