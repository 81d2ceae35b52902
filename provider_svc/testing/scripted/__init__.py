"""`scripted`: the offline, deterministic model the demo, the tests and the benchmarks run on.

It is a reactive policy, not a tape (docs/design.md §6): each call hands the policy the prompt it got
(goal, tools, the last tool results and any error with its violations and hints) and the policy
decides the reply. Faults (malformed JSON, schema violations, unknown tools, dangerous commands) are
injected at seeded rates on top of the policy's tool calls.

The package follows Pydantic AI's TestModel / FunctionModel split, one concern per module:

- `policy`: the policy interface (request, reply, tool-error types, the `Policy` callable type);
- `filling` / `fixing` / `jsonio`: arguments filled from a schema and the goal, fixed from an
  error's hints, and JSON text dumped, read and repaired;
- `generic`: `GenericPolicy`, the policy used when none is configured;
- `scenario`: the scenario language (YAML rules, `ScenarioPolicy`) and loading policies;
- `faults`: seeded fault injection (`FaultConfig`);
- `model`: `ScriptedModel`, the Model that runs a policy.

The names below are re-exported here; import them from `provider_svc.testing.scripted`.

The policy interface (stable; the demo scenario in `provider_svc/scenarios/` is written against it)::

    from provider_svc.testing.scripted import ScriptedRequest, ScriptedReply, ScriptedToolCall

    def policy(req: ScriptedRequest) -> ScriptedReply:          # may also be `async def`
        if req.last_error is not None and req.last_error.is_contract:
            return fix_last_call(req)                            # uses the violation hints
        if "fetch_logs" not in req.called_tools:
            return ScriptedReply(tool_calls=(ScriptedToolCall("fetch_logs", '{"service": "checkout"}'),))
        return ScriptedReply(text=f"Root cause: {req.last_result_text[:200]}")

Configured per scripted model (agentmesh.yaml, `providers.backends[].models[]`):
- `policy: "package.module:attr"`: a Policy callable; with `policy_args: {...}` the attribute is
  called as a factory `attr(**policy_args)` that returns the Policy;
- or `scenario: path/to/scenario.yaml` (rules, see `ScenarioPolicy`); a relative path is looked up
  in the working directory, then in `provider_svc/scenarios/`;
- neither: `GenericPolicy()` (answers the goal, calls the most relevant tool whose schema it can
  fill, fixes violations using their hints, takes an error's fallback_tool).
- `faults: {seed, malformed_json, schema_violation, unknown_tool, dangerous_command, false_claim,
  invalid_answer, on_corrections}` (the last two on final answers, issue 41).

Tool results are read as errors when their content is `agentmesh.errors.model_text` output
("error CODE (CLASS): message" + "- path; rule ...; expected ...; got ...; hint: ..." lines) or a
JSON object with an "error" object carrying the same fields.
"""

from __future__ import annotations

from provider_svc.testing.scripted.faults import FaultConfig, inject_faults
from provider_svc.testing.scripted.faults import _apply_fault as _apply_fault  # for the unit tests
from provider_svc.testing.scripted.filling import synthesize_arguments
from provider_svc.testing.scripted.fixing import adapt_arguments, fix_arguments, fix_last_call
from provider_svc.testing.scripted.generic import GenericPolicy
from provider_svc.testing.scripted.jsonio import _repair_json as _repair_json  # for the unit tests
from provider_svc.testing.scripted.model import ENCODING, ScriptedModel, count_tokens
from provider_svc.testing.scripted.policy import (
    Policy,
    ScriptedReply,
    ScriptedRequest,
    ScriptedToolCall,
    ToolErrorInfo,
    ViolationInfo,
    error_info,
    tool_error_of,
)
from provider_svc.testing.scripted.scenario import SCENARIO_DIR, ScenarioPolicy, load_policy, load_scenario

__all__ = [
    "ENCODING",
    "SCENARIO_DIR",
    "FaultConfig",
    "GenericPolicy",
    "Policy",
    "ScenarioPolicy",
    "ScriptedModel",
    "ScriptedReply",
    "ScriptedRequest",
    "ScriptedToolCall",
    "ToolErrorInfo",
    "ViolationInfo",
    "adapt_arguments",
    "count_tokens",
    "error_info",
    "fix_arguments",
    "fix_last_call",
    "inject_faults",
    "load_policy",
    "load_scenario",
    "synthesize_arguments",
    "tool_error_of",
]
