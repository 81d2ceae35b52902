"""The tool registry: built-ins, `tools.registry` from agentmesh.yaml, and tools registered at run time.

Every tool is checked when it enters (name, description, Draft 2020-12 input schema describing an
object, optional output schema, `x-agentmesh-kind` marks, HTTP endpoint on the allowlist, fallback):
a bad configuration fails start-up naming the tool, a bad RegisterTool is INVALID_REQUEST with the
reason. `review` names what makes a run-time registration need a second admin (a non-GET endpoint
declared read, an endpoint at or under an approval-gated tool's); configured tools are trusted.
Run-time tools live in one Redis hash, so every replica sees them: each replica reloads it every
`registry_refresh_s`, and at once when a call names a tool it does not know.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from agentmesh.config import ConfigError, ToolEntrySettings, ToolRetrySettings, ToolsSettings
from agentmesh.errors import AgentmeshError, ErrorCode, FailedPreconditionError, InvalidRequestError, Violation
from agentmesh.store import Store
from agentmesh.urlallow import Allowlist
from tool_svc.builtin.http_request import NEVER_FROM_ARGUMENTS
from tool_svc.call import CallState
from tool_svc.model import HTTP_METHODS, Outcome, Permission, RetryPolicy, ToolDef
from tool_svc.validation import SchemaCheck, SchemaDefinitionError, check_tool_schema, has_marks

log = logging.getLogger("tool_svc.registry")

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_GROUP_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
_ENV_RE = re.compile(r"^(\*|[a-z][a-z0-9_.-]{0,31})$")
_HEADER_RE = re.compile(r"^[A-Za-z0-9-]{1,64}$")
MAX_DESCRIPTION_CHARS = 2000
MAX_EXAMPLES = 20
# Refreshing on a miss more often than this would let a flood of bad names hammer Redis.
_MISS_REFRESH_S = 0.2

Source = Literal["builtin", "config", "runtime", "mcp"]


@dataclass(frozen=True)
class RegisteredTool:
    """A tool with its compiled schemas."""

    spec: ToolDef
    input_check: SchemaCheck
    output_check: SchemaCheck | None
    source: Source
    marked: bool = False
    """Whether the input schema marks any field with x-agentmesh-kind (else the guard has nothing to do)."""
    unavailable: str = ""
    """Why the tool cannot run now ("" when it can): its MCP server is down (docs/design.md §16)."""
    collision: str = ""
    """For an MCP tool whose name another tool of its server maps to too: why neither runs (issue 39)."""


def _retry(settings: ToolRetrySettings) -> RetryPolicy:
    return RetryPolicy(
        max_attempts=settings.max_attempts,
        initial_backoff_s=settings.initial_backoff_s,
        max_backoff_s=settings.max_backoff_s,
        max_jitter_s=settings.max_jitter_s,
    )


def tool_from_entry(entry: ToolEntrySettings, settings: ToolsSettings, builtins: Mapping[str, ToolDef]) -> ToolDef:
    """A ToolDef from a `tools.registry` entry; a built-in entry refines the built-in's defaults."""
    given = entry.model_fields_set
    if entry.executor == "builtin":
        implementation = entry.builtin or entry.name
        base = builtins.get(implementation)
        if base is None:
            known = ", ".join(sorted(builtins))
            raise ConfigError(f"tools.registry: {entry.name}: unknown built-in {implementation!r}; known: {known}")
        base = replace(base, name=entry.name, builtin=implementation)
    else:
        base = ToolDef(name=entry.name, description="", input_schema={}, retry=_retry(settings.retry))
    changes: dict[str, Any] = {}
    if "description" in given:
        changes["description"] = entry.description
    if "examples" in given:
        changes["examples"] = tuple(entry.examples)
    if "input_schema" in given and entry.input_schema is not None:
        changes["input_schema"] = entry.input_schema
    if "output_schema" in given:
        changes["output_schema"] = entry.output_schema
    if "result_type" in given:
        changes["result_type"] = entry.result_type
    if "permission" in given:
        p = entry.permission
        changes["permission"] = Permission(p.environment, p.group, p.access)
    if "impact" in given:
        changes["impact"] = entry.impact
    if "timeout_s" in given:
        changes["timeout_s"] = entry.timeout_s
    if "retry" in given and entry.retry is not None:
        changes["retry"] = _retry(entry.retry)
    if "idempotent" in given:
        changes["idempotent"] = entry.idempotent
    if "fallback_tool" in given:
        changes["fallback_tool"] = entry.fallback_tool
    if entry.executor == "http":
        changes["executor"] = "http"
        changes["endpoint_url"] = entry.endpoint_url
        changes["http_method"] = entry.method
    elif "method" in given:
        raise ConfigError(f"tools.registry: {entry.name}: method applies to executor: http tools only")
    if "upstream_idempotency_key" in given:
        if entry.executor != "http":
            raise ConfigError(
                f"tools.registry: {entry.name}: upstream_idempotency_key applies to executor: http tools only"
            )
        changes["upstream_idempotency_key"] = entry.upstream_idempotency_key
    if "headers_allowed" in given:
        if base.builtin != "http_request":
            raise ConfigError(
                f"tools.registry: {entry.name}: headers_allowed applies to the http_request built-in only"
            )
        changes["headers_allowed"] = tuple(entry.headers_allowed)
    spec = replace(base, **changes)
    approval = entry.requires_approval
    if approval is None:
        # Unset: writes need approval; a built-in keeps its own default unless its permission changed.
        keeps_default = entry.executor == "builtin" and "permission" not in given
        approval = spec.requires_approval if keeps_default else spec.permission.access == "write"
    return replace(spec, requires_approval=approval)


class ToolRegistry:
    """Name -> RegisteredTool, from code, configuration and Redis."""

    def __init__(
        self,
        settings: ToolsSettings,
        builtins: Mapping[str, ToolDef],
        *,
        store: Store | None = None,
        allowlist: Allowlist | None = None,
        available_builtins: frozenset[str] | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        self.settings = settings
        self.store = store
        self.allowlist = allowlist or Allowlist(settings.http_allowlist)
        self.available_builtins = available_builtins if available_builtins is not None else frozenset(builtins)
        self.clock = clock
        self._static: dict[str, RegisteredTool] = {}
        self._runtime: dict[str, RegisteredTool] = {}
        # MCP servers' tools (tool_svc.mcp), per server, and why a server is down ("" when it is up).
        self._mcp: dict[str, dict[str, RegisteredTool]] = {}
        self._mcp_down: dict[str, str] = {}
        self._mcp_flat: dict[str, RegisteredTool] = {}
        self._refreshed_at = float("-inf")
        self._miss_refreshed_at = float("-inf")
        self.version = 0
        for name in settings.builtins:
            spec = builtins[name]
            self._add_static(spec, "builtin")
        for entry in settings.registry:
            try:
                spec = tool_from_entry(entry, settings, builtins)
                self._add_static(spec, "builtin" if spec.executor == "builtin" else "config")
            except InvalidRequestError as exc:
                raise ConfigError(f"tools.registry: {entry.name}: {exc.message}") from None
        for tool in self._static.values():
            fallback = tool.spec.fallback_tool
            if fallback and fallback not in self._static:
                raise ConfigError(
                    f"tools.registry: {tool.spec.name}: fallback_tool {fallback!r} is not a registered tool"
                )

    @property
    def redis_key(self) -> str:
        assert self.store is not None
        return f"{self.store.keys.prefix}:tools"

    def _add_static(self, spec: ToolDef, source: Source) -> None:
        self._static[spec.name] = self.compile(spec, source)
        self.version += 1

    # -- checks ------------------------------------------------------------------------------------

    def compile(self, spec: ToolDef, source: Source) -> RegisteredTool:
        """Checks `spec` and compiles its schemas; InvalidRequestError naming the field otherwise."""
        if not NAME_RE.fullmatch(spec.name):
            raise InvalidRequestError("tool.name", f"{spec.name!r} must match {NAME_RE.pattern}")
        if not spec.description.strip():
            raise InvalidRequestError("tool.description", "is required: say when to use the tool")
        if len(spec.description) > MAX_DESCRIPTION_CHARS:
            raise InvalidRequestError("tool.description", f"is limited to {MAX_DESCRIPTION_CHARS} characters")
        if len(spec.examples) > MAX_EXAMPLES:
            raise InvalidRequestError("tool.examples", f"at most {MAX_EXAMPLES} examples")
        try:
            check_tool_schema(spec.input_schema, "input_schema", require_object=True)
            if spec.output_schema is not None:
                check_tool_schema(spec.output_schema, "output_schema", require_object=False)
        except SchemaDefinitionError as exc:
            field = "tool.output_schema_json" if str(exc).startswith("output_schema") else "tool.input_schema_json"
            raise InvalidRequestError(field, str(exc)) from None
        p = spec.permission
        if not _ENV_RE.fullmatch(p.environment):
            raise InvalidRequestError("tool.permission.environment", f"{p.environment!r} must be '*' or a name")
        if not _GROUP_RE.fullmatch(p.group):
            raise InvalidRequestError("tool.permission.group", f"{p.group!r} must match {_GROUP_RE.pattern}")
        if p.access not in ("read", "write"):
            raise InvalidRequestError("tool.permission.access", "must be read or write")
        if not 0 < spec.timeout_s <= 600:
            raise InvalidRequestError("tool.timeout", "must be in (0, 600] seconds")
        r = spec.retry
        if not 1 <= r.max_attempts <= 10 or min(r.initial_backoff_s, r.max_backoff_s, r.max_jitter_s) < 0:
            raise InvalidRequestError("tool.retry_policy", "max_attempts must be 1..10 and delays >= 0")
        if spec.fallback_tool == spec.name:
            raise InvalidRequestError("tool.fallback_tool", "a tool cannot be its own fallback")
        if spec.fallback_tool and not NAME_RE.fullmatch(spec.fallback_tool):
            raise InvalidRequestError("tool.fallback_tool", f"{spec.fallback_tool!r} is not a tool name")
        for header in spec.headers_allowed:
            if not _HEADER_RE.fullmatch(header) or header.lower() in NEVER_FROM_ARGUMENTS:
                raise InvalidRequestError("tool.headers_allowed", f"{header!r} is not a header a tool may send")
        if spec.executor == "http":
            if spec.http_method not in HTTP_METHODS:
                raise InvalidRequestError("tool.http_method", f"must be one of {', '.join(HTTP_METHODS)}")
            if not spec.endpoint_url:
                raise InvalidRequestError("tool.endpoint_url", "is required for an http tool")
            if not self.allowlist.allows(spec.endpoint_url):
                raise InvalidRequestError(
                    "tool.endpoint_url", "does not match tools.http_allowlist (scheme://host[:port]/path-prefix)"
                )
        elif spec.executor == "mcp":
            if source != "mcp" or not spec.mcp_server or not spec.mcp_tool:
                raise InvalidRequestError("tool.executor", "mcp tools come from tools.mcp_servers only")
        elif spec.executor == "builtin":
            if spec.builtin not in self.available_builtins:
                raise InvalidRequestError("tool.executor", f"unknown built-in {spec.builtin!r}")
            if spec.upstream_idempotency_key:
                raise InvalidRequestError("tool.upstream_idempotency_key", "applies to http tools only")
        else:
            raise InvalidRequestError("tool.executor", f"must be builtin, http or mcp, got {spec.executor!r}")
        output = SchemaCheck.compile(spec.output_schema) if spec.output_schema is not None else None
        return RegisteredTool(
            spec, SchemaCheck.compile(spec.input_schema), output, source, has_marks(spec.input_schema)
        )

    # -- reads -------------------------------------------------------------------------------------

    def tools(self) -> list[RegisteredTool]:
        merged = {**self._mcp_flat, **self._static, **self._runtime}
        return [merged[name] for name in sorted(merged)]

    def get(self, name: str) -> RegisteredTool | None:
        return self._runtime.get(name) or self._static.get(name) or self._mcp_flat.get(name)

    # -- MCP servers' tools ------------------------------------------------------------------------

    def set_mcp_tools(
        self, server: str, specs: list[ToolDef] | None, down: str = "", collisions: Mapping[str, str] | None = None
    ) -> list[str]:
        """The tools of MCP server `server` (None: keep the last ones), and why it is down ("" when up).

        Returns what was not mounted and why: a name another tool already has, a schema the registry
        refuses. While a server is down its tools stay listed, unavailable with the reason."""
        problems: list[str] = []
        changed = self._mcp_down.get(server, None) != down
        self._mcp_down[server] = down
        if specs is not None:
            others = {*self._static, *self._runtime, *(n for s, t in self._mcp.items() if s != server for n in t)}
            old = self._mcp.get(server, {})
            compiled: dict[str, RegisteredTool] = {}
            for spec in specs:
                if spec.name in others:
                    problems.append(f"{spec.name} (tool {spec.mcp_tool!r} of MCP server {server}): the name is taken")
                    continue
                known = old.get(spec.name)
                if known is not None and known.spec == spec and not known.collision:
                    compiled[spec.name] = known  # a periodic re-listing: nothing to compile again
                    continue
                try:
                    compiled[spec.name] = self.compile(spec, "mcp")
                except InvalidRequestError as exc:
                    problems.append(f"{spec.name} (tool {spec.mcp_tool!r} of MCP server {server}): {exc.message}")
            for name, reason in (collisions or {}).items():
                if name in compiled:  # listed, unavailable with the reason, never run
                    compiled[name] = replace(compiled[name], unavailable=reason, collision=reason)
            if {n: (t.spec, t.collision) for n, t in compiled.items()} != {
                n: (t.spec, t.collision) for n, t in old.items()
            }:
                self._mcp[server] = compiled
                changed = True
        if changed:
            self._mcp_flat = {
                name: replace(tool, unavailable=self._mcp_down.get(s, "")) if self._mcp_down.get(s) else tool
                for s, tools in self._mcp.items()
                for name, tool in tools.items()
            }
            self.version += 1
        return problems

    async def resolve(self, name: str) -> RegisteredTool | None:
        """The tool, reloading run-time tools when stale or when the name is unknown."""
        now = self.clock()
        await self.refresh_if_stale()
        found = self.get(name)
        if found is None and self.store is not None and now - self._miss_refreshed_at >= _MISS_REFRESH_S:
            self._miss_refreshed_at = now
            await self.refresh()
            found = self.get(name)
        return found

    async def refresh_if_stale(self) -> None:
        if self.store is not None and self.clock() - self._refreshed_at >= self.settings.registry_refresh_s:
            await self.refresh()

    def unknown(self, name: str) -> AgentmeshError:
        """UNKNOWN_TOOL naming the closest registered tools."""
        names = [tool.spec.name for tool in self.tools()]
        closest = difflib.get_close_matches(name, names, n=3, cutoff=0.4)
        hint = f"did you mean {' or '.join(closest)}?" if closest else f"registered tools: {', '.join(names[:30])}"
        return AgentmeshError(
            ErrorCode.UNKNOWN_TOOL,
            f"no tool named {name[:80]!r}; {hint}",
            violations=[
                Violation(
                    path="$.name", rule="enum", expected=", ".join(closest or names[:10]), actual=name[:80], hint=hint
                )
            ],
            metadata={"closest_tools": ",".join(closest)},
        )

    async def refresh(self) -> None:
        if self.store is None:
            return
        self._refreshed_at = self.clock()
        raw: Mapping[Any, Any] = await self.store.call("load tools", self.store.redis.hgetall(self.redis_key))
        loaded: dict[str, RegisteredTool] = {}
        for name, blob in raw.items():
            try:
                spec = ToolDef.from_json(json.loads(blob))
                loaded[spec.name] = self.compile(spec, "runtime")
            except (ValueError, KeyError, TypeError, AgentmeshError) as exc:
                # One bad record (e.g. written by a newer version) must not hide the others.
                log.warning("skipping run-time tool %r: %s", name.decode("utf-8", "replace"), exc)
        if {n: t.spec for n, t in loaded.items()} != {n: t.spec for n, t in self._runtime.items()}:
            self._runtime = loaded
            self.version += 1

    async def review(self, spec: ToolDef) -> list[str]:
        """Why registering `spec` at run time needs a second admin (empty: it does not).

        A non-GET tool declared read would change things without any approval; a tool at or under
        the endpoint of an approval-gated tool would reach that endpoint without its approval; a write
        claiming `upstream_idempotency_key` would be re-sent after an unknown outcome on its word alone."""
        reasons: list[str] = []
        if spec.executor != "http":
            return reasons
        if spec.http_method != "GET" and spec.permission.access == "read":
            reasons.append(f"a {spec.http_method} endpoint declared access read runs without approval")
        if spec.upstream_idempotency_key and not (spec.read_only or spec.idempotent):
            # The claim lets a write whose outcome is unknown be sent again without a settlement.
            reasons.append("upstream_idempotency_key lets a write with an unknown outcome be re-sent unsettled")
        await self.refresh()
        mine = _endpoint_key(spec.endpoint_url)
        for tool in self.tools():
            other = tool.spec
            if not (other.requires_approval and other.executor == "http" and other.endpoint_url):
                continue
            theirs = _endpoint_key(other.endpoint_url)
            if mine[:3] == theirs[:3] and (mine[3] == theirs[3] or mine[3].startswith(theirs[3].rstrip("/") + "/")):
                reasons.append(f"its endpoint is at or under that of the approval-gated tool {other.name}")
        return reasons

    # -- writes ------------------------------------------------------------------------------------

    async def check_registration(self, spec: ToolDef, *, replace_existing: bool) -> RegisteredTool:
        """The checks of `register` that need no write: INVALID_REQUEST or FAILED_PRECONDITION naming why."""
        if self.store is None:
            raise FailedPreconditionError("run-time registration needs Redis")
        if spec.executor != "http":
            raise InvalidRequestError("tool.executor", "only http tools can be registered at run time")
        compiled = self.compile(spec, "runtime")
        if spec.fallback_tool and self.get(spec.fallback_tool) is None:
            await self.refresh()
            if self.get(spec.fallback_tool) is None:
                raise InvalidRequestError("tool.fallback_tool", f"{spec.fallback_tool!r} is not a registered tool")
        existing = self._static.get(spec.name)
        if existing is not None and existing.source == "builtin":
            raise FailedPreconditionError(f"{spec.name} is a built-in tool and cannot be replaced")
        if spec.name in self._mcp_flat:
            raise FailedPreconditionError(f"{spec.name} is a tool of an MCP server and cannot be replaced")
        if not replace_existing and (existing is not None or spec.name in self._runtime):
            raise FailedPreconditionError(f"tool {spec.name} already exists; set replace to overwrite it")
        return compiled

    async def register(self, spec: ToolDef, *, replace_existing: bool) -> ToolDef:
        """Stores a run-time HTTP tool for every replica (`review` is the caller's: this stores)."""
        compiled = await self.check_registration(spec, replace_existing=replace_existing)
        assert self.store is not None
        blob = json.dumps(spec.to_json(), sort_keys=True)
        if replace_existing:
            await self.store.call(
                "register tool", self.store.durable(self.redis_key, "HSET", self.redis_key, spec.name, blob)
            )
        else:
            added = await self.store.call(
                "register tool", self.store.durable(self.redis_key, "HSETNX", self.redis_key, spec.name, blob)
            )
            if not added:
                raise FailedPreconditionError(f"tool {spec.name} already exists; set replace to overwrite it")
        self._runtime[spec.name] = compiled
        self.version += 1
        return spec


def _endpoint_key(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) compared case-insensitively, unquoted, without the query: the
    comparison errs towards "the same endpoint" (more approvals, never fewer)."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = -1
    path = re.sub(r"/+", "/", urllib.parse.unquote(parts.path or "/")).casefold()
    return parts.scheme.lower(), (parts.hostname or "").lower(), port, path


class ResolveTool:
    """Pipeline step: the named tool, or UNKNOWN_TOOL with the closest names."""

    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry

    async def __call__(self, call: CallState) -> Outcome | None:
        tool = await self.registry.resolve(call.request.name)
        if tool is None:
            return self.registry.unknown(call.request.name)
        if tool.collision:
            return AgentmeshError(
                ErrorCode.UPSTREAM_UNAVAILABLE,
                f"{tool.spec.name} is unavailable: {tool.collision}; nothing was sent",
                metadata={"sent": "no"},
            )
        call.tool = tool
        return None
