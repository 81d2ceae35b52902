"""`python -m dispatcher_svc.workflows.schema` writes docs/workflow.schema.json, the JSON Schema of
one workflow definition, generated from the pydantic model (tests check the committed file is current)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from agentmesh.workflow_config import WorkflowDefinition

__all__ = ["SCHEMA_PATH", "render_schema", "workflow_schema"]

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "workflow.schema.json"


def workflow_schema() -> dict[str, Any]:
    schema = WorkflowDefinition.model_json_schema(by_alias=True)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
    }


def render_schema() -> str:
    return json.dumps(workflow_schema(), indent=2, ensure_ascii=False, sort_keys=True) + "\n"


if __name__ == "__main__":
    SCHEMA_PATH.write_text(render_schema(), encoding="utf-8")
    sys.stdout.write(f"wrote {SCHEMA_PATH}\n")
