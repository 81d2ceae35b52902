"""The Lua scripts of context_svc's session store (sessions.py): each runs in one hash slot, the session's.

Their sources are context_svc/lua/*.lua. `seen_fn.lua`, `append_fn.lua` and `load_fn.lua` define the local
functions `seen`, `append` and `load`; a script that calls them is those fragments followed by its own file.
"""

from __future__ import annotations

from typing import Final

from agentmesh.lua_source import package_lua

SEEN_LUA_FN: Final = package_lua("context_svc", "seen_fn")

CREATE_LUA: Final = package_lua("context_svc", "create")

APPEND_LUA_FN: Final = package_lua("context_svc", "append_fn")

APPEND_LUA: Final = SEEN_LUA_FN + APPEND_LUA_FN + package_lua("context_svc", "append")

SEEN_LUA: Final = SEEN_LUA_FN + package_lua("context_svc", "seen")

LOAD_LUA_FN: Final = package_lua("context_svc", "load_fn")

LOAD_LUA: Final = LOAD_LUA_FN + package_lua("context_svc", "load")

APPEND_LOAD_LUA: Final = SEEN_LUA_FN + APPEND_LUA_FN + LOAD_LUA_FN + package_lua("context_svc", "append_load")

APPEND_MANY_LOAD_LUA: Final = SEEN_LUA_FN + APPEND_LUA_FN + LOAD_LUA_FN + package_lua("context_svc", "append_many_load")

CREATE_APPEND_LOAD_LUA: Final = (
    SEEN_LUA_FN + APPEND_LUA_FN + LOAD_LUA_FN + package_lua("context_svc", "create_append_load")
)

COMMIT_SUMMARY_LUA: Final = package_lua("context_svc", "commit_summary")

INCR_IF_EXISTS_LUA: Final = package_lua("context_svc", "incr_if_exists")

RELEASE_LUA: Final = package_lua("context_svc", "release")
