"""Who a Generate is billed to (docs/design.md §9): the caller's own agent, unless it is admin.

The usage ledger (`usage.py`) records tokens and cost per agent; the agent comes from the verified
token, and a request's `agent_id` may only repeat it:
- an agent token (it carries an agent id) bills its own agent; an empty request `agent_id` means
  that agent, any other is PERMISSION_DENIED (the dispatcher's task tokens name their agent);
- a token without an agent id (an operator) bills no agent: an empty `agent_id` is recorded under
  the token's subject, as before (an operator's own calls stay visible in `agentmesh usage`, apart
  from every agent's); naming any agent is PERMISSION_DENIED;
- an admin may bill any agent; an empty `agent_id` means its own agent, else its subject.

Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

from agentmesh.errors import PermissionDeniedError, echo
from agentmesh.identity_value import Identity

__all__ = ["billed_agent"]


def billed_agent(identity: Identity, requested: str) -> str:
    """The agent a Generate of `identity` naming `requested` (maybe "") is billed to.

    PermissionDeniedError when a caller that is not admin names an agent other than its own."""
    if identity.has_role("admin"):
        return requested or identity.agent_id or identity.subject
    if identity.agent_id:
        if requested and requested != identity.agent_id:
            raise PermissionDeniedError(
                missing_permission="role:admin",
                message=(
                    f"agent_id {echo(requested)!r} does not match the caller's identity ({identity.agent_id}): "
                    "an agent bills only itself; billing another agent needs the admin role"
                ),
            )
        return identity.agent_id
    if requested:
        raise PermissionDeniedError(
            missing_permission="role:admin",
            message=(
                f"{echo(identity.subject)} has no agent and may not bill agent {echo(requested)!r}: leave "
                "agent_id empty (billed to the caller's subject) or use an admin token"
            ),
        )
    return identity.subject
