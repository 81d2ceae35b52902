"""provider_svc: see DESIGN.md; started alone with `python -m provider_svc [agentmesh.yaml]`."""
