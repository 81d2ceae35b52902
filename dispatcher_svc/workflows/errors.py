"""The typed errors of workflows: a definition refused at load, a template or condition that fails."""

from __future__ import annotations

from agentmesh.errors import AgentmeshError, ErrorCode, Violation, echo

__all__ = ["WorkflowInvalidError", "WorkflowRuntimeError"]


class WorkflowInvalidError(AgentmeshError):
    """A workflow definition that cannot be used: names the workflow, the node and the field."""

    def __init__(self, workflow: str, node: str, field: str, reason: str) -> None:
        where = f"workflow {echo(workflow)!r}" + (f": node {echo(node)!r}" if node else "")
        super().__init__(
            ErrorCode.INVALID_REQUEST,
            f"{where}: {field}: {reason}",
            violations=[Violation(path=f"nodes.{node}.{field}" if node else field, rule="workflow", hint=reason)],
        )
        self.workflow = workflow
        self.node = node
        self.field = field
        self.reason = reason


class WorkflowRuntimeError(AgentmeshError):
    """A template or condition that cannot be evaluated on this run's data (a missing key, a list
    too long, a condition that is not a bool): the node fails with it, an ENGINEERING error."""

    def __init__(self, node: str, field: str, reason: str) -> None:
        super().__init__(
            ErrorCode.FAILED_PRECONDITION,
            f"node {echo(node)!r}: {field}: {reason}",
            violations=[Violation(path=f"nodes.{node}.{field}", rule="workflow", hint=reason)],
        )
        self.node = node
        self.field = field
