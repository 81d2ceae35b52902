"""`agentmesh config show` (the effective configuration, each value with its source) and `agentmesh init`.

Sources, later winning: the schema's defaults, the packaged defaults (agentmesh/defaults/agentmesh.yaml),
each configuration file in order, the `AGENTMESH_*` environment variables, the command's own flags
(`--ca/--cert/--key`). A value is attributed to the last of them that set it or a mapping/list holding it.
Items of named lists (agents by `id`, tools, servers, backends and models by `name`) are shown as
`agents[assistant].model`, as an overlay merges them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from agentmesh.config import FoundConfig, Layer, Settings
from agentmesh.configfiles import named_list_key

__all__ = ["STARTER_CONFIG", "STARTER_TOOLS", "flatten", "init_command", "show_command", "sources"]

_MAX_SHOWN = 100


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf path -> value: mappings by key (`a.b`), named lists by item (`agents[ops].model`), anything
    else (plain lists, scalars, empty mappings) a leaf."""
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and value and (key := named_list_key(value)) is not None:
        out = {}
        for item in value:
            rest = {k: v for k, v in item.items() if k != key}
            out.update(flatten(rest, f"{prefix}[{item[key]}]") if rest else {f"{prefix}[{item[key]}]": {}})
        return out
    return {prefix: value}


def _ancestors(path: str) -> Iterable[str]:
    """`path` and every path that holds it (`a[b].c` -> `a[b].c`, `a[b]`, `a`)."""
    current = path
    while current:
        yield current
        cut = max(current.rfind("."), current.rfind("["))
        if cut <= 0:
            return
        current = current[:cut]


def _environment_source(path: str, env: Mapping[str, str]) -> str | None:
    """The AGENTMESH_* variable that sets `path` (a key of a section, or the whole section), if any."""
    names = {name.upper(): name for name in env if name.upper().startswith("AGENTMESH_")}
    section, _, rest = path.partition(".")
    section = section.split("[", 1)[0]
    key = rest.split(".", 1)[0].split("[", 1)[0]
    for candidate in ([f"AGENTMESH_{section}_{key}"] if key else []) + [f"AGENTMESH_{section}"]:
        found = names.get(candidate.upper())
        if found is not None:
            return f"environment {found}"
    return None


def sources(
    effective: Mapping[str, Any],
    layers: list[Layer],
    *,
    env: Mapping[str, str],
    flags: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Leaf path -> where its value came from: a flag, an environment variable, a layer's label, or
    "default" (the schema's own default)."""
    flag_paths = set(flatten(flags or {}))
    layer_paths = [(layer.label, set(flatten(layer.data))) for layer in layers]
    found: dict[str, str] = {}
    for path in effective:
        holders = list(_ancestors(path))
        if any(p in flag_paths for p in holders):
            found[path] = "--ca/--cert/--key"
            continue
        from_env = _environment_source(path, env)
        if from_env is not None:
            found[path] = from_env
            continue
        found[path] = next(
            (label for label, paths in reversed(layer_paths) if any(p in paths for p in holders)), "default"
        )
    return found


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"


def show_command(
    settings: Settings,
    found: FoundConfig,
    layers: list[Layer],
    *,
    as_json: bool = False,
    key: str = "",
    flags: Mapping[str, Any] | None = None,
    out: TextIO | None = None,
) -> int:
    """Prints every key of the effective configuration (secrets masked) with its source; 1 when `key`
    matches nothing."""
    out = out or sys.stdout
    effective = flatten(settings.model_dump(mode="json"))
    origin = sources(effective, layers, env=os.environ, flags=flags)
    chosen = [path for path in effective if not key or path == key or path.startswith((f"{key}.", f"{key}["))]
    if not chosen:
        print(f"agentmesh config show: no key {key!r} (try agents, tools, providers, services)", file=sys.stderr)
        return 1
    if as_json:
        json.dump({path: {"value": effective[path], "source": origin[path]} for path in chosen}, out, indent=2)
        out.write("\n")
        return 0
    out.write("# configuration, each later source winning:\n")
    for layer in layers:
        out.write(f"#   {layer.label}" + (f" ({layer.path})" if layer.label != str(layer.path) else "") + "\n")
    out.write(f"#   then AGENTMESH_* variables (files from {found.source})\n")
    width = min(max(len(path) + 2 + len(_shown(effective[path])) for path in chosen), 88)
    for path in chosen:
        line = f"{path}: {_shown(effective[path])}"
        out.write(f"{line:<{width}}  # {origin[path]}\n")
    return 0


STARTER_CONFIG = """\
# Your own agent and tools. This file adds to agentmesh's packaged defaults (agent `assistant`, the
# built-in tools, the offline `scripted` model): mappings merge key by key, lists of named items (agents
# by `id`, tools, servers and models by `name`) item by item. `agentmesh config show` prints every value
# in effect and which file set it.

tools:
  mcp_servers:
    # tools.py: Python functions that agentmesh_tools serves over MCP. tool_svc starts it (relative paths
    # from where `agentmesh up` runs) and mounts each function as mytools__<name>: every call goes through
    # the gateway (schema, permissions, approvals, rate limits, breaker, retries, traces).
    - name: mytools
      transport: stdio
      command: python
      args: [tools.py]
      trust_annotations: true      # your own server: its read/write and approval hints are believed

agents:
  - id: helper
    description: Answers with your own tools.
    model: scripted/default        # offline; point a backend at your own model server (README)
    tools: [mcp.mytools]           # tool names or groups it is offered (mcp.<server>: all of a server's)
    permissions: ["*:mcp.mytools:read"]   # what its tasks' tokens may call: environment:group:access
    max_steps: 4
"""
"""The agentmesh.yaml `agentmesh init` writes."""

STARTER_TOOLS = '''\
"""Your tools: typed Python functions. `python tools.py` serves them over MCP (stdio); agentmesh.yaml
mounts them in tool_svc. The schema comes from the type hints, the description from the docstring."""

from agentmesh_tools import serve, tool

TEMPERATURES_C = {"oslo": -3, "bergen": 2, "paris": 12, "cairo": 31}


@tool(access="read")
def get_weather(city: str) -> dict[str, object]:
    """How hot or cold it is in a city right now: the temperature in degrees Celsius."""
    return {"city": city, "temperature_c": TEMPERATURES_C.get(city.lower(), 20)}


if __name__ == "__main__":
    serve()
'''
"""The tools.py `agentmesh init` writes."""


def init_command(folder: Path, *, force: bool = False, out: TextIO | None = None) -> int:
    """Writes agentmesh.yaml and tools.py into `folder`; 2 (writing nothing) when either exists without
    `force`."""
    out = out or sys.stdout
    files = {folder / "agentmesh.yaml": STARTER_CONFIG, folder / "tools.py": STARTER_TOOLS}
    existing = [path for path in files if path.exists()]
    if existing and not force:
        names = " and ".join(str(path) for path in existing)
        print(f"agentmesh init: {names} exist{'s' if len(existing) == 1 else ''}; --force overwrites", file=sys.stderr)
        return 2
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
        out.write(f"wrote {path}\n")
    out.write(
        "next: `agentmesh up &` here (tool_svc starts `python tools.py`), then "
        '`agentmesh run helper "How cold is it in Oslo?"`\n'
    )
    return 0
