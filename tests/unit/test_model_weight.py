"""Domain models are light (issue 47): importing one loads under 150 modules, and no infrastructure.

Each module is imported in a fresh interpreter and the modules it adds to `sys.modules` are counted.
A domain model that reached the store, the authenticator or the config (Redis, JWT, httpx, pydantic
settings, OpenTelemetry) loaded about 630 modules; the values it needs live in light modules
(`agentmesh.identity_value`, `agentmesh.payload_value`, `agentmesh.errors`, `agentmesh.chat`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 150
# The light core and every service's domain model module.
MODELS = (
    "agentmesh.errors",
    "agentmesh.chat",
    "agentmesh.identity_value",
    "agentmesh.payload_value",
    "tool_svc.model",
    "context_svc.model",
    "dispatcher_svc.model",
    "dispatcher_svc.model_json",
    "provider_svc.models.base",
)
# Top-level packages of infrastructure a domain model must never load (it gets them through an edge).
HEAVY = ("redis", "httpx", "jwt", "pydantic_settings", "opentelemetry", "grpc", "yaml", "jsonpath_rfc9535")

_SCRIPT = (
    "import importlib, json, sys\n"
    "before = set(sys.modules)\n"
    "importlib.import_module(sys.argv[1])\n"
    "print(json.dumps(sorted(set(sys.modules) - before)))\n"
)


def loaded_by(module: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, module], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names: list[str] = json.loads(proc.stdout)
    return names


@pytest.mark.parametrize("module", MODELS)
def test_a_domain_model_loads_few_modules_and_no_infrastructure(module: str) -> None:
    loaded = loaded_by(module)
    assert module in loaded  # the count is of a real, first import
    heavy = sorted({m.split(".", 1)[0] for m in loaded} & set(HEAVY))
    assert not heavy, f"{module} loads infrastructure: {heavy}"
    assert len(loaded) < LIMIT, f"{module} loads {len(loaded)} modules (limit {LIMIT}): {loaded}"


def test_the_count_sees_a_heavy_import() -> None:
    """The measure can fail: the payload store (Redis, JSONPath) is far over the limit."""
    loaded = loaded_by("agentmesh.payloads")
    assert len(loaded) > LIMIT
    assert "redis" in loaded
