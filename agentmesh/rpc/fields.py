"""What the contracts say about fields and methods, read from the descriptors once.

- `missing_required(message)`: the REQUIRED fields (`google.api.field_behavior`) a request left
  unset, as paths (`call`, `messages[2].role`); the edge answers INVALID_ARGUMENT naming them
  (docs/design.md §11), so no servicer checks presence by hand.
- `retry_safe_methods(files)`: the (service, method) pairs whose `idempotency_level` is
  IDEMPOTENT or NO_SIDE_EFFECTS: the only calls a client may retry.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from google.api import field_behavior_pb2  # type: ignore[import-untyped]
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor, MethodDescriptor
from google.protobuf.descriptor_pb2 import MethodOptions
from google.protobuf.message import Message

__all__ = ["missing_required", "retry_safe_methods"]

_REQUIRED = field_behavior_pb2.REQUIRED
_RETRY_SAFE = (MethodOptions.IDEMPOTENT, MethodOptions.NO_SIDE_EFFECTS)


def _behaviors(field: FieldDescriptor) -> Any:
    return field.GetOptions().Extensions[field_behavior_pb2.field_behavior]


def _is_repeated(field: Any) -> bool:
    return bool(field.is_repeated)


@cache
def _plan(descriptor: Descriptor) -> tuple[tuple[str, ...], tuple[tuple[str, bool], ...]]:
    """(required field names, message fields to descend into as (name, repeated)) of a message type."""
    required = tuple(f.name for f in descriptor.fields if _REQUIRED in _behaviors(f))
    nested = tuple(
        (f.name, _is_repeated(f))
        for f in descriptor.fields
        if f.message_type is not None and not f.message_type.GetOptions().map_entry and _has_required(f.message_type)
    )
    return required, nested


@cache
def _has_required(descriptor: Descriptor, _seen: frozenset[str] = frozenset()) -> bool:
    if descriptor.full_name in _seen:
        return False
    seen = _seen | {descriptor.full_name}
    for field in descriptor.fields:
        if _REQUIRED in _behaviors(field):
            return True
        if field.message_type is not None and _has_required(field.message_type, seen):
            return True
    return False


def _missing(message: Message, name: str) -> bool:
    field = message.DESCRIPTOR.fields_by_name[name]
    if _is_repeated(field):
        return len(getattr(message, name)) == 0
    if field.message_type is not None:
        return not message.HasField(name)
    return not getattr(message, name)


def missing_required(message: Message, prefix: str = "", depth: int = 0) -> list[str]:
    """Paths of the REQUIRED fields left unset in `message` and in the messages it holds."""
    required, nested = _plan(message.DESCRIPTOR)
    missing = [f"{prefix}{name}" for name in required if _missing(message, name)]
    if depth >= 32:  # protobuf nests at most 100 deep; no contract of ours nests this far
        return missing
    for name, repeated in nested:
        if repeated:
            for index, item in enumerate(getattr(message, name)):
                missing += missing_required(item, f"{prefix}{name}[{index}].", depth + 1)
        elif message.HasField(name):
            missing += missing_required(getattr(message, name), f"{prefix}{name}.", depth + 1)
    return missing


def _methods(files: Iterable[FileDescriptor]) -> Iterable[MethodDescriptor]:
    for file in files:
        for service in file.services_by_name.values():
            yield from service.methods


def retry_safe_methods(files: Iterable[FileDescriptor]) -> tuple[tuple[str, str], ...]:
    """(service full name, method) of every method marked IDEMPOTENT or NO_SIDE_EFFECTS."""
    return tuple(
        (method.containing_service.full_name, method.name)
        for method in _methods(files)
        if method.GetOptions().idempotency_level in _RETRY_SAFE
    )
