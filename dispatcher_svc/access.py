"""Who may do what with tasks: the dispatcher's authorization rules (docs/design.md §7, §9).

- **Start** (StartTask, RunTask) as agent X: the operator role (admin implies it) or a grant matching
  `<env>:agent.X:run` (`agentmesh.grants`: conferred by the access levels `run` and `*` only).
  ListAgents lists only the agents the caller may start.
- **A task's creator** is the verified token that started it: its subject and, for an agent's token,
  its agent id (`Creator`, stored in the task hash). Get, Watch, Cancel and Resume (StartTask with the
  id of an existing task, which resumes a FAILED one) are for the creator (same subject, and the same
  agent id when the creator was an agent) and for operators. A task stored before creators were
  recorded has none: operators only.
- **A task id the caller may not see** is PERMISSION_DENIED whether or not such a task exists, so a
  caller cannot probe which task ids are in use; operators get NOT_FOUND for an unknown id.
- **Separation of duties** (`auth.separation_of_duties`, on by default): ResolveApproval, settlements
  included, is refused to the task's creator (same subject) and to its agent (a token whose agent id is
  the task's agent). With `auth.mode: disabled` every caller may be the one dev identity, so there are
  no duties to separate and the rule is not applied.

Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from agentmesh.audit import AuditLog
from agentmesh.errors import AgentmeshError, PermissionDeniedError, echo
from agentmesh.grants import agent_run_permission, allowed
from agentmesh.identity_value import Identity

__all__ = [
    "NOT_TASK_AGENT",
    "NOT_TASK_CREATOR",
    "TASK_ACCESS",
    "Auditor",
    "Creator",
    "check_resolver",
    "check_run",
    "check_task",
    "is_creator",
    "is_operator",
    "may_run",
    "task_denied",
]

log = logging.getLogger("dispatcher_svc.access")

TASK_ACCESS = "task:creator-or-operator"
"""The missing permission of a refused Get/Watch/Cancel/Resume."""
NOT_TASK_CREATOR = "approver:not-task-creator"
NOT_TASK_AGENT = "approver:not-task-agent"


@dataclass(frozen=True)
class Creator:
    """Who started a task: the token's subject and, for an agent's token, its agent id."""

    subject: str = ""
    agent_id: str = ""

    @classmethod
    def of(cls, identity: Identity) -> Creator:
        return cls(subject=identity.subject, agent_id=identity.agent_id)

    def fields(self) -> dict[str, str]:
        """The task hash fields that record it (tasks.TaskRecord.creator / creator_agent)."""
        return {"creator": self.subject, **({"creator_agent": self.agent_id} if self.agent_id else {})}


def is_operator(identity: Identity) -> bool:
    return identity.has_role("operator")


def may_run(identity: Identity, environment: str, agent_id: str) -> bool:
    """Whether `identity` may start tasks as `agent_id`."""
    return is_operator(identity) or allowed(identity.permissions, agent_run_permission(environment, agent_id))


def check_run(identity: Identity, environment: str, agent_id: str) -> None:
    """PermissionDeniedError naming `<env>:agent.<id>:run` unless `identity` may start `agent_id`."""
    if may_run(identity, environment, agent_id):
        return
    needed = agent_run_permission(environment, agent_id)
    raise PermissionDeniedError(
        needed,
        f"{echo(identity.subject)} may not start tasks as agent {echo(agent_id)}: "
        f"needs the operator role or the grant {echo(needed)}",
    )


def is_creator(identity: Identity, creator: Creator) -> bool:
    """Same subject, and the same agent id when the creator was an agent; never for a task without one."""
    if not creator.subject or identity.subject != creator.subject:
        return False
    return not creator.agent_id or identity.agent_id == creator.agent_id


def task_denied(identity: Identity, task_id: str, verb: str) -> PermissionDeniedError:
    # The same answer whether or not the task exists: the caller learns nothing about other tasks.
    return PermissionDeniedError(
        TASK_ACCESS,
        f"no task {echo(task_id)} started by {echo(identity.subject)}: only a task's creator and "
        f"operators may {verb} it",
    )


def check_task(identity: Identity, task_id: str, creator: Creator, verb: str) -> None:
    """PermissionDeniedError (TASK_ACCESS) unless `identity` is an operator or the task's creator."""
    if is_operator(identity) or is_creator(identity, creator):
        return
    raise task_denied(identity, task_id, verb)


def check_resolver(identity: Identity, task_id: str, creator: Creator, task_agent: str) -> None:
    """Separation of duties: PermissionDeniedError when the resolver started the task or is its agent."""
    if creator.subject and identity.subject == creator.subject:
        raise PermissionDeniedError(
            NOT_TASK_CREATOR,
            f"{echo(identity.subject)} started task {echo(task_id)} and may not resolve its approvals: "
            "another operator must (separation of duties)",
        )
    if identity.agent_id and identity.agent_id == task_agent:
        raise PermissionDeniedError(
            NOT_TASK_AGENT,
            f"agent {echo(identity.agent_id)} runs task {echo(task_id)} and may not resolve its approvals",
        )


class Auditor:
    """The dispatcher's entries in the audit stream (agentmesh.audit): written after the act, and a
    failed write is logged and never undoes the act nor fails the call."""

    def __init__(self, audit: AuditLog) -> None:
        self.audit = audit

    async def record(
        self, identity: Identity, action: str, target: str, *, outcome: str = "ok", detail: str = ""
    ) -> None:
        try:
            await self.audit.record(
                subject=identity.subject, action=action, target=target, outcome=outcome, detail=detail
            )
        except Exception as exc:  # UnavailableError and the like: the act stands regardless
            log.warning(
                "audit: %s of %s by %s not recorded: %s",
                action,
                target,
                identity.subject,
                getattr(exc, "message", None) or type(exc).__name__,
            )

    async def refused(self, identity: Identity, action: str, target: str, error: AgentmeshError) -> None:
        await self.record(identity, action, target, outcome="PERMISSION_DENIED", detail=error.missing_permission)
