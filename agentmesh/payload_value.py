"""A stored payload as a value: its ref, size, media type and the ref-id vocabulary.

The light half of `agentmesh.payloads` (which re-exports these names): domain models hold a
StoredPayload without loading the payload store's Redis and JSONPath libraries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from agentmesh.errors import InvalidRequestError

__all__ = [
    "MEDIA_JSON",
    "MEDIA_TEXT",
    "OFFLOAD_THRESHOLD_BYTES",
    "REF_PREFIX",
    "StoredPayload",
    "clip",
    "is_json_media_type",
    "parse_ref_id",
    "ref_id_for",
]

OFFLOAD_THRESHOLD_BYTES: Final = 2048
"""Tool outputs above this many bytes are stored as payloads; the prompt gets a ref + digest."""
MEDIA_JSON: Final = "application/json"
MEDIA_TEXT: Final = "text/plain; charset=utf-8"
REF_PREFIX: Final = "pl_"
_REF_RE = re.compile(r"pl_([0-9a-f]{64})")


@dataclass(frozen=True)
class StoredPayload:
    """Domain mirror of common.proto PayloadRef."""

    ref_id: str  # "pl_" + sha256 hex
    session_id: str  # the session storing it (for a granted ref, not the reader's: payload_grants.py)
    size_bytes: int
    media_type: str  # "application/json" or "text/plain; charset=utf-8" ...
    sha256: str
    expire_at: float  # Unix seconds


def ref_id_for(sha256: str) -> str:
    """The ref id of content with this sha256 hex digest."""
    return REF_PREFIX + sha256


def parse_ref_id(ref_id: str) -> str:
    """The sha256 a ref id names; InvalidRequestError (field ref_id) when it is malformed."""
    match = _REF_RE.fullmatch(ref_id or "")
    if match is None:
        raise InvalidRequestError(
            "ref_id",
            f"{clip(ref_id or '', 80)!r} is not a payload ref (expected 'pl_' + 64 lowercase hex characters)",
            metadata={"ref_id": clip(ref_id or "", 100)},
        )
    return match.group(1)


def is_json_media_type(media_type: str) -> bool:
    """application/json, application/problem+json, text/json ..."""
    main = media_type.split(";", 1)[0].strip().lower()
    return main.endswith("/json") or main.endswith("+json")


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"
