"""agentmesh-client: run agentmesh tasks from Python (typed events, resumed streams, typed errors).

from agentmesh_client import Client

with Client("127.0.0.1:50051", token=token) as client:
    for event in client.run("assistant", "What is 6*7?"):
        print(event.sequence, type(event).__name__, event.message)
"""

from agentmesh_client import errors, events
from agentmesh_client.aio import AsyncClient, AsyncRun
from agentmesh_client.client import Client, Run
from agentmesh_client.errors import AgentmeshError
from agentmesh_client.events import (
    Agent,
    Answer,
    ApprovalRequired,
    ApprovalResolved,
    ClaimCheck,
    ContextBuilt,
    Correction,
    Event,
    Failure,
    Fallback,
    Handoff,
    Incident,
    ModelReply,
    StatusChanged,
    Step,
    Task,
    TaskStatus,
    ToolCall,
    ToolResult,
    UnknownEvent,
    Usage,
)

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentmeshError",
    "Answer",
    "ApprovalRequired",
    "ApprovalResolved",
    "AsyncClient",
    "AsyncRun",
    "ClaimCheck",
    "Client",
    "ContextBuilt",
    "Correction",
    "Event",
    "Failure",
    "Fallback",
    "Handoff",
    "Incident",
    "ModelReply",
    "Run",
    "StatusChanged",
    "Step",
    "Task",
    "TaskStatus",
    "ToolCall",
    "ToolResult",
    "UnknownEvent",
    "Usage",
    "__version__",
    "errors",
    "events",
]
