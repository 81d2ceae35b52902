"""Each step's provider request, kept with its task: the exact prompt (docs/design.md §7, §12).

With `dispatcher.record_prompts` (default on) every Generate asks provider_svc for the request as it
was sent upstream (messages, tools offered, tool choice, sampling, model; secrets masked there), and
the record rides on the fenced commit that checkpoints the step's reply (task_scripts.COMMIT_LUA):

- `am:task:{<task>}:prompts`, a hash in the task's hash tag: field = the step number, value = a
  record, zlib-compressed JSON `{"v": 1, "model", "format", "redacted", "time" (ms), "request" (the
  body text, verbatim)}`. One commit writes the reply and its request, so a step's record is always
  the request whose reply the task used (a resumed step that asks the model again overwrites it),
  and a crash never leaves one without the other.
- the commit script gives the hash the task's own TTL (expired with it, persisted when it is
  resumed): the same lifetime as the task. Offloaded from the task hash, which every read loads whole.

GetStepPrompt reads one back for the readers of the task's session: operators, and the tokens of the
tasks attached to the session, which context_svc decides (service.py asks it with the caller's own
token); to anyone else an unknown task and a refused one look the same.

Domain code: no grpc, no protobuf.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any, Final

from agentmesh.errors import (
    AgentmeshError,
    ErrorCode,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    echo,
)
from agentmesh.identity_value import Identity
from agentmesh.store import Store
from dispatcher_svc.model import SentPrompt

__all__ = ["PROMPT_ACCESS", "PromptStore", "StepPrompt", "decode_prompt", "encode_prompt", "prompt_denied"]

PROMPT_ACCESS: Final = "task:session-reader-or-operator"
"""The missing permission of a refused GetStepPrompt."""
_VERSION: Final = 1
_LEVEL: Final = 1
"""zlib level: a 50 KB request compresses about 4.6x in about half a millisecond (level 6: 6.3x, 2.8 ms)."""


@dataclass(frozen=True, slots=True)
class StepPrompt:
    """One step's provider request as it was sent."""

    task_id: str
    step: int
    session_id: str
    model: str
    """"provider/model" that answered."""
    format: str
    request_json: str
    redacted: bool
    create_time_ms: int


def encode_prompt(model: str, sent: SentPrompt, time_ms: int) -> bytes:
    """The stored record of a step's request."""
    record = {
        "v": _VERSION,
        "model": model,
        "format": sent.format,
        "redacted": sent.redacted,
        "time": time_ms,
        "request": sent.request_json,
    }
    return zlib.compress(json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode(), _LEVEL)


def decode_prompt(raw: bytes, *, task_id: str, step: int, session_id: str) -> StepPrompt:
    """A stored record; INTERNAL (naming the record, never its text) when it cannot be read."""
    try:
        data: Any = json.loads(zlib.decompress(raw))
        if not isinstance(data, dict) or not isinstance(data.get("request"), str):
            raise ValueError("not a prompt record")
        return StepPrompt(
            task_id=task_id,
            step=step,
            session_id=session_id,
            model=str(data.get("model", "")),
            format=str(data.get("format", "")),
            request_json=data["request"],
            redacted=bool(data.get("redacted", False)),
            create_time_ms=int(data.get("time", 0)),
        )
    except (zlib.error, ValueError, TypeError) as exc:
        raise AgentmeshError(
            ErrorCode.INTERNAL,
            f"the stored prompt of step {step} of task {task_id} is unreadable ({type(exc).__name__})",
            metadata={"task_id": task_id, "step": str(step)},
        ) from None


def prompt_denied(identity: Identity, task_id: str) -> PermissionDeniedError:
    # The same answer whether or not the task exists: the caller learns nothing about other tasks.
    return PermissionDeniedError(
        PROMPT_ACCESS,
        f"no task {echo(task_id)} whose session {echo(identity.subject)} may read: a task's prompts are for "
        "the readers of its session (the tokens of its tasks) and operators",
    )


class PromptStore:
    """Reads of `am:task:{<task>}:prompts` (the writes are part of TaskStore.commit)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def read(self, task_id: str, step: int) -> bytes | None:
        raw: Any = await self.store.call(
            "read step prompt", self.store.redis.hget(self.store.keys.task_prompts(task_id), str(step))
        )
        return bytes(raw) if raw is not None else None

    async def steps(self, task_id: str) -> list[int]:
        """The steps of the task that have a record, in order."""
        key = self.store.keys.task_prompts(task_id)
        raw: Any = await self.store.call("list step prompts", self.store.redis.hkeys(key))
        return sorted(int(field) for field in raw)

    async def get(self, task_id: str, session_id: str, step: int, steps_started: int) -> StepPrompt:
        """Step `step` of a task that has started `steps_started` steps: INVALID_REQUEST out of range,
        NOT_FOUND when the step has no record."""
        if step < 1 or step > steps_started:
            started = f"has started {steps_started} step{'s' if steps_started != 1 else ''}"
            raise InvalidRequestError(
                "step",
                f"out of range: task {task_id} {started}"
                + (f" (1..{steps_started})" if steps_started else "")
                + f", got {step}",
                metadata={"steps": str(steps_started)},
            )
        raw = await self.read(task_id, step)
        if raw is None:
            recorded = await self.steps(task_id)
            which = ", ".join(map(str, recorded)) if recorded else "none"
            raise NotFoundError(
                f"step {step} of task {task_id} has no recorded prompt (steps recorded: {which}): its reply "
                "has not come yet, or it ran with dispatcher.record_prompts off or before prompts were recorded",
                metadata={"task_id": task_id, "step": str(step)},
            )
        return decode_prompt(raw, task_id=task_id, step=step, session_id=session_id)
