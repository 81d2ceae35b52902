"""Argument validation of large calls in the CPU pool (docs/design.md §5, `tool_svc.cpu`).

`validation.ValidateArguments` parses the raw JSON and checks it against the tool's input schema on the
event loop: microseconds for the usual few hundred bytes, but for arguments of hundreds of KiB (up to
`tools.max_arguments_bytes`) parsing, a Draft 2020-12 check with patterns and the canonical hashes are
CPU-bound and would stall every RPC of the replica. Above `tools.cpu_inline_max_bytes` this step sends
the same work, done by the same functions of `validation.py`, to a worker process; below it, the process
hop would cost more than the work, so it stays inline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from agentmesh.chat import DEFAULT_MAX_JSON_DEPTH
from agentmesh.errors import AgentmeshError
from tool_svc.call import CallState
from tool_svc.cpu import CpuPool
from tool_svc.model import Outcome, arguments_sha256, call_sha256, canonical_json
from tool_svc.validation import SchemaCheck, ValidateArguments, parse_arguments, schema_error


@lru_cache(maxsize=64)
def _compiled(schema_json: str) -> SchemaCheck:
    # Per worker process: a tool's schema is compiled on its first large call, then reused.
    schema: Mapping[str, Any] = json.loads(schema_json)
    return SchemaCheck.compile(schema)


def validate_arguments(tool: str, raw: str, max_bytes: int, max_depth: int, schema_json: str) -> tuple[Any, str, str]:
    """Runs in a worker: (arguments, arguments_sha256, call_sha256) of a valid call; raises the
    ARGUMENTS_NOT_JSON / PAYLOAD_TOO_LARGE / SCHEMA_INVALID AgentmeshError ValidateArguments returns."""
    arguments = parse_arguments(raw, max_bytes=max_bytes, max_depth=max_depth)
    violations = _compiled(schema_json).violations(arguments)
    if violations:
        raise schema_error(tool, violations)
    return arguments, arguments_sha256(arguments), call_sha256(tool, arguments)


class ValidateArgumentsInPool(ValidateArguments):
    """Pipeline step: ValidateArguments, in the CPU pool for arguments over the inline limit."""

    def __init__(self, max_arguments_bytes: int, cpu: CpuPool, max_json_depth: int = DEFAULT_MAX_JSON_DEPTH) -> None:
        super().__init__(max_arguments_bytes, max_json_depth)
        self.cpu = cpu

    async def __call__(self, call: CallState) -> Outcome | None:
        raw = call.request.arguments_json
        size = len(raw.encode("utf-8", "surrogatepass"))
        # Over the maximum, ValidateArguments refuses before parsing: nothing to offload.
        if self.cpu.inline(size) or size > self.max_arguments_bytes:
            return await super().__call__(call)
        call.bytes_in = size
        spec = call.spec
        try:
            arguments, args_sha, call_sha = await self.cpu.run(
                validate_arguments,
                spec.name,
                raw,
                self.max_arguments_bytes,
                self.max_json_depth,
                canonical_json(spec.input_schema),
                timeout_s=spec.timeout_s,
                what=f"validation of the arguments of {spec.name}",
            )
        except AgentmeshError as exc:
            return exc
        call.arguments = arguments
        call.arguments_sha256 = args_sha
        call.call_sha256 = call_sha
        return None
