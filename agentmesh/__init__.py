"""agentmesh: a production runtime for LLM agents, as four gRPC services sharing this package."""

__version__ = "0.1.0"
