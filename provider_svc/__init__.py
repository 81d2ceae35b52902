"""provider_svc: see docs/architecture.md; started alone with `python -m provider_svc [agentmesh.yaml]`."""
