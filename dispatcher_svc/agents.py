"""The configured agents (`agents:` in agentmesh.yaml) and what a task may do with them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmesh.answers import parse_schema, with_actions
from agentmesh.config import AgentSettings, ConfigError
from agentmesh.errors import NotFoundError, Violation, echo
from dispatcher_svc.handoffs import VERDICT_SCHEMA, HandoffTool, resolve_target, tools_for


@dataclass(frozen=True)
class AgentConfig:
    """One agent as the loop uses it (a frozen copy of its AgentSettings)."""

    id: str
    description: str
    system_prompt: str
    model: str
    task_tag: str
    temperature: float | None
    max_output_tokens: int
    tools: tuple[str, ...]
    capabilities: tuple[str, ...]
    permissions: tuple[str, ...]
    token_budget: int
    max_steps: int
    discover_k: int
    max_context_tokens: int
    output_schema: Mapping[str, Any] | None = None
    """The schema final answers follow (with the runtime's `actions` field when it asks for it)."""
    claims: str = "check"
    """check | warn | off: the claims check of final answers (agentmesh/claims.py)."""
    handoff_tools: Mapping[str, HandoffTool] = field(default_factory=dict)
    """The handoff tools its `handoffs:` offers, by name (dispatcher_svc/handoffs.py); empty: none."""
    role: str = "agent"
    """agent | verifier (a verifier's final answer is a verdict: VERDICT_SCHEMA unless it has its own)."""
    verify_with: str = ""
    """The verifier agent that checks each transfer of this one; empty: none."""

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> AgentConfig:
        return cls(
            id=settings.id,
            description=settings.description,
            system_prompt=settings.system_prompt,
            model=settings.model,
            task_tag=settings.task_tag,
            temperature=settings.temperature,
            max_output_tokens=settings.max_output_tokens,
            tools=tuple(settings.tools),
            capabilities=tuple(settings.capabilities),
            permissions=tuple(settings.permissions),
            token_budget=settings.token_budget,
            max_steps=settings.max_steps,
            discover_k=settings.discover_k,
            max_context_tokens=settings.max_context_tokens,
            output_schema=with_actions(settings.output_schema)
            if isinstance(settings.output_schema, dict)
            else parse_schema(VERDICT_SCHEMA, trusted=True)
            if settings.role == "verifier"
            else None,
            claims=settings.claims,
            handoff_tools=tools_for(
                settings.id, ((h.target, h.mode, h.capability is not None) for h in settings.handoffs)
            ),
            role=settings.role,
            verify_with=settings.verify_with or "",
        )

    def allows_tool(self, name: str, group: str) -> bool:
        """Whether a tool may be offered to this agent: listed by name or group, or no list at all.

        Permissions are still enforced by tool_svc from the task's token; this only narrows what
        the model is shown.
        """
        return not self.tools or name in self.tools or (bool(group) and group in self.tools)


class AgentRegistry:
    """The agents by id; built once from the settings."""

    def __init__(self, agents: Iterable[AgentSettings]) -> None:
        self._agents: dict[str, AgentConfig] = {}
        for index, settings in enumerate(agents):
            if settings.id in self._agents:
                raise ConfigError(f"agents[{index}].id: duplicate agent id {settings.id!r}")
            self._agents[settings.id] = AgentConfig.from_settings(settings)
        for index, agent in enumerate(self._agents.values()):
            for tool in agent.handoff_tools.values():
                if tool.capability:
                    if not any(tool.target in other.capabilities for other in self._agents.values()):
                        raise ConfigError(f"agents[{index}].handoffs: no agent carries capability {tool.target!r}")
                elif resolve_target(tool.target, self._agents) is None:
                    known = ", ".join(sorted(self._agents))
                    raise ConfigError(
                        f"agents[{index}].handoffs: no agent {tool.target!r} to hand off to (known: {known})"
                    )
            if agent.verify_with:
                verifiers = sorted(a.id for a in self._agents.values() if a.role == "verifier")
                verifier = self._agents.get(agent.verify_with)
                if verifier is None or verifier.role != "verifier" or verifier.id == agent.id:
                    raise ConfigError(
                        f"agents[{index}].verify_with: {agent.verify_with!r} is not another agent with role "
                        f"verifier (verifiers: {', '.join(verifiers) or 'none'})"
                    )
                schema = verifier.output_schema or {}
                if "verdict" not in schema.get("properties", {}):
                    raise ConfigError(f"agents[{index}].verify_with: {verifier.id}'s output_schema has no `verdict`")

    def get(self, agent_id: str) -> AgentConfig:
        """The agent; NotFoundError naming the field and the known ids otherwise."""
        agent = self._agents.get(agent_id)
        if agent is None:
            known = ", ".join(sorted(self._agents)) or "none configured"
            raise NotFoundError(
                f"agent_id: no agent {echo(agent_id)!r} (known: {known})",
                violations=[
                    Violation(path="agent_id", rule="exists", actual=repr(echo(agent_id)), hint=f"one of: {known}")
                ],
                metadata={"field": "agent_id"},
            )
        return agent

    def list(self) -> Sequence[AgentConfig]:
        return [self._agents[k] for k in sorted(self._agents)]

    def ids(self) -> Sequence[str]:
        return sorted(self._agents)

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._agents
