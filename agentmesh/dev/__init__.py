"""Developer tools, never imported by the services or the core (a lint-imports contract keeps it so).

- `codegen`: the Python modules of protos/agentmesh/v1 (`make protos`, buf's Python plugin, the client's copy);
- `deployfiles`: deploy/constraints.txt and the copies of agentmesh.yaml, so they cannot drift;
- `errordoc`: docs/errors.md from the error tables in the code;
- `localredis`: a throwaway local redis-server for `agentmesh up` and the tests.
"""
