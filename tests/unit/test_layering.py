"""The layering rules of docs/architecture.md hold in what loads, and `make lint` enforces them.

- Every domain module (a service's modules but server.py, server_memory.py, server_spend.py,
  workflow_server.py, adapters.py, codec.py and __main__) and every core module of agentmesh (not rpc/,
  cli/, mcpserve/, dev/ or v1/) imports without loading grpc, in a fresh interpreter.
- `lint-imports` (run by `make lint`) fails on each fixture of tests/lint_fixtures: a service
  importing another, a domain module importing grpc or the stubs, the core importing the edge, a value of the
  light core importing infrastructure, a service's domain model importing the configuration, a service
  importing the developer tools (agentmesh.dev), the fact engine (context_svc.facts) importing the rest of
  context_svc, agentmesh, or one of its own upper layers.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("context_svc", "tool_svc", "provider_svc", "dispatcher_svc")
EDGE_MODULES = {"server", "server_memory", "server_spend", "workflow_server", "adapters", "codec", "__main__"}
FIXTURES = ROOT / "tests" / "lint_fixtures"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _modules(package: str) -> list[str]:
    root = importlib.import_module(package)
    return sorted(info.name for info in pkgutil.walk_packages(root.__path__, f"{package}."))


def core_modules() -> list[str]:
    edge = ("agentmesh.rpc", "agentmesh.cli", "agentmesh.mcpserve", "agentmesh.dev", "agentmesh.v1")
    return [m for m in _modules("agentmesh") if not m.startswith(edge)]


def domain_modules() -> list[str]:
    return [m for s in SERVICES for m in _modules(s) if m.rsplit(".", 1)[-1] not in EDGE_MODULES]


def test_no_domain_or_core_module_loads_grpc() -> None:
    modules = ["agentmesh", *core_modules(), *domain_modules()]
    assert len(modules) > 60, modules  # the walk found the tree
    # One interpreter, modules one at a time: the first that pulls grpc in is named.
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "    loaded = sorted(m for m in sys.modules if m == 'grpc' or m.startswith(('grpc.', 'agentmesh.v1')))\n"
        "    if loaded:\n"
        "        print(json.dumps([name, loaded[:5]])); sys.exit(1)\n"
        "print(json.dumps(None))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"loads grpc or the stubs: {proc.stdout.strip()} {proc.stderr[-2000:]}"
    assert json.loads(proc.stdout) is None


def test_the_core_contract_lists_every_core_module() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}
    assert sorted(contracts["core-grpc-free"]["source_modules"]) == core_modules()


def test_the_facts_contract_forbids_every_other_context_module() -> None:
    """context_svc.facts stands alone: its contract names every module of context_svc outside it (a new
    module cannot slip past), and its layers name every module inside it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}
    alone = contracts["facts-alone"]
    assert alone["source_modules"] == ["context_svc.facts"]
    inside = [m for m in _modules("context_svc") if m.startswith("context_svc.facts.")]
    outside = [m for m in _modules("context_svc") if m != "context_svc.facts" and m not in inside]
    assert "context_svc.engine" in outside and "context_svc.facts.facts" in inside
    assert sorted(alone["forbidden_modules"]) == sorted(["agentmesh", *outside])
    layered = {name.strip() for layer in contracts["facts-layers"]["layers"] for name in layer.split("|")}
    assert sorted(f"context_svc.facts.{name}" for name in layered) == inside


def _tree_copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("agentmesh", *SERVICES):
        shutil.copytree(ROOT / package, tree / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", "pyproject.toml", "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("fixture", "target", "append", "contract"),
    [
        ("service_imports_service.py", "context_svc/_lint_fixture.py", False, "A service never imports another"),
        ("domain_imports_grpc.py", "tool_svc/_lint_fixture.py", False, "Only the RPC edge"),
        ("domain_imports_stubs.py", "dispatcher_svc/_lint_fixture.py", False, "Only the RPC edge"),
        ("core_imports_grpc.py", "agentmesh/semconv.py", True, "The core never imports grpc"),
        ("value_imports_store.py", "agentmesh/chat.py", True, "The light core (values and vocabulary)"),
        ("model_imports_config.py", "tool_svc/model.py", True, "A service's domain values (its model modules)"),
        ("service_imports_dev.py", "provider_svc/_lint_fixture.py", False, "The services and the RPC edge never"),
        ("facts_imports_context.py", "context_svc/facts/labels.py", True, "The fact engine (context_svc.facts)"),
        ("facts_imports_agentmesh.py", "context_svc/facts/numbers.py", True, "The fact engine (context_svc.facts)"),
        ("facts_imports_upwards.py", "context_svc/facts/numbers.py", True, "The fact engine's modules import"),
    ],
)
def test_lint_fails_on_each_layering_violation(
    tmp_path: Path, fixture: str, target: str, append: bool, contract: str
) -> None:
    tree = _tree_copy(tmp_path)
    clean = _lint(tree)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-2000:]
    text = (FIXTURES / fixture).read_text(encoding="utf-8")
    path = tree / target
    path.write_text((path.read_text(encoding="utf-8") + "\n" if append else "") + text, encoding="utf-8")
    broken = _lint(tree)
    assert broken.returncode != 0, broken.stdout[-3000:]
    # The contract's name is wrapped across lines in the report: compare without line breaks.
    report = " ".join(broken.stdout.split())
    start = report.find(contract)
    assert start >= 0, report[-3000:]
    verdicts = [v for v in ("KEPT", "BROKEN") if report.find(v, start) >= 0]
    first = min(verdicts, key=lambda v: report.find(v, start))
    assert first == "BROKEN", report[-3000:]


CLIENT = ROOT / "clients" / "python"


def test_the_python_client_never_imports_agentmesh() -> None:
    """agentmesh_client (clients/python) is installed without agentmesh: in a fresh interpreter that sees
    only the client, every module of it imports, and nothing of agentmesh or the services loads."""
    modules = sorted(
        ".".join(path.relative_to(CLIENT).with_suffix("").parts).removesuffix(".__init__")
        for path in (CLIENT / "agentmesh_client").rglob("*.py")
    )
    assert "agentmesh_client.client" in modules and "agentmesh_client._v1.dispatcher_pb2_grpc" in modules
    banned = ("agentmesh", "context_svc", "tool_svc", "provider_svc", "dispatcher_svc", "grpc_status")
    script = (
        "import importlib, json, sys\n"
        f"sys.path[:0] = [{str(CLIENT)!r}]\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"loaded = sorted(m for m in sys.modules if m.split('.')[0] in {banned!r})\n"
        "print(json.dumps(loaded))\n"
    )
    # -I: neither the checkout (the working directory) nor PYTHONPATH is on the path.
    proc = subprocess.run([sys.executable, "-I", "-c", script], cwd=CLIENT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == []
