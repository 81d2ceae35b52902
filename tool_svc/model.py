"""tool_svc's domain objects: tools, callers, calls and their typed outcomes (no grpc, no protobuf).

`server.py` maps these to and from `agentmesh.v1` messages; every other module works on them only.
Outcomes serialize to JSON (`outcome_to_json` / `outcome_from_json`) for the idempotency and approval
records in Redis.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentmesh.backoff import Backoff
from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from agentmesh.identity_value import Identity
from agentmesh.payload_value import StoredPayload

ResultKind = Literal["structured", "text"]
Access = Literal["read", "write"]
ExecutorKind = Literal["builtin", "http", "mcp"]
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
"""The methods an HTTP tool may use (`ToolSpec.http_method`)."""

MEDIA_JSON = "application/json"
MEDIA_TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Permission:
    """What a tool needs: environment ("*": the one tool_svc serves), group, access."""

    environment: str = "*"
    group: str = "default"
    access: Access = "read"


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of transient faults; delay n = min(initial * 2^(n-1), max) + uniform(0, jitter)."""

    max_attempts: int = 3
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 4.0
    max_jitter_s: float = 0.5

    @property
    def schedule(self) -> Backoff:
        """The delays as the shared backoff value (doubling, capped, jittered)."""
        return Backoff(self.initial_backoff_s, self.max_backoff_s, multiplier=2.0, jitter_s=self.max_jitter_s)


@dataclass(frozen=True)
class ToolDef:
    """A tool as the registry holds it (docs/design.md §5)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    examples: tuple[str, ...] = ()
    output_schema: Mapping[str, Any] | None = None
    result_type: ResultKind = "structured"
    permission: Permission = Permission()
    impact: str = ""
    timeout_s: float = 10.0
    retry: RetryPolicy = RetryPolicy()
    idempotent: bool = False
    requires_approval: bool = False
    fallback_tool: str = ""
    executor: ExecutorKind = "http"
    endpoint_url: str = ""
    http_method: str = "POST"
    """For HTTP tools: one of HTTP_METHODS; GET and DELETE send the arguments as query parameters."""
    headers_allowed: tuple[str, ...] = ()
    """For `http_request`: request headers beyond the harmless default set that it may send (config only)."""
    builtin: str = ""
    """Implementation name of a built-in (may differ from `name`)."""
    offload: bool = True
    """False for tools whose output must never be offloaded again (read_payload)."""
    upstream_idempotency_key: bool = False
    """For HTTP tools: the upstream deduplicates by the Idempotency-Key header sent with every call
    (`tool_svc.http.idempotency_key_value`), so a call with an unknown outcome may be re-sent."""
    mcp_server: str = ""
    """For MCP tools: the configured server (`tools.mcp_servers[].name`) the tool is mounted from."""
    mcp_tool: str = ""
    """For MCP tools: the tool's own name on its server, sent in `tools/call`."""

    @property
    def read_only(self) -> bool:
        return self.permission.access == "read"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for the runtime registry in Redis."""
        return {
            "name": self.name,
            "description": self.description,
            "examples": list(self.examples),
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "result_type": self.result_type,
            "permission": {
                "environment": self.permission.environment,
                "group": self.permission.group,
                "access": self.permission.access,
            },
            "impact": self.impact,
            "timeout_s": self.timeout_s,
            "retry": {
                "max_attempts": self.retry.max_attempts,
                "initial_backoff_s": self.retry.initial_backoff_s,
                "max_backoff_s": self.retry.max_backoff_s,
                "max_jitter_s": self.retry.max_jitter_s,
            },
            "idempotent": self.idempotent,
            "requires_approval": self.requires_approval,
            "fallback_tool": self.fallback_tool,
            "executor": self.executor,
            "endpoint_url": self.endpoint_url,
            "http_method": self.http_method,
            "headers_allowed": list(self.headers_allowed),
            "builtin": self.builtin,
            "offload": self.offload,
            "upstream_idempotency_key": self.upstream_idempotency_key,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolDef:
        return cls(
            name=data["name"],
            description=data["description"],
            examples=tuple(data.get("examples", ())),
            input_schema=data["input_schema"],
            output_schema=data.get("output_schema"),
            result_type=data.get("result_type", "structured"),
            permission=Permission(**data.get("permission", {})),
            impact=data.get("impact", ""),
            timeout_s=float(data.get("timeout_s", 10.0)),
            retry=RetryPolicy(**data.get("retry", {})),
            idempotent=bool(data.get("idempotent", False)),
            requires_approval=bool(data.get("requires_approval", False)),
            fallback_tool=data.get("fallback_tool", ""),
            executor=data.get("executor", "http"),
            endpoint_url=data.get("endpoint_url", ""),
            http_method=data.get("http_method", "POST"),
            headers_allowed=tuple(data.get("headers_allowed", ())),
            builtin=data.get("builtin", ""),
            offload=bool(data.get("offload", True)),
            upstream_idempotency_key=bool(data.get("upstream_idempotency_key", False)),
        )


@dataclass(frozen=True)
class Caller:
    """Who calls, taken from the verified token only (never from a request field)."""

    subject: str
    agent_id: str = ""
    instance: str = ""
    environment: str = "dev"
    permissions: tuple[str, ...] = ()
    roles: frozenset[str] = frozenset()
    creator: str = ""
    """For a task's token: the subject that started the task (separation of duties, tool_svc.approvals)."""
    task_id: str = ""
    """For a task's token: the task's id."""

    @classmethod
    def from_identity(cls, identity: Identity) -> Caller:
        return cls(
            subject=identity.subject,
            agent_id=identity.agent_id,
            instance=identity.instance,
            environment=identity.environment,
            permissions=tuple(identity.permissions),
            roles=frozenset(identity.roles),
            creator=identity.creator,
            task_id=identity.task_id,
        )

    @property
    def agent(self) -> str:
        """The acting agent: its id, else the token subject."""
        return self.agent_id or self.subject

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "agent_id": self.agent_id,
            "instance": self.instance,
            "environment": self.environment,
            "permissions": list(self.permissions),
            "roles": sorted(self.roles),
            **({"creator": self.creator} if self.creator else {}),
            **({"task_id": self.task_id} if self.task_id else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Caller:
        return cls(
            subject=data["subject"],
            agent_id=data.get("agent_id", ""),
            instance=data.get("instance", ""),
            environment=data.get("environment", "dev"),
            permissions=tuple(data.get("permissions", ())),
            roles=frozenset(data.get("roles", ())),
            creator=data.get("creator", ""),
            task_id=data.get("task_id", ""),
        )


@dataclass(frozen=True)
class CallRequest:
    """One ExecuteTool request, as plain data."""

    call_id: str
    name: str
    arguments_json: str
    session_id: str
    idempotency_key: str = ""
    goal: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "name": self.name,
            "arguments_json": self.arguments_json,
            "session_id": self.session_id,
            "idempotency_key": self.idempotency_key,
            "goal": self.goal,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CallRequest:
        return cls(**{k: str(data.get(k, "")) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Output:
    """A successful call: inline text (JSON text when structured) or a payload ref plus digest."""

    result_type: ResultKind
    inline: str = ""
    ref: StoredPayload | None = None
    digest: str = ""
    redacted: bool = False


@dataclass(frozen=True)
class Pending:
    """A write waiting for a human; it has not run."""

    approval_id: str
    call_id: str
    tool_name: str
    arguments_json: str
    impact: str
    arguments_sha256: str
    expire_at: float
    requested_by: str
    kind: str = "call"
    """call, register_tool or settlement (tool_svc.approvals.Kind)."""


Outcome = Output | AgentmeshError | Pending


@dataclass(frozen=True)
class Invocation:
    """What an executor gets: the tool, the validated arguments and the call's scope."""

    tool: ToolDef
    arguments: Any
    session_id: str
    goal: str
    timeout_s: float
    caller: Caller
    idempotency_key: str = ""
    """The call's idempotency key ("" without one); HTTP executors derive the Idempotency-Key header from it."""


@dataclass(frozen=True)
class Produced:
    """What an executor produced: a JSON value (structured) or text."""

    result_type: ResultKind
    value: Any = None
    text: str = ""
    notes: Mapping[str, str] | None = None


Executor = Callable[[Invocation], Awaitable[Produced]]


@dataclass
class Stats:
    attempts: int = 0
    duration_s: float = 0.0
    replayed: bool = False
    output_bytes: int = 0


@dataclass
class ToolResult:
    """The typed answer to one call."""

    call_id: str
    tool_name: str
    outcome: Outcome
    stats: Stats = field(default_factory=Stats)


def canonical_json(value: Any) -> str:
    """One text per JSON value (sorted keys, no spaces): the basis of argument hashes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def arguments_sha256(arguments: Any) -> str:
    """sha256 hex of the canonical arguments: what an approval is bound to (PendingApproval.arguments_sha256).

    Canonical = JSON with sorted keys, separators (",", ":") and non-ASCII kept (ensure_ascii=False).
    """
    return hashlib.sha256(canonical_json(arguments).encode()).hexdigest()


def call_sha256(tool_name: str, arguments: Any) -> str:
    """sha256 binding a tool name and its arguments: what an idempotency key is bound to."""
    return hashlib.sha256(f"{tool_name}\n{canonical_json(arguments)}".encode()).hexdigest()


# --- JSON of outcomes (idempotency records) ------------------------------------------------------


def error_to_json(err: AgentmeshError) -> dict[str, Any]:
    return {
        "code": err.code.name,
        "message": err.message,
        "violations": [[v.path, v.rule, v.expected, v.actual, v.hint] for v in err.violations],
        "retryable": err.retryable,
        "retry_after": err.retry_after,
        "fallback_tool": err.fallback_tool,
        "missing_permission": err.missing_permission,
        "metadata": err.metadata,
    }


def error_from_json(data: Mapping[str, Any]) -> AgentmeshError:
    return AgentmeshError(
        ErrorCode[data["code"]],
        data.get("message", ""),
        violations=[Violation(*v) for v in data.get("violations", ())],
        retryable=data.get("retryable"),
        retry_after=data.get("retry_after"),
        fallback_tool=data.get("fallback_tool", ""),
        missing_permission=data.get("missing_permission", ""),
        metadata=data.get("metadata") or {},
    )


def outcome_to_json(result: ToolResult) -> dict[str, Any]:
    outcome = result.outcome
    body: dict[str, Any] = {
        "call_id": result.call_id,
        "tool_name": result.tool_name,
        "attempts": result.stats.attempts,
        "output_bytes": result.stats.output_bytes,
    }
    if isinstance(outcome, Output):
        body["output"] = {
            "result_type": outcome.result_type,
            "inline": outcome.inline,
            "ref": None if outcome.ref is None else outcome.ref.__dict__,
            "digest": outcome.digest,
            "redacted": outcome.redacted,
        }
    elif isinstance(outcome, Pending):
        body["pending"] = outcome.__dict__
    else:
        body["error"] = error_to_json(outcome)
    return body


def outcome_from_json(data: Mapping[str, Any]) -> ToolResult:
    outcome: Outcome
    if "output" in data:
        out = data["output"]
        outcome = Output(
            result_type=out["result_type"],
            inline=out.get("inline", ""),
            ref=None if out.get("ref") is None else StoredPayload(**out["ref"]),
            digest=out.get("digest", ""),
            redacted=bool(out.get("redacted", False)),
        )
    elif "pending" in data:
        outcome = Pending(**data["pending"])
    else:
        outcome = error_from_json(data["error"])
    return ToolResult(
        call_id=data.get("call_id", ""),
        tool_name=data.get("tool_name", ""),
        outcome=outcome,
        stats=Stats(attempts=int(data.get("attempts", 0)), output_bytes=int(data.get("output_bytes", 0))),
    )
