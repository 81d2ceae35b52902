"""What one incoming call knows about itself: request id, deadline and identity token.

The RPC edge (`agentmesh.rpc`) fills these context variables when a call starts and reads them
for every outgoing call, so a downstream call carries the same request id, the remaining deadline
and the caller's token without domain code passing them. Domain code reads them (e.g. the time
left) without knowing any transport: this module imports neither grpc nor the stubs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any

REQUEST_ID_HEADER = "x-request-id"
IDENTITY_HEADER = "x-agentmesh-identity"
ECHO_HEADER = "x-agentmesh-echo"
"""Sent as `0` by agentmesh's own clients (`agentmesh.rpc.channels`): they know the request id they
sent and never read it back, so a successful unary reply leaves it out of its initial metadata, which
gRPC would otherwise send in a write of its own before the reply (issue 45). Errors and streams echo it
whatever this says."""

request_id_var: ContextVar[str | None] = ContextVar("agentmesh_request_id", default=None)
deadline_var: ContextVar[float | None] = ContextVar("agentmesh_deadline", default=None)
"""Absolute time.monotonic() at which the incoming call's deadline passes."""
identity_token_var: ContextVar[str | None] = ContextVar("agentmesh_identity_token", default=None)
"""The raw identity token of the incoming call, forwarded unchanged to downstream calls."""
echo_var: ContextVar[bool] = ContextVar("agentmesh_echo_request_id", default=True)
"""False when the incoming call's client declined the request id's echo on success (`ECHO_HEADER`)."""


def new_request_id() -> str:
    """A fresh request id (minted once, at the edge)."""
    return uuid.uuid4().hex


def current_request_id() -> str | None:
    """The request id of the call being served, if any."""
    return request_id_var.get()


def remaining_time() -> float | None:
    """Seconds left before the incoming call's deadline, or None outside a call with a deadline."""
    deadline = deadline_var.get()
    if deadline is None:
        return None
    return deadline - time.monotonic()


def metadata_value(metadata: Iterable[Any] | None, key: str) -> str | None:
    """The first value of a metadata key, as text (metadata may be None or a tuple of pairs)."""
    if not metadata:
        return None
    for item in metadata:
        name, value = item[0], item[1]
        if name == key:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return None
