"""The Lua scripts of the provider quotas (`provider_svc.quotas`): reserve before a call, settle or release after.

Each script documents its KEYS, ARGV and reply; `Quotas` builds the arguments and reads the replies. Both run on
one scope's keys (one hash tag) and read the clock from Redis TIME, so every replica counts on one clock.
Their sources are provider_svc/lua/quota_*.lua: a script's `{PRELUDE}` line takes quota_prelude.lua and
`{MONTH_KEEP_MS}` takes `MONTH_KEEP_MS`.
"""

from __future__ import annotations

from agentmesh.lua_source import package_lua

__all__ = ["MONTH_KEEP_MS", "RESERVE_LUA", "SETTLE_LUA"]

MONTH_KEEP_MS = 40 * 86400 * 1000  # a scope's state outlives the month it counts

# Shared by both scripts: Redis TIME in ms, integers written without exponents, and the key record's limits.
_PRELUDE = package_lua("provider_svc", "quota_prelude")

RESERVE_LUA = (
    package_lua("provider_svc", "quota_reserve")
    .replace("\n{PRELUDE}\n", _PRELUDE)
    .replace("{MONTH_KEEP_MS}", str(MONTH_KEEP_MS))
)

SETTLE_LUA = (
    package_lua("provider_svc", "quota_settle")
    .replace("\n{PRELUDE}\n", _PRELUDE)
    .replace("{MONTH_KEEP_MS}", str(MONTH_KEEP_MS))
)
