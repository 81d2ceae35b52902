"""Workflows (issue 46): DAGs of agent, tool, condition, parallel and join nodes defined as data.

Domain modules only (no grpc, no stubs, no Redis): `validate` checks a definition at load (graph,
names, templates, CEL), `catalog` loads them from the configuration, `templates` and `conditions` are
the sandboxed template engine and the CEL evaluator, `state` and `scheduler` are the pure decision
machine (which nodes are ready, what a failure leads to). Run state in Redis, the executor and the
RPCs are still to come (docs/architecture.md, Workflows).
"""
