"""`agentmesh mcp serve`, its own package: agentmesh's governed tools to any MCP client, over stdio or streamable HTTP
(docs/design.md §16).

Every MCP request becomes a call of tool_svc's gRPC API made with the caller's own token (forwarded,
opaque, as `x-agentmesh-identity`; tool_svc verifies it): `tools/list` is ListTools of the tools the
token may use (unavailable ones left out), `tools/call` is ExecuteTool, so each call goes through the
whole gateway (validation, permissions, approvals, rate limits, breakers, redaction, offload).

The token: over stdio from `--token` or $AGENTMESH_TOKEN (one client per process); over HTTP from each
request's `Authorization: Bearer <token>`, else `--token`/$AGENTMESH_TOKEN (for clients that cannot send a
header; then only on a loopback address, since every local caller acts as that token), else 401. What the
token may use is its grants (`environment:group:access`): an agent's token with grants lists tools, an
operator's alone lists none, which the start-up line says. Over HTTP the endpoint's URL is printed at start.

Exactly once: a call's idempotency key is derived from the token, the MCP session (the `Mcp-Session-Id`
of a handshake-era HTTP session; one per process over stdio) and the JSON-RPC request id, so a request
the client re-sends is not run twice. A 2026-07-28 HTTP request has no session: unless the client names
a key (`_meta.agentmesh_idempotency_key`), each request is its own call. A write that needs an approval
answers a tool error naming the approval id (also in the result's `_meta`); after an operator approves
it (ResolveApproval), which runs the call, the client repeats the call with
`_meta.agentmesh_approval_id` and gets that run's result: the effect happens once.

The package's rooms, in the order a request crosses them: `command` (the CLI's entry: token checks, the
channel, the start-up line), `transports` (the low-level MCP server over stdio or streamable HTTP, whose
token and idempotency key each request acts with), `bridge` (MCP `tools/list` and `tools/call` as
ListTools and ExecuteTool), `results` (tool_svc's messages as MCP results). The CLI imports `command`
only when `agentmesh mcp serve` runs, so no other command loads the MCP SDK.
"""
