"""agentmesh-tools: tools written as typed Python functions, served over MCP for agentmesh's tool gateway.

    from agentmesh_tools import serve, tool

    @tool(access="read")
    def get_weather(city: str) -> dict[str, object]:
        \"\"\"How hot or cold it is in a city right now.\"\"\"
        return {"city": city, "temperature_c": -3}

    if __name__ == "__main__":
        serve()                       # MCP over stdio; serve(transport="http", port=8000) for streamable HTTP

Mount it in agentmesh.yaml (`tools.mcp_servers`, `trust_annotations: true`): every call then goes through
agentmesh's gateway (schema validation, permissions, approvals, rate limits, breaker, retries, traces).
Raise `ToolError("...")` for a failure the model should read; any other exception is reported without
its text. This package never imports agentmesh.
"""

from mcp.server.mcpserver.exceptions import ToolError

from agentmesh_tools._tool import FunctionTool, registered, serve, server, tool

__all__ = ["FunctionTool", "ToolError", "registered", "serve", "server", "tool"]
