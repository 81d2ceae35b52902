"""dispatcher_svc: see DESIGN.md; started alone with `python -m dispatcher_svc [agentmesh.yaml]`."""
