"""The workflows a dispatcher knows: `workflows.definitions` plus one file per workflow in
`workflows.folder`, each checked (`validate.compile_workflow`) when the dispatcher starts.

A bad definition stops the start (ConfigError, exit 2) with the file, the workflow, the node and
the field named; a runtime catalog (RegisterWorkflow, versions) is still to come.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agentmesh.config import ConfigError, Settings
from agentmesh.workflow_config import WorkflowDefinition, WorkflowsSettings
from dispatcher_svc.workflows.errors import WorkflowInvalidError
from dispatcher_svc.workflows.validate import Names, Workflow, compile_workflow

__all__ = ["FILE_SUFFIXES", "definition_from_data", "load_catalog", "load_catalog_or_config_error", "read_definition"]

FILE_SUFFIXES = (".yaml", ".yml", ".json")


def definition_from_data(data: Any, *, label: str = "") -> WorkflowDefinition:
    """A definition from parsed YAML/JSON; WorkflowInvalidError naming the node (by id) and the field."""
    name = str(data.get("name", label)) if isinstance(data, Mapping) else label
    try:
        return WorkflowDefinition.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = list(error["loc"])
        node = ""
        raw_nodes = data.get("nodes") if isinstance(data, Mapping) else None
        if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int) and isinstance(raw_nodes, list):
            raw = raw_nodes[loc[1]] if loc[1] < len(raw_nodes) else {}
            node = str(raw.get("id", f"#{loc[1]}")) if isinstance(raw, Mapping) else f"#{loc[1]}"
            loc = loc[2:]
            if loc and isinstance(raw, Mapping) and loc[0] == raw.get("type"):
                loc = loc[1:]  # the discriminated union's tag
        message = (
            "unknown key" if error["type"] == "extra_forbidden" else str(error["msg"]).removeprefix("Value error, ")
        )
        if not loc and message.startswith("node "):
            # Our own model validators already name the node and the field: "node 'x': type: ...".
            head, _, rest = message.partition(": ")
            node = head.removeprefix("node ").strip("'\"")
            field, _, message = rest.partition(": ")
            return _raise(name, node, field, message)
        return _raise(name, node, ".".join(str(part) for part in loc) or "(definition)", message)


def _raise(workflow: str, node: str, field: str, reason: str) -> WorkflowDefinition:
    raise WorkflowInvalidError(workflow, node, field, reason)


def read_definition(path: Path) -> WorkflowDefinition:
    """One workflow file (YAML or JSON); WorkflowInvalidError whose workflow names the file too."""
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise WorkflowInvalidError(path.name, "", "(file)", f"{path}: cannot read it: {exc}") from None
    try:
        return definition_from_data(data, label=path.stem)
    except WorkflowInvalidError as exc:
        raise WorkflowInvalidError(f"{exc.workflow} ({path.name})", exc.node, exc.field, exc.reason) from None


def load_catalog(settings: Settings) -> dict[str, Workflow]:
    """Every configured workflow by name, checked; WorkflowInvalidError on the first bad one."""
    config: WorkflowsSettings = settings.workflows
    definitions = list(config.definitions)
    if config.folder is not None:
        if not config.folder.is_dir():
            raise WorkflowInvalidError("", "", "workflows.folder", f"{config.folder} is not a folder")
        for path in sorted(config.folder.iterdir()):
            if path.suffix in FILE_SUFFIXES and path.is_file():
                definitions.append(read_definition(path))
    names = Names.of(settings)
    catalog: dict[str, Workflow] = {}
    for definition in definitions:
        if definition.name in catalog:
            raise WorkflowInvalidError(definition.name, "", "name", "two workflows have this name")
        catalog[definition.name] = compile_workflow(definition, names, config)
    return catalog


def load_catalog_or_config_error(settings: Settings) -> dict[str, Workflow]:
    """`load_catalog` for a starting dispatcher: a bad definition is a configuration error (exit 2)."""
    try:
        return load_catalog(settings)
    except WorkflowInvalidError as exc:
        raise ConfigError(f"invalid workflow: {exc.message}") from None
