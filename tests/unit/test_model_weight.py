"""Domain models are light (issue 47): importing one loads under 150 modules, and no infrastructure.

Each module is imported in a fresh interpreter and the modules it adds to `sys.modules` are counted.
A domain model that reached the store, the authenticator or the config (Redis, JWT, httpx, pydantic
settings, OpenTelemetry) loaded about 630 modules; the values it needs live in light modules
(`agentmesh.identity_value`, `agentmesh.payload_value`, `agentmesh.errors`, `agentmesh.chat`).

Which modules are domain models is a rule, not a list, so a new one is measured without editing this file:

- **A service's domain values**, which its server maps protobuf to and from and its peers exchange:
  `model.py` and its codecs `model_*.py` at the top of each of the four services, and provider_svc's
  `models/base.py` (the provider's values live beside the adapters' interface they type). Every service
  has at least one.
- **The light core**: every module the `light-core` import contract of pyproject.toml names (that contract
  keeps them off our infrastructure statically; this test counts what they load, third-party included),
  less the configuration readers of `CONFIG`: settings a process reads once at start-up, not values two
  sides exchange, built on pydantic, which alone loads about 149 modules. Those are still held to load no
  network client, RPC or telemetry.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 150
SERVICES = ("context_svc", "tool_svc", "provider_svc", "dispatcher_svc")
SERVICE_MODEL_EXTRA = ("provider_svc.models.base",)
"""Domain value modules not named model*.py (provider_svc's values are typed beside its adapters' interface)."""
CONFIG = {
    "agentmesh.config": "the YAML configuration's pydantic sections and pydantic-settings' environment",
    "agentmesh.workflow_config": "the workflows section's pydantic models (read with the configuration)",
    "agentmesh.configfiles": "the YAML reader of the configuration files",
}
"""Light-core modules that read configuration: no count limit, but no infrastructure either."""
INFRASTRUCTURE = ("redis", "httpx", "httpcore", "jwt", "opentelemetry", "grpc", "prometheus_client")
"""Top-level packages no light module loads: network clients, RPC, telemetry (it gets them through an edge)."""
PARSERS = ("yaml", "jsonpath_rfc9535", "pydantic", "pydantic_settings")
"""Libraries a service's values need none of (the light core may use one for its own job: JSONPath selection)."""


def service_models() -> list[str]:
    found = list(SERVICE_MODEL_EXTRA)
    for service in SERVICES:
        for path in sorted((ROOT / service).glob("model*.py")):
            found.append(f"{service}.{path.stem}")
    return found


def light_core() -> list[str]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (core,) = [c for c in contracts["contracts"] if c["id"] == "light-core"]
    modules: list[str] = core["source_modules"]
    return modules


_SCRIPT = (
    "import importlib, json, sys\n"
    "before = set(sys.modules)\n"
    "importlib.import_module(sys.argv[1])\n"
    "print(json.dumps(sorted(set(sys.modules) - before)))\n"
)


def loaded_by(module: str) -> list[str]:
    """The modules a first import of `module` adds, in a fresh interpreter run from the tree."""
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, module], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names: list[str] = json.loads(proc.stdout)
    return names


def _packages(loaded: list[str], among: tuple[str, ...]) -> list[str]:
    return sorted({m.split(".", 1)[0] for m in loaded} & set(among))


@pytest.mark.parametrize("module", service_models())
def test_a_services_domain_model_loads_few_modules_and_no_infrastructure(module: str) -> None:
    loaded = loaded_by(module)
    assert module in loaded  # the count is of a real, first import
    heavy = _packages(loaded, INFRASTRUCTURE + PARSERS)
    assert not heavy, f"{module} loads infrastructure or parsers: {heavy}"
    assert len(loaded) < LIMIT, f"{module} loads {len(loaded)} modules (limit {LIMIT}): {loaded}"


@pytest.mark.parametrize("module", light_core())
def test_a_light_core_module_loads_few_modules_and_no_infrastructure(module: str) -> None:
    loaded = loaded_by(module)
    assert module in loaded
    heavy = _packages(loaded, INFRASTRUCTURE)
    assert not heavy, f"{module} loads infrastructure: {heavy}"
    if module not in CONFIG:
        assert len(loaded) < LIMIT, f"{module} loads {len(loaded)} modules (limit {LIMIT}): {loaded}"


def test_the_rule_finds_every_services_model_and_the_core() -> None:
    models = service_models()
    for service in SERVICES:
        assert any(m.startswith(f"{service}.") for m in models), f"{service} has no domain model module"
    assert {"tool_svc.model", "context_svc.model", "dispatcher_svc.model", "dispatcher_svc.model_json"} <= set(models)
    core = light_core()
    assert {"agentmesh.errors", "agentmesh.chat", "agentmesh.identity_value", "agentmesh.payload_value"} <= set(core)
    assert set(CONFIG) <= set(core), "a CONFIG entry left the light core: remove it here"


def test_the_import_contract_holds_the_same_service_models() -> None:
    """lint-imports' `domain-models-light` keeps these modules off infrastructure and the configuration
    statically; its list is the rule's, so a new model module cannot slip past it."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (light,) = [c for c in contracts["contracts"] if c["id"] == "domain-models-light"]
    assert sorted(light["source_modules"]) == sorted(service_models())


def test_the_count_sees_a_heavy_import() -> None:
    """The measure can fail: the payload store (Redis, JSONPath) is far over the limit."""
    loaded = loaded_by("agentmesh.payloads")
    assert len(loaded) > LIMIT
    assert "redis" in loaded
