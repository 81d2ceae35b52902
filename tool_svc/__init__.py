"""tool_svc: see DESIGN.md; started alone with `python -m tool_svc [agentmesh.yaml]`."""
