"""dispatcher_svc: see docs/architecture.md; started alone with `python -m dispatcher_svc [agentmesh.yaml]`."""
