"""The Lua scripts of the workflow run store (`dispatcher_svc.workflows.runs`): fenced commit, acquire.

Both touch one run's keys only (its hash and its event stream, one hash tag: cluster-safe).
Their sources are dispatcher_svc/lua/workflow_run_{commit,acquire}.lua.
"""

from agentmesh.lua_source import package_lua

RUN_COMMIT_LUA = package_lua("dispatcher_svc", "workflow_run_commit")

RUN_ACQUIRE_LUA = package_lua("dispatcher_svc", "workflow_run_acquire")
