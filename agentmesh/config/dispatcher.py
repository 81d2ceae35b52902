"""The `agents:` and `dispatcher:` sections: the agents a task may run and how runs are driven."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from agentmesh.config.base import _Section


class HandoffSettings(_Section):
    """One entry of an agent's `handoffs:` (docs/design.md §7): another agent it may hand work to.

    `mode: transfer` offers the tool `transfer_to_<agent>` (control moves: this task ends HANDED_OFF and
    the other agent's task goes on); `ask` offers `ask_<agent>` (delegate and wait: the other agent's
    answer is the call's result); `both` offers the two. A plain string `- <agent>` is `mode: transfer`."""

    to: str | None = Field(None, pattern=r"^[a-z][a-z0-9_.-]{0,63}$")
    """The agent's id; or set `capability` instead."""
    capability: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    """A capability tag (`agents[].capabilities`): the tool is `transfer_to_<tag>` / `ask_<tag>`, and each
    handoff goes to the carrier capability routing picks then (healthy, fewest unfinished tasks)."""
    mode: Literal["transfer", "ask", "both"] = "transfer"

    @model_validator(mode="after")
    def _one_target(self) -> HandoffSettings:
        if (self.to is None) == (self.capability is None):
            raise ValueError("a handoff names one target: `to` (an agent) or `capability`, not both or neither")
        return self

    @property
    def target(self) -> str:
        """The agent id or capability tag it names."""
        return self.to or self.capability or ""


CAPABILITY_PATTERN: re.Pattern[str] = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
"""A capability tag (`agents[].capabilities`, StartTaskRequest.capability)."""


class RoutingSettings(_Section):
    """Capability routing (StartTask naming a `capability`, docs/design.md §7): which carrier runs it,
    chosen without a model call."""

    models_cache_s: float = Field(10.0, ge=0)
    """How long provider_svc's ListModels answer (is each agent's model available?) is reused; 0 asks
    every time."""
    failed_window_s: int = Field(600, ge=60, le=86_400)
    """The window (rounded up to whole minutes) over which an agent's FAILED share is measured."""
    failed_share_max: float = Field(0.5, gt=0, le=1)
    """An agent whose tasks ended FAILED at least this share of the time in the window is unhealthy..."""
    failed_min_ended: int = Field(5, ge=1)
    """... once at least this many of its tasks ended in the window (fewer say too little)."""
    repair_interval_s: float = Field(60.0, gt=0)
    """How often a replica re-checks the agents' unfinished-task sets against the tasks (a member left
    behind by a crash between a task's last commit and its removal is dropped)."""


class AgentSettings(_Section):
    """One agent of `agents:` (docs/design.md §7): what the dispatcher runs a task with."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_.-]{0,63}$")
    description: str = ""
    system_prompt: str = ""
    model: str = ""
    """"provider/model" or an alias; empty routes by `task_tag`."""
    task_tag: str = ""
    temperature: float | None = Field(None, ge=0, le=2)
    max_output_tokens: int = Field(1024, gt=0)
    """Completion limit of one model call; also what the budget guard reserves for the reply."""
    tools: list[str] = []
    """Tool names or tool groups the agent may be offered; empty: whatever its permissions allow."""
    capabilities: list[str] = []
    """Tags a StartTask may name instead of the agent (`capability`): the dispatcher routes it to the
    healthy carrier with the fewest unfinished tasks (docs/design.md §7). Each matches
    `[a-z0-9][a-z0-9_.-]{0,63}`."""
    permissions: list[str] = []
    """Grants "environment:group:access" put in the task's identity token (`*` wildcards a part)."""
    token_budget: int = Field(50_000, gt=0)
    max_steps: int = Field(20, gt=0)
    discover_k: int = Field(8, ge=1, le=50)
    """Tools offered per step (DiscoverTools top-k)."""
    max_context_tokens: int = Field(0, ge=0)
    """Context budget per model call; 0 takes context_svc's default."""
    output_schema: dict[str, Any] | str | None = None
    """The JSON Schema (Draft 2020-12) final answers follow: inline, or the path of a JSON file holding it
    (relative paths from the working directory). None: free-text answers. `x-agentmesh-actions: true` adds
    an `actions` field whose entries cite the tool calls that did what the answer claims (§7)."""
    claims: Literal["check", "warn", "off"] = "check"
    """Claims of completed actions in final answers, checked against the task's tool calls: `check`
    corrects an unsupported claim once, then fails the task CLAIM_UNSUPPORTED; `warn` records the verdict
    only; `off` skips the check."""
    handoffs: list[HandoffSettings] = []
    """The agents this one may hand work to (HandoffSettings); empty: no handoff tool is offered."""
    role: Literal["agent", "verifier"] = "agent"
    """`verifier`: it judges another agent's handoff (`verify_with`); its final answer is a verdict,
    {"verdict": "accepted" | "rejected", "reasons": [...]} unless its own output_schema says more."""
    verify_with: str | None = Field(None, pattern=r"^[a-z][a-z0-9_.-]{0,63}$")
    """A `role: verifier` agent that checks each transfer this agent makes before the next agent gets it:
    a rejection comes back once as a VERIFICATION_REJECTED correction, a second fails the task."""

    @field_validator("handoffs", mode="before")
    @classmethod
    def _handoff_shorthand(cls, value: Any) -> Any:
        """`- triage` is `- {to: triage, mode: transfer}`."""
        if isinstance(value, list):
            return [{"to": item} if isinstance(item, str) else item for item in value]
        return value

    @field_validator("output_schema")
    @classmethod
    def _output_schema(cls, value: dict[str, Any] | str | None) -> dict[str, Any] | None:
        from agentmesh.answers import SchemaProblem, parse_schema

        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = Path(value).read_text(encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"output_schema: cannot read {value}: {exc.strerror}") from None
        try:
            return parse_schema(value, trusted=True)
        except SchemaProblem as exc:
            raise ValueError(f"output_schema {exc}") from None

    @field_validator("capabilities")
    @classmethod
    def _capability_format(cls, tags: list[str]) -> list[str]:
        for tag in tags:
            if not CAPABILITY_PATTERN.fullmatch(tag):
                raise ValueError(f"capability {tag!r} must match {CAPABILITY_PATTERN.pattern}")
        if len(set(tags)) != len(tags):
            raise ValueError("capabilities must not repeat a tag")
        return tags

    @field_validator("permissions")
    @classmethod
    def _permission_format(cls, grants: list[str]) -> list[str]:
        for grant in grants:
            parts = grant.split(":")
            if len(parts) != 3 or not all(parts):
                raise ValueError(f"permission {grant!r} must be environment:group:access")
        return grants


class DispatcherSettings(_Section):
    """dispatcher_svc: task ownership, event log and the loop's bounds (docs/design.md §7)."""

    consumer_group: str = "dispatchers"
    consumer_name: str = ""
    """This replica's consumer name in the group; empty: host-pid-random."""
    claim_idle_s: float = Field(15.0, gt=0)
    """A task whose owner has not renewed its claim for this long is claimed by another replica."""
    claim_interval_s: float = Field(2.0, gt=0)
    """How often a replica looks for orphaned tasks (XAUTOCLAIM)."""
    heartbeat_interval_s: float = Field(5.0, gt=0)
    """An idle WatchTask/RunTask stream gets a heartbeat this often."""
    foreign_event_poll_s: float = Field(0.5, gt=0)
    """While a watched task runs on this replica (its events reach the watcher from memory), how
    often Redis is read for events another replica writes (CancelTask, ResolveApproval served there)."""
    event_maxlen: int = Field(10_000, ge=100)
    """Events kept per task (stream MAXLEN, approximate; entries, when `pack_events` packs them)."""
    pack_events: bool = True
    """Write the events of one commit as one stream entry (a JSON array) instead of one entry each:
    ~6 Redis commands fewer per task (issue 45). Every release from the one that added this switch (off
    then: CHANGELOG) reads both; a replica of an earlier release reads one event per entry and would
    miss the others of a packed entry. Upgrading from such a release, set it false until every
    dispatcher replica runs this release or later (a rolling upgrade: until it ends)."""
    max_contract_retries: int = Field(2, ge=0, le=10)
    """Reflective retries of a call failing its contract before it is handled as ENGINEERING."""
    loop_threshold: int = Field(3, ge=2)
    """The same tool with the same arguments this many times is LOOP_DETECTED."""
    max_concurrent_tasks: int = Field(64, gt=0)
    """Tasks one replica runs at once; more stay queued for other replicas."""
    call_timeout_s: float = Field(60.0, gt=0)
    """Deadline of one downstream call (capped by the task's deadline)."""
    liveness_s: float = Field(0.0, ge=0)
    """The liveness window: a run that makes no progress this long (no downstream call answered, no
    checkpoint written: e.g. stuck on a Redis pool that never frees a connection for it) stops
    having its claim renewed; it is cancelled and its task handed back to the queue (or, with Redis
    unreachable, claimed by any replica once the claim lapses) and resumed from its last
    checkpoint. 0: twice `call_timeout_s` plus `claim_idle_s` (longer than any one call and the
    wait before its retry)."""
    task_timeout_s: float = Field(3600.0, gt=0)
    """A task still running this long after it was created fails with DEADLINE_EXCEEDED; a task a
    handoff created is bound by its root's deadline too."""
    max_handoff_depth: int = Field(8, ge=1, le=64)
    """Handoffs from a root task to its deepest descendant; one more is refused (HANDOFF_DEPTH, typed)."""
    service_retry_attempts: int = Field(3, ge=1, le=10)
    """Attempts of a downstream call met by an outage (UNAVAILABLE, ...) retried quietly: the waits
    after them are reported as task events, until `outage_budget_s` (docs/design.md §7)."""
    service_retry_backoff_s: float = Field(0.2, gt=0)
    """The first retry's delay; each next one doubles, up to `outage_max_backoff_s`."""
    outage_budget_s: float = Field(120.0, ge=0)
    """How long one outage of a service (or of Redis behind it) may last while a task waits for it in
    its run, retrying with backoff and jitter within the task's deadline; past it the task FAILS
    UNAVAILABLE naming the service and how long it was down (resumable). 0: fail as soon as the
    quiet attempts are spent, as before issue 49."""
    outage_max_backoff_s: float = Field(5.0, gt=0)
    """The longest wait between two attempts during an outage."""
    outage_jitter_s: float = Field(0.5, ge=0)
    """Up to this much random delay is added to each outage wait (tasks that failed together do not
    retry together)."""
    task_ttl_s: int = Field(7 * 24 * 3600, gt=0)
    """Finished tasks and their event logs expire after this long."""
    approval_sweep_interval_s: float = Field(2.0, gt=0)
    """How often a replica looks for tasks whose approval expired unresolved (they resume with
    APPROVAL_EXPIRED for the model instead of waiting for good)."""
    record_prompts: bool = True
    """Keep each step's provider request as sent (secrets masked) with the task, for `agentmesh context
    --task T --step N` and GetStepPrompt; false saves its Redis memory and the masking."""
    queue_metrics_interval_s: float = Field(5.0, gt=0)
    """How often a replica samples the task queue's depth and lag for the metrics (two Redis round trips)."""
    routing: RoutingSettings = RoutingSettings()
    """Capability routing: health signals and their caches."""

    @property
    def liveness_window_s(self) -> float:
        """`liveness_s`, or its default when 0."""
        return self.liveness_s or 2 * self.call_timeout_s + self.claim_idle_s
