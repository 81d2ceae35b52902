"""The Lua scripts of the task store (`dispatcher_svc.tasks`): fenced commit, acquire, create, due approvals.

Each script documents its KEYS, ARGV and reply; `TaskStore` builds the arguments and reads the replies.
Their sources are dispatcher_svc/lua/{commit,acquire,create_take,due_approvals}.lua; acquire.lua's `{FIELDS}` is the
Lua list of `RECORD_FIELDS`.
"""

from agentmesh.lua_source import package_lua
from dispatcher_svc.task_record import RECORD_FIELDS

COMMIT_LUA = package_lua("dispatcher_svc", "commit")

ACQUIRE_LUA = package_lua("dispatcher_svc", "acquire").replace(
    "{FIELDS}", "{" + ", ".join(f"'{name}'" for name in RECORD_FIELDS) + "}"
)

DUE_APPROVALS_LUA = package_lua("dispatcher_svc", "due_approvals")

CREATE_TAKE_LUA = package_lua("dispatcher_svc", "create_take")
