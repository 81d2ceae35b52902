"""`@tool`: a typed Python function as a tool contract; `serve`: the tools over MCP (the official SDK's MCPServer).

The contract is what agentmesh's gateway enforces once tool_svc mounts the server (`tools.mcp_servers`):
- the input schema comes from the type hints (the SDK builds a pydantic model of the signature: `str`,
  `int`, `Literal[...]`, `list[...]`, pydantic models, `Annotated[..., Field(description=...)]`, defaults);
  a return type that pydantic can describe becomes the output schema (structured output);
- the description is the docstring (or `description=`), what the model and tool discovery read: a tool
  without one is refused, since a model cannot choose a tool it cannot read about;
- `access` ("read" or "write"), `requires_approval` and `idempotent` travel as the MCP annotations
  readOnlyHint, destructiveHint and idempotentHint, which tool_svc believes for a server configured with
  `trust_annotations: true` (your own server). A read never needs an approval in agentmesh, so
  `requires_approval=True` with `access="read"` is refused; a write needs one unless it says otherwise.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool as SdkTool
from mcp_types import ToolAnnotations

__all__ = ["FunctionTool", "registered", "serve", "server", "tool"]

Access = Literal["read", "write"]
F = TypeVar("F", bound=Callable[..., Any])
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_REGISTERED: dict[str, FunctionTool] = {}


@dataclass(frozen=True)
class FunctionTool:
    """A function and its contract."""

    fn: Callable[..., Any]
    name: str
    description: str
    access: Access
    requires_approval: bool
    idempotent: bool
    sdk_tool: SdkTool
    """The SDK's registration of it (what `serve` hands MCPServer)."""

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments (from the type hints)."""
        return dict(self.sdk_tool.parameters)

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of the result, when the return type makes the output structured."""
        schema = self.sdk_tool.fn_metadata.output_schema
        return dict(schema) if schema is not None else None

    @property
    def annotations(self) -> ToolAnnotations:
        annotations = self.sdk_tool.annotations
        assert annotations is not None
        return annotations

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the function itself (a decorated function stays callable and testable)."""
        return self.fn(*args, **kwargs)


def _annotations(access: Access, requires_approval: bool, idempotent: bool, title: str | None) -> ToolAnnotations:
    if access == "read":
        return ToolAnnotations(title=title, read_only_hint=True, idempotent_hint=True)
    return ToolAnnotations(
        title=title, read_only_hint=False, destructive_hint=requires_approval, idempotent_hint=idempotent
    )


def _make(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    access: Access,
    requires_approval: bool | None,
    idempotent: bool,
    title: str | None,
) -> FunctionTool:
    tool_name: str = name or str(getattr(fn, "__name__", ""))
    if not _NAME.fullmatch(tool_name):
        raise ValueError(f"tool name {tool_name!r}: use 1-64 letters, digits, '_', '.' or '-'")
    if access not in ("read", "write"):
        raise ValueError(f"tool {tool_name}: access must be 'read' or 'write', not {access!r}")
    if access == "read" and requires_approval:
        raise ValueError(f"tool {tool_name}: a read never needs an approval; use access='write' for a change")
    text = " ".join((description if description is not None else inspect.getdoc(fn) or "").split())
    if not text:
        raise ValueError(f"tool {tool_name}: give it a docstring (or description=): the model chooses tools by it")
    approval = access == "write" if requires_approval is None else requires_approval
    sdk_tool = SdkTool.from_function(
        fn,
        name=tool_name,
        title=title,
        description=text,
        annotations=_annotations(access, approval, idempotent or access == "read", title),
    )
    return FunctionTool(fn, tool_name, text, access, approval, idempotent or access == "read", sdk_tool)


@overload
def tool(fn: F, /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    access: Access = "read",
    requires_approval: bool | None = None,
    idempotent: bool = False,
    title: str | None = None,
) -> Callable[[F], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    access: Access = "read",
    requires_approval: bool | None = None,
    idempotent: bool = False,
    title: str | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Makes a typed function a tool: `@tool` or `@tool(name=..., access="write", requires_approval=False)`.

    `access`: "read" (default: no side effect, retried on transient failures, no approval) or "write";
    `requires_approval`: for a write, whether an operator must approve each call (default True);
    `idempotent`: a write that may safely run twice (then retried like a read). Sync or async functions.
    ValueError at decoration for a bad name, no description, or a signature the SDK cannot describe."""

    def decorate(function: Callable[..., Any]) -> FunctionTool:
        made = _make(
            function,
            name=name,
            description=description,
            access=access,
            requires_approval=requires_approval,
            idempotent=idempotent,
            title=title,
        )
        if made.name in _REGISTERED and _REGISTERED[made.name].fn is not function:
            raise ValueError(f"tool {made.name}: two functions have this name")
        _REGISTERED[made.name] = made
        return made

    return decorate(fn) if fn is not None else decorate


def registered() -> list[FunctionTool]:
    """Every tool decorated in this process, in order."""
    return list(_REGISTERED.values())


def server(tools: Sequence[FunctionTool] = (), *, name: str = "agentmesh-tools") -> MCPServer[Any]:
    """An MCPServer (the official SDK's) serving `tools` (default: every decorated one)."""
    chosen = list(tools) or registered()
    if not chosen:
        raise ValueError("no tools: decorate functions with @tool first")
    return MCPServer(name, log_level="WARNING", tools=[t.sdk_tool for t in chosen])


def serve(
    *tools: FunctionTool,
    transport: Literal["stdio", "http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str = "agentmesh-tools",
) -> None:
    """Serves the tools over MCP until the client goes (stdio: its stdin closes) or Ctrl-C (http: streamable
    HTTP at http://HOST:PORT/mcp). stdout is the protocol's over stdio: print to stderr in your tools."""
    app = server(tools, name=name)
    if transport == "stdio":
        app.run("stdio")
    else:
        app.run("streamable-http", host=host, port=port)
