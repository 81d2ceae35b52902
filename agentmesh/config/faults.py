"""The scripted model's fault schema, the one place it is written: a scenario's `faults:` and a model's
`providers.backends[].models[].faults` in agentmesh.yaml are this.

It lives in the core configuration, not in provider_svc/testing/ beside the scripted model: the
configuration checks agentmesh.yaml at load for every service, and the core never imports a service (an
import here would make every service load a piece of provider_svc). The scripted model imports it from
here; pydantic only.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class FaultConfig(BaseModel):
    """Seeded fault injection on the policy's tool calls (docs/design.md §6); rates are probabilities per
    call. Unknown keys are errors, as in every configuration section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    malformed_json: float = Field(0.0, ge=0, le=1)
    schema_violation: float = Field(0.0, ge=0, le=1)
    unknown_tool: float = Field(0.0, ge=0, le=1)
    dangerous_command: float = Field(0.0, ge=0, le=1)
    false_claim: float = Field(0.0, ge=0, le=1)
    """A final answer claims a restart it never ran ("I restarted the pod", "Pod 已重启成功"): the
    claims check's fault (issue 41). Per final answer."""
    invalid_answer: float = Field(0.0, ge=0, le=1)
    """A final answer asked for in a schema (response_format) breaks it. Per final answer."""
    on_corrections: bool = False
    """Also inject into a reply that answers an error or a rejected final answer (False: corrections
    are always clean)."""

    @property
    def active(self) -> bool:
        return any((self.malformed_json, self.schema_violation, self.unknown_tool, self.dangerous_command))
