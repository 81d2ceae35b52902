"""The scripted model's fault settings have one schema, its own (`agentmesh.config.faults`): the
configuration's `providers.backends[].models[].faults` and a scenario's `faults:` are that class, and an
unknown key or an out-of-range rate fails when the configuration loads."""

from __future__ import annotations

import pytest

from agentmesh.config import ConfigError, settings_from_layers
from agentmesh.config.faults import FaultConfig
from agentmesh.config.providers import ProviderModelSettings
from provider_svc.testing.scripted import FaultConfig as ModelFaults
from provider_svc.testing.scripted.scenario import _Scenario


def _overrides(faults: dict[str, object]) -> dict[str, object]:
    model = {"name": "faulty", "faults": faults}
    backends = [{"name": "scripted", "type": "scripted", "models": [model]}]
    return {"auth": {"key": "k" * 40}, "providers": {"backends": backends, "default_model": "scripted/faulty"}}


def test_the_configuration_and_the_scenarios_share_the_scripted_models_schema() -> None:
    assert ModelFaults is FaultConfig
    assert ProviderModelSettings.model_fields["faults"].annotation == FaultConfig | None
    assert _Scenario.model_fields["faults"].annotation == FaultConfig | None


def test_faults_in_the_configuration_load_as_the_scripted_models_settings() -> None:
    settings = settings_from_layers([], overrides=_overrides({"seed": 7, "schema_violation": 0.25}))
    faults = settings.providers.backends[0].models[0].faults
    assert isinstance(faults, FaultConfig) and (faults.seed, faults.schema_violation) == (7, 0.25)
    assert faults.active and not FaultConfig().active


@pytest.mark.parametrize(
    ("faults", "named"), [({"schema_violaton": 0.2}, "schema_violaton"), ({"unknown_tool": 1.5}, "unknown_tool")]
)
def test_a_bad_fault_setting_fails_when_the_configuration_loads(faults: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        settings_from_layers([], overrides=_overrides(faults))
