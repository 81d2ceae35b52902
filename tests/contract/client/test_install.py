"""`agentmesh-client` installs alone in a fresh venv and its README example runs against the services.

The venv gets clients/python only (pip may take grpcio, protobuf and googleapis-common-protos from the
package index or its cache): nothing else is installed, agentmesh itself is not importable there, and
the example (the ```python block of clients/python/README.md, the same as in README.md) streams a task
to SUCCEEDED and prints a typed error.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from pathlib import Path

from agentmesh.dev.codegen import ROOT
from tests.contract.client.conftest import target, token
from tests.contract.stack import AGENT, Stack

CLIENT = ROOT / "clients" / "python"
ALLOWED = {"grpcio", "protobuf", "googleapis-common-protos"}
# What a fresh venv holds before anything is installed.
BOOTSTRAP = {"pip", "setuptools"}

# The installed distributions beyond the bootstrap ones, and the requirement closure of agentmesh-client.
INVENTORY = r"""
import json, re
from importlib import metadata

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

def requires(name):
    found = []
    for req in metadata.requires(name) or []:
        if ";" in req and "extra" in req.split(";", 1)[1]:
            continue
        found.append(norm(re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0]))
    return found

closure, todo = set(), ["agentmesh-client"]
while todo:
    name = todo.pop()
    if name not in closure:
        closure.add(name)
        todo += requires(name)
installed = {norm(d.metadata["Name"]) for d in metadata.distributions()}
print(json.dumps({"direct": requires("agentmesh-client"), "closure": sorted(closure), "installed": sorted(installed)}))
"""


def readme_example(path: Path) -> str:
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) == 1, f"{path} must hold exactly one ```python block (the example)"
    return str(blocks[0])


async def run(*argv: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    process = await asyncio.create_subprocess_exec(
        *map(str, argv),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=240)
    assert process.returncode == 0, f"{argv} failed ({process.returncode}):\n{out.decode()}\n{err.decode()}"
    return out.decode()


def test_the_main_readme_shows_the_clients_example() -> None:
    example = readme_example(CLIENT / "README.md")
    assert example in (ROOT / "README.md").read_text(encoding="utf-8")


async def test_the_client_installs_alone_in_a_fresh_venv_and_its_readme_example_runs(
    stack: Stack, tmp_path: Path
) -> None:
    import json

    # A copy: pip builds a local project in its own tree (build/, *.egg-info), never in the checkout.
    source = tmp_path / "src"
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "AM_EXAMPLE_", "PYTHON", "VIRTUAL_ENV"))
    }
    await run(sys.executable, "-m", "venv", venv, env=env)
    await run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", source, env=env, cwd=tmp_path)

    inventory = json.loads(await run(python, "-I", "-c", INVENTORY, env=env, cwd=tmp_path))
    assert set(inventory["direct"]) == ALLOWED
    assert set(inventory["installed"]) - BOOTSTRAP == set(inventory["closure"]), inventory
    await run(
        python,
        "-I",
        "-c",
        "import importlib.util as u; assert u.find_spec('agentmesh') is None, 'agentmesh is importable'",
        env=env,
        cwd=tmp_path,
    )

    example_env = {
        **env,
        "AM_EXAMPLE_DISPATCHER": target(stack),
        "AM_EXAMPLE_TOKEN": token(stack),
        "AM_EXAMPLE_AGENT": AGENT,
    }
    out = await run(python, "-I", "-c", readme_example(CLIENT / "README.md"), env=example_env, cwd=tmp_path)
    lines = out.splitlines()
    assert any(re.fullmatch(r"\s*\d+ tool calculator \{.*\}", line) for line in lines), out
    assert any(re.fullmatch(r"\s*\d+ answer ANSWER: .+", line) for line in lines), out
    assert any(re.fullmatch(r"\s*\d+ status SUCCEEDED", line) for line in lines), out
    assert re.search(r"^task t-[0-9a-f]{32} SUCCEEDED$", out, re.MULTILINE), out
    error = re.search(r"^error NOT_FOUND NOT_FOUND ENGINEERING (.+) ([0-9a-f]{32})$", out, re.MULTILINE)
    assert error and "no-such-agent" in error.group(1), out
