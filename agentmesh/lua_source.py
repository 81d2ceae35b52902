"""Redis Lua scripts as package data (issue 47): `<package>/lua/<name>.lua`, shipped in the wheel.

Each package keeps the source of its scripts in its own `lua/` directory; the module that runs a script
reads it once, at import, into a module-level constant (`X_LUA = package_lua("dispatcher_svc", "commit")`)
and registers it with `Store.script` (redis-py's `register_script`: EVALSHA, loaded on NOSCRIPT).
A script built from shared fragments is composed in Python from one file per fragment; a value put into
a script (a list of field names, a TTL) replaces a `{NAME}` line or token of its file, where the module
says so. Python stays the one place that composes, the `.lua` files hold nothing but Lua.

Light: no Redis, no store (domain modules import it).
"""

from __future__ import annotations

import importlib.resources

__all__ = ["package_lua"]


def package_lua(package: str, name: str) -> str:
    """The source of `<package>/lua/<name>.lua`, exactly as the file holds it (UTF-8).

    FileNotFoundError when the package has no such file (a typo fails at import, not at the first run).
    """
    return importlib.resources.files(package).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")
