"""MCP servers' tools behind the gateway (docs/design.md §16).

- `names.py`: registry names `<prefix>__<tool>` and their collisions;
- `catalog.py`: a server's tool listing -> ToolDefs (the annotations policy, the operator's overrides);
- `results.py`: a `tools/call` answer -> the executor's Produced, or a typed error;
- `connection.py`: one supervised client per configured server (stdio or streamable HTTP);
- `stderr.py`: a stdio server's stderr into our logs, through the redactor;
- `mount.py`: every configured server, its registry entries, the executor of MCP tools.

Domain modules: no grpc. `tool_svc.gateway` imports `mount` only when `tools.mcp_servers` is set, so a
tool_svc without MCP servers never loads the SDK.
"""
