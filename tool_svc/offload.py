"""Offload of large outputs at the source (docs/design.md §2, §4): an output over the threshold is stored
once in the session's payloads (`agentmesh.payloads`) and the result carries its ref plus a digest that
fits in a prompt; the model reads more with `read_payload`."""

from __future__ import annotations

import json
import logging

from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.payload_digest import digest
from agentmesh.payloads import PayloadStore, StoredPayload
from tool_svc.call import CallState
from tool_svc.cpu import CpuPool
from tool_svc.model import MEDIA_JSON, MEDIA_TEXT, Outcome, Output, Produced

log = logging.getLogger("tool_svc.offload")


def render(produced: Produced) -> str:
    """The output as text: compact JSON for structured values, the text itself otherwise."""
    if produced.result_type == "structured":
        return json.dumps(produced.value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return produced.text


class Offload:
    """Pipeline step (the last): the Output, inline or as a payload ref with a digest."""

    def __init__(self, payloads: PayloadStore | None, threshold_bytes: int, cpu: CpuPool | None = None) -> None:
        self.payloads = payloads
        self.threshold_bytes = threshold_bytes
        self.cpu = cpu

    async def __call__(self, call: CallState) -> Outcome | None:
        produced = call.produced
        assert produced is not None, "Offload runs after Execute"
        text = render(produced)
        content = text.encode("utf-8", "replace")
        call.bytes_out = len(content)
        call.stats.output_bytes = len(content)
        if len(content) <= self.threshold_bytes or not call.spec.offload or self.payloads is None:
            call.bytes_after_digest = len(content)
            return Output(result_type=produced.result_type, inline=text, redacted=call.redacted)
        media_type = MEDIA_JSON if produced.result_type == "structured" else MEDIA_TEXT
        try:
            stored = await self.payloads.put(call.request.session_id, content, media_type)
        except AgentmeshError as exc:
            if exc.code != ErrorCode.PAYLOAD_TOO_LARGE:
                raise
            return AgentmeshError(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"{call.spec.name}: output of {len(content)} bytes is too large to store: {exc.message}",
                fallback_tool=call.spec.fallback_tool,
            )
        summary = await self._digest(call, content, media_type)
        call.bytes_after_digest = len(summary.encode("utf-8"))
        return Output(
            result_type=produced.result_type,
            ref=StoredPayload(
                ref_id=stored.ref_id,
                session_id=stored.session_id,
                size_bytes=stored.size_bytes,
                media_type=stored.media_type,
                sha256=stored.sha256,
                expire_at=stored.expire_at,
            ),
            digest=summary,
            redacted=call.redacted,
        )

    async def _digest(self, call: CallState, content: bytes, media_type: str) -> str:
        goal = call.request.goal
        if self.cpu is None or self.cpu.inline(len(content)):
            # Up to 64 KiB a digest takes well under a millisecond: less than the process hop.
            return digest(content, media_type, goal=goal)
        # Parsing megabytes of JSON (or scanning a big log) is CPU-bound: off the event loop.
        try:
            return await self.cpu.run(
                digest,
                content,
                media_type,
                goal=goal,
                timeout_s=call.spec.timeout_s,
                what=f"digest of {call.spec.name}",
            )
        except AgentmeshError as exc:
            # The tool succeeded and its output is stored: failing the call now would invite a repeat
            # (of a write, perhaps). The ref says where the output is; the model reads it by range.
            log.warning("no digest of %s's output (%d bytes): %s", call.spec.name, len(content), exc)
            return (
                f"{len(content)} bytes of {media_type}; no digest ({exc.code.name}): "
                "read parts with read_payload (line_start/line_end, byte_start/byte_end or json_path)"
            )
