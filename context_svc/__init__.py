"""context_svc: see DESIGN.md; started alone with `python -m context_svc [agentmesh.yaml]`."""
