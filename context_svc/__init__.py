"""context_svc: see docs/architecture.md; started alone with `python -m context_svc [agentmesh.yaml]`."""
