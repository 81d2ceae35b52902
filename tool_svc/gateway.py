"""The tool gateway: every ExecuteTool goes through PIPELINE, in this order (docs/design.md §5).

Each step is one small module with one job. A step returns an outcome to stop (a typed error, a
replayed result, a PendingApproval, or at the end the Output) or None to hand the call on; steps that
must act after the call (idempotency settles its key, the breaker records its verdict) register a
finalizer. Executors (`builtin/`, `http.py`) know nothing of any of this.

Approval decisions and settlements are `decisions.py`'s; registrations, decisions and settlements are
appended to the audit stream (`agentmesh.audit`, docs/design.md §9) once done by its `Auditor`:
`tool.register`, `approval.resolve`, `settlement.resolve`. An audit write that fails is logged and the
act stands.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from agentmesh.audit import AuditLog
from agentmesh.config import Settings
from agentmesh.embeddings import OfflineEmbedder
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.metrics import Metrics
from agentmesh.payloads import PayloadStore
from agentmesh.semconv import (
    ATTR_ERROR_CLASS,
    ATTR_ERROR_CODE,
    ERROR_TYPE,
    GEN_AI_AGENT_ID,
    GEN_AI_OPERATION_NAME,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_NAME,
)
from agentmesh.store import Store
from agentmesh.urlallow import Allowlist
from tool_svc import permissions
from tool_svc.approvals import ApprovalBook, ApprovalRecord, RequireApproval, Settlement
from tool_svc.breaker import BreakerConfig, Breakers, CircuitBreaker
from tool_svc.builtin import BuiltinDeps, default_specs, executors
from tool_svc.call import CallState, Step
from tool_svc.cpu import CpuPool
from tool_svc.cpu_validation import ValidateArgumentsInPool
from tool_svc.decisions import Auditor, Decisions
from tool_svc.discovery import Discovery, Scored, ToolIndex
from tool_svc.guard import DangerGuard, GuardArguments
from tool_svc.http import HttpTransport
from tool_svc.http_tool import HttpToolExecutor
from tool_svc.idempotency import Idempotency
from tool_svc.model import Caller, CallRequest, Pending, ToolDef, ToolResult
from tool_svc.offload import Offload
from tool_svc.permissions import CheckPermission
from tool_svc.ratelimit import RateLimit
from tool_svc.redact import RedactSecrets, redact_outcome
from tool_svc.registry import RegisteredTool, ResolveTool, ToolRegistry
from tool_svc.retry import Execute
from tool_svc.sandbox import Sandbox
from tool_svc.semantic_discovery import HybridDiscovery, HybridToolIndex
from tool_svc.shared_breaker import SharedBreakers
from tool_svc.validation import ValidateOutput

if TYPE_CHECKING:
    from tool_svc.mcp.mount import McpMount

log = logging.getLogger("tool_svc.gateway")

ATTR_ATTEMPTS = "agentmesh.tool.attempts"
ATTR_BYTES_IN = "agentmesh.tool.bytes_in"
ATTR_BYTES_OUT = "agentmesh.tool.bytes_out"
ATTR_BYTES_AFTER_DIGEST = "agentmesh.tool.bytes_after_digest"
ATTR_OUTCOME = "agentmesh.tool.outcome"
ATTR_REPLAYED = "agentmesh.tool.replayed"
UNKNOWN_TOOL_LABEL = "(unknown)"


class Gateway:
    """Registry, discovery, the ExecuteTool pipeline and approvals, as plain async Python."""

    def __init__(
        self,
        settings: Settings,
        store: Store | None,
        *,
        tracer: trace.Tracer | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        tools = settings.tools
        self.settings = settings
        self.environment = settings.environment
        self.tracer = tracer or trace.NoOpTracer()
        self.metrics = metrics or Metrics()
        self.transport = HttpTransport(
            Allowlist(tools.http_allowlist), tools.http_max_response_bytes, tracer=self.tracer
        )
        self.payloads = PayloadStore(store, ttl_s=tools.payload_ttl_s) if store is not None else None
        self.sandbox = Sandbox(tools.sandbox)
        # CPU-bound work (calculator, log parsing, large selections, digests and validations) runs in
        # worker processes, never on the event loop; none is started before the first such job.
        self.cpu = CpuPool(
            tools.cpu_workers, kill_grace_s=tools.cpu_kill_grace_s, inline_max_bytes=tools.cpu_inline_max_bytes
        )
        found = executors(
            BuiltinDeps(
                transport=self.transport,
                payloads=self.payloads,
                logs_dir=tools.logs_dir,
                sandbox=self.sandbox,
                read_payload_max_bytes=tools.read_payload_max_bytes,
                cpu=self.cpu,
            )
        )
        self.registry = ToolRegistry(
            tools,
            default_specs(sandbox_timeout_s=tools.sandbox.timeout_s),
            store=store,
            allowlist=self.transport.allowlist,
            available_builtins=frozenset(found),
        )
        # Separation of duties as the dispatcher applies it (dispatcher_svc.access): off with auth disabled.
        separate = settings.auth.separation_of_duties and settings.auth.mode == "enabled"
        self.approvals = (
            ApprovalBook(store, tools.approval_ttl_s, separate_duties=separate) if store is not None else None
        )
        self.audit = AuditLog(store, settings.audit) if store is not None else None
        self._audit = Auditor(self.audit)
        b = tools.breaker
        breaker_config = BreakerConfig(b.failure_threshold, b.open_s, b.ramp_s, b.ramp_start_fraction, b.max_entries)
        self.breakers: Breakers | SharedBreakers = (
            SharedBreakers(store, breaker_config, sync_s=b.sync_s, clock=clock)
            if store is not None and b.shared
            else Breakers(breaker_config, clock)
        )
        self.metrics.observe_breakers(self.breakers.census)
        pause = sleep or asyncio.sleep
        self.idempotency = Idempotency(
            store,
            self.approvals,
            ttl_s=tools.idempotency_ttl_s,
            lease_s=tools.idempotency_lease_s,
            heartbeat_s=tools.idempotency_heartbeat_s,
            approval_ttl_s=tools.approval_ttl_s,
            sleep=pause,
        )
        self.discovery = Discovery()
        # tools.discovery: hybrid also ranks by the offline multilingual embedder (issue 51).
        self.hybrid_discovery = HybridDiscovery(OfflineEmbedder()) if tools.discovery == "hybrid" else None
        # MCP servers' tools (docs/design.md §16); the SDK is loaded only when servers are configured.
        self.mcp: McpMount | None = None
        if tools.mcp_servers:
            from tool_svc.mcp.mount import McpMount

            self.mcp = McpMount(tools, self.registry, self.payloads, tracer=self.tracer)

        self.decisions = Decisions(self.approvals, self.idempotency, self.registry, self._audit, self.execute)

        # The order of docs/design.md §5, one step per module.
        self.pipeline: Sequence[Step] = (
            ResolveTool(self.registry),  # UNKNOWN_TOOL (with the closest names)
            # PERMISSION_DENIED, from the verified token only: before any work on the arguments, so a
            # caller without the grant costs no parsing nor schema check (issue 39)
            CheckPermission(),
            # ARGUMENTS_NOT_JSON, SCHEMA_INVALID (regexes by RE2: tool_svc.linear_regex)
            ValidateArgumentsInPool(tools.max_arguments_bytes, self.cpu, settings.server.max_json_depth),
            GuardArguments(DangerGuard()),  # DANGEROUS_OPERATION (FATAL) on x-agentmesh-kind fields
            self.idempotency,  # replay of a finished outcome, IDEMPOTENCY_CONFLICT
            RequireApproval(self.approvals),  # PendingApproval for writes
            RateLimit(
                store,
                capacity=tools.rate_limit.capacity,
                refill_per_second=tools.rate_limit.refill_per_second,
                local_batch=tools.rate_limit.local_batch,
            ),  # RATE_LIMITED, per agent, shared by every replica
            CircuitBreaker(self.breakers, tools.breaker.scope),  # CIRCUIT_OPEN per (agent or its instance, tool)
            Execute(found, HttpToolExecutor(self.transport), mcp=self.mcp, rng=rng, sleep=pause),  # UPSTREAM_*
            ValidateOutput(),  # OUTPUT_INVALID
            RedactSecrets(),
            Offload(self.payloads, tools.offload_threshold_bytes, self.cpu),  # PayloadRef + digest above 2 KiB
        )

    async def start(self) -> None:
        """Connects the MCP servers (waiting for their first listings)."""
        if self.mcp is not None:
            await self.mcp.start()

    async def aclose(self) -> None:
        try:
            if self.mcp is not None:
                await self.mcp.aclose()
            await self.transport.aclose()
        finally:
            await self.cpu.aclose()

    # -- ExecuteTool -------------------------------------------------------------------------------

    async def execute(self, request: CallRequest, caller: Caller, *, approved_id: str = "") -> ToolResult:
        """Runs one call through the pipeline. Tool outcomes come back in the ToolResult; only faults
        of the service itself (Redis down, ...) raise."""
        call = CallState(request, caller, self.environment, approved_id=approved_id)
        with self.tracer.start_as_current_span(f"execute_tool {request.name[:64]}") as span:
            span.set_attribute(GEN_AI_OPERATION_NAME, "execute_tool")
            span.set_attribute(GEN_AI_TOOL_NAME, request.name[:64])
            span.set_attribute(GEN_AI_TOOL_CALL_ID, request.call_id[:128])
            span.set_attribute(GEN_AI_AGENT_ID, caller.agent)
            result: ToolResult | None = None
            try:
                outcome = None
                for step in self.pipeline:
                    outcome = await step(call)
                    if outcome is not None:
                        break
                if outcome is None:  # pragma: no cover - Offload always answers
                    outcome = AgentmeshError(ErrorCode.INTERNAL, "the pipeline produced no outcome")
                outcome = await self.idempotency.after(call, outcome)
                call.stats.duration_s = time.monotonic() - call.started
                # One redactor on every path out: an error raised by any step (output schema, sandbox,
                # offload, a worker) may quote an upstream or the tool's output.
                result = ToolResult(request.call_id, request.name, redact_outcome(outcome), call.stats)
            finally:
                await self._finish(call, result)
            self._annotate(span, call, result)
            self._measure(call, result)
            return result

    def _measure(self, call: CallState, result: ToolResult) -> None:
        """The call's outcome in the metrics: executions only (a replayed outcome was counted when it ran).
        An unknown tool name is the model's text, so it is counted as "(unknown)", never as a label."""
        if result.stats.replayed or not self.metrics.enabled:
            return
        tool = call.tool.spec.name if call.tool is not None else UNKNOWN_TOOL_LABEL
        outcome = result.outcome
        if isinstance(outcome, AgentmeshError):
            self.metrics.tool_call(tool, "error", outcome.error_class.name, outcome.code.name, result.stats.duration_s)
        else:
            kind = "pending_approval" if isinstance(outcome, Pending) else "output"
            self.metrics.tool_call(tool, kind, "", "", result.stats.duration_s)

    async def _finish(self, call: CallState, result: ToolResult | None) -> None:
        for finalizer in reversed(call.finalizers):
            try:
                await finalizer(result)
            except Exception:
                if result is not None:
                    raise
                # A step already raised; its error is the one to report.
                log.exception("finalizer failed after an error")

    @staticmethod
    def _annotate(span: trace.Span, call: CallState, result: ToolResult) -> None:
        outcome = result.outcome
        span.set_attribute(ATTR_ATTEMPTS, result.stats.attempts)
        span.set_attribute(ATTR_BYTES_IN, call.bytes_in)
        span.set_attribute(ATTR_BYTES_OUT, call.bytes_out)
        span.set_attribute(ATTR_BYTES_AFTER_DIGEST, call.bytes_after_digest)
        span.set_attribute(ATTR_REPLAYED, result.stats.replayed)
        if isinstance(outcome, AgentmeshError):
            span.set_attribute(ATTR_OUTCOME, "error")
            span.set_attribute(ATTR_ERROR_CODE, outcome.code.name)
            span.set_attribute(ATTR_ERROR_CLASS, outcome.error_class.name)
            span.set_attribute(ERROR_TYPE, outcome.code.name)
            span.set_status(Status(StatusCode.ERROR, outcome.code.name))
        else:
            span.set_attribute(ATTR_OUTCOME, "pending_approval" if isinstance(outcome, Pending) else "output")

    # -- approvals (decisions.py) -----------------------------------------------------------------

    async def get_approval(self, approval_id: str, viewer: Caller) -> ApprovalRecord:
        """The approval, for operators and for the agent that asked (it holds the call's arguments)."""
        return await self.decisions.get(approval_id, viewer)

    async def resolve_approval(
        self,
        approval_id: str,
        *,
        approve: bool,
        reason: str,
        arguments_sha256: str,
        approver: Caller,
        settlement: Settlement = "",
    ) -> tuple[ApprovalRecord, ToolResult]:
        """Decides an approval, or settles a call of unknown outcome (`decisions.Decisions.resolve`)."""
        return await self.decisions.resolve(
            approval_id,
            approve=approve,
            reason=reason,
            arguments_sha256=arguments_sha256,
            approver=approver,
            settlement=settlement,
        )

    # -- registry and discovery --------------------------------------------------------------------

    async def list_tools(self, group: str = "") -> list[ToolDef]:
        return [t.spec for t in await self.list_entries(group)]

    async def list_entries(
        self, group: str = "", *, caller: Caller | None = None, permitted_only: bool = False
    ) -> list[RegisteredTool]:
        """The registered tools (of `group`; only those `caller` may use when `permitted_only`), each with
        why it is unavailable, if it is (an MCP server down)."""
        await self.registry.refresh_if_stale()
        entries = [t for t in self.registry.tools() if not group or t.spec.permission.group == group]
        if permitted_only and caller is not None:
            entries = [
                t
                for t in entries
                if permissions.allowed(caller.permissions, permissions.required_permission(t.spec, self.environment))
            ]
        return entries

    async def discover(self, goal: str, k: int, *, caller: Caller, permitted_only: bool) -> list[Scored]:
        await self.registry.refresh_if_stale()

        # A tool that cannot run now (its MCP server is down) is not offered.
        def listed() -> list[ToolDef]:
            return [t.spec for t in self.registry.tools() if not t.unavailable]

        index: ToolIndex | HybridToolIndex
        if self.hybrid_discovery is not None:
            index = await self.hybrid_discovery.index(self.registry.version, listed, goal)
        else:
            index = self.discovery.index(self.registry.version, listed)

        def permitted(tool: ToolDef) -> bool:
            return permissions.allowed(caller.permissions, permissions.required_permission(tool, self.environment))

        return index.search(goal, k, allow=permitted if permitted_only else None)

    async def register(self, spec: ToolDef, *, replace: bool, caller: Caller) -> ToolDef | Pending:
        """Stores a run-time tool, or, when `ToolRegistry.review` flags it, answers a PendingApproval that
        another admin must approve before the tool is stored (until then it is neither listed nor run)."""
        await self.registry.check_registration(spec, replace_existing=replace)
        reasons = await self.registry.review(spec)
        if not reasons:
            stored = await self.registry.register(spec, replace_existing=replace)
            await self._audit(caller, "tool.register", stored.name, detail="replace" if replace else "")
            return stored
        if self.approvals is None:
            raise AgentmeshError(ErrorCode.FAILED_PRECONDITION, "approvals need Redis")
        pending = await self.approvals.create_registration(spec, replace=replace, caller=caller, why="; ".join(reasons))
        await self._audit(caller, "tool.register", spec.name, "pending_review", f"approval {pending.approval_id}")
        return pending
