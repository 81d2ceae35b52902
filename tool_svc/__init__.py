"""tool_svc: see docs/architecture.md; started alone with `python -m tool_svc [agentmesh.yaml]`."""
