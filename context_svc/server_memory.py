"""The memory RPCs of ContextService (Remember, ListMemories, Forget): protobuf <-> memory.py's domain.

Part of the RPC edge with server.py (whose servicer mixes `MemoryRpcs` in): only mapping and one
domain call per RPC; the checks and the storage are memories.py's and memory_store.py's.
"""

from __future__ import annotations

from typing import Any, Protocol

import grpc.aio

from agentmesh.errors import InvalidRequestError
from agentmesh.identity_value import require_identity
from agentmesh.rpc import codec
from agentmesh.v1 import context_pb2
from context_svc.memories import Memories
from context_svc.memory import MemoryKind, MemoryRecord, Scope, Source, Subject
from context_svc.model import Caller

__all__ = ["MemoryRpcs", "caller", "record_pb", "subject_domain"]

_SCOPE_FROM_PB = {
    context_pb2.MEMORY_SCOPE_USER: Scope.USER,
    context_pb2.MEMORY_SCOPE_AGENT: Scope.AGENT,
    context_pb2.MEMORY_SCOPE_TENANT: Scope.TENANT,
}
_SCOPE_TO_PB = {v: k for k, v in _SCOPE_FROM_PB.items()}
_KIND_FROM_PB = {
    context_pb2.MEMORY_KIND_FACT: MemoryKind.FACT,
    context_pb2.MEMORY_KIND_PREFERENCE: MemoryKind.PREFERENCE,
    context_pb2.MEMORY_KIND_EVENT: MemoryKind.EVENT,
}
_KIND_TO_PB = {v: k for k, v in _KIND_FROM_PB.items()}


def caller() -> Caller:
    """The domain caller of the current RPC (from the verified identity token)."""
    identity = require_identity()
    return Caller(
        subject=identity.subject,
        agent_id=identity.agent_id,
        is_operator=identity.has_role("operator"),
        task_id=identity.task_id,
        creator=identity.creator,
    )


def subject_domain(subject: context_pb2.MemorySubject) -> Subject:
    scope = _SCOPE_FROM_PB.get(subject.scope)
    if scope is None:
        raise InvalidRequestError("subject.scope", f"one of USER, AGENT, TENANT (got {int(subject.scope)})")
    return Subject(scope, subject.id)  # InvalidRequestError naming subject.id


def record_pb(record: MemoryRecord) -> context_pb2.MemoryRecord:
    pb = context_pb2.MemoryRecord(
        memory_id=record.memory_id,
        subject=context_pb2.MemorySubject(scope=_SCOPE_TO_PB[record.subject.scope], id=record.subject.id),
        text=record.text,
        kind=_KIND_TO_PB[record.kind],
        source=context_pb2.MemorySource(
            session_id=record.source.session_id,
            message_index=record.source.message_index,
            task_id=record.source.task_id,
        ),
        create_time=codec.timestamp(record.created_at),
        superseded_by=record.superseded_by,
    )
    if record.expires_at is not None:
        pb.expire_time.CopyFrom(codec.timestamp(record.expires_at))
    return pb


class _HasMemory(Protocol):
    memory: Memories


class MemoryRpcs:
    """Remember, ListMemories and Forget, mixed into the ContextService servicer."""

    engine: _HasMemory

    async def Remember(
        self, request: context_pb2.RememberRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.RememberResponse:
        if not request.HasField("subject"):
            raise InvalidRequestError("subject", "required")
        kind = _KIND_FROM_PB.get(request.kind)
        if kind is None:
            raise InvalidRequestError("kind", f"one of FACT, PREFERENCE, EVENT (got {int(request.kind)})")
        remembered = await self.engine.memory.remember(
            caller(),
            subject_domain(request.subject),
            request.text,
            kind,
            source=Source(
                session_id=request.source.session_id,
                message_index=int(request.source.message_index),
                task_id=request.source.task_id,
            ),
            ttl_s=request.ttl.ToNanoseconds() / 1e9 if request.HasField("ttl") else None,
        )
        return context_pb2.RememberResponse(
            record=record_pb(remembered.record),
            already_remembered=remembered.already,
            superseded_ids=list(remembered.superseded),
        )

    async def ListMemories(
        self, request: context_pb2.ListMemoriesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.ListMemoriesResponse:
        if not request.HasField("subject"):
            raise InvalidRequestError("subject", "required")
        records = await self.engine.memory.list_records(
            caller(), subject_domain(request.subject), include_inactive=request.include_inactive
        )
        return context_pb2.ListMemoriesResponse(records=[record_pb(r) for r in records])

    async def Forget(
        self, request: context_pb2.ForgetRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> context_pb2.ForgetResponse:
        target = request.WhichOneof("target")
        if target == "memory_id":
            deleted = await self.engine.memory.forget(caller(), request.memory_id)
        elif target == "subject":
            deleted = await self.engine.memory.forget_subject(caller(), subject_domain(request.subject))
        else:
            raise InvalidRequestError("target", "one of memory_id or subject is required")
        return context_pb2.ForgetResponse(deleted_count=deleted)
