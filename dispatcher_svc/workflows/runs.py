"""Workflow run state in Redis: one hash per run and its event stream, written with fencing.

Keys: `<prefix>:wfrun:{<run id>}` (hash) and `...:events` (stream, ids `0-<seq>`), one hash tag, so
both scripts stay on one Cluster slot. The hash holds the workflow's definition as it was when the
run started (a run keeps its version whatever the configuration becomes), the input, the RunState
as JSON, the status, and `fence`/`owner`/`lease_until`: a replica acquires the run (`acquire`
increments the fence) and every later write names that fence, so a stale owner that wakes up after
another replica took over has its write refused (StaleRunOwnerError) and stops, as with tasks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError, NotFoundError
from agentmesh.store import Store
from dispatcher_svc.workflows.run_scripts import RUN_ACQUIRE_LUA, RUN_COMMIT_LUA
from dispatcher_svc.workflows.state import ItemState, NodeState, NodeStatus, RunState, RunStatus
from dispatcher_svc.workflows.validate import Workflow

__all__ = [
    "RUN_ID",
    "RunExistsError",
    "RunRecord",
    "RunStore",
    "StaleRunOwnerError",
    "state_from_json",
    "state_to_json",
]

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_OK, _STALE, _MISSING, _EXISTS = 1, 0, -2, -3


class StaleRunOwnerError(AgentmeshError):
    """Another replica took the run over (its fence moved on): this one must stop advancing it."""

    def __init__(self, run_id: str, fence: int, current: int) -> None:
        super().__init__(
            ErrorCode.FAILED_PRECONDITION, f"workflow run {run_id}: fence {fence} is stale (now {current})"
        )


class RunExistsError(AgentmeshError):
    def __init__(self, run_id: str) -> None:
        super().__init__(ErrorCode.FAILED_PRECONDITION, f"workflow run {run_id} exists already")


def _item_json(item: ItemState) -> dict[str, Any]:
    return {
        "s": item.status.value,
        "a": item.attempts,
        "o": item.output,
        "e": item.error,
        "t": item.started_at,
        "nb": item.not_before,
    }


def state_to_json(state: RunState) -> str:
    nodes = {
        node: {
            **_item_json(ItemState(s.status, s.attempts, s.output, s.error, s.started_at, s.not_before)),
            "i": None if s.items is None else [_item_json(item) for item in s.items],
            "r": s.reason,
        }
        for node, s in state.nodes.items()
    }
    return json.dumps({"nodes": nodes, "aborted": state.aborted}, separators=(",", ":"), ensure_ascii=False)


def _item(data: Mapping[str, Any]) -> ItemState:
    error = data.get("e")
    return ItemState(
        NodeStatus(data["s"]),
        int(data["a"]),
        data.get("o"),
        None if error is None else ErrorCode(error),
        data.get("t"),
        float(data.get("nb", 0.0)),
    )


def state_from_json(text: str) -> RunState:
    data = json.loads(text)
    nodes: dict[str, NodeState] = {}
    for node, raw in data["nodes"].items():
        base = _item(raw)
        items = None if raw.get("i") is None else tuple(_item(one) for one in raw["i"])
        nodes[node] = NodeState(
            base.status,
            base.attempts,
            base.output,
            base.error,
            base.started_at,
            base.not_before,
            items,
            raw.get("r", ""),
        )
    aborted = data.get("aborted")
    return RunState(nodes, None if aborted is None else ErrorCode(aborted))


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    workflow: str
    definition: dict[str, Any]
    """The definition the run started with (pinned)."""
    input: Any
    state: RunState
    status: RunStatus
    fence: int
    last_sequence: int
    created_ms: int = 0
    cancel: str = ""
    """Why a cancel was asked for ("" when none): the run's next advance aborts it with CANCELLED."""
    meta: Mapping[str, str] = field(default_factory=dict)
    """What the caller recorded with the run at its start (who started it: dispatcher_svc/workflow_runs.py)."""


class RunStore:
    """Workflow runs in Redis (see the module doc)."""

    def __init__(self, store: Store, *, ttl_s: int, event_maxlen: int = 10_000) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.event_maxlen = event_maxlen
        self._commit = store.script("workflow_run_commit", RUN_COMMIT_LUA, durable=True)
        self._acquire = store.script("workflow_run_acquire", RUN_ACQUIRE_LUA, durable=True)

    def key(self, run_id: str) -> str:
        if not RUN_ID.fullmatch(run_id):
            raise InvalidRequestError("run_id", "1-128 of A-Z a-z 0-9 _ . : - (starting with a letter or digit)")
        return f"{self.store.keys.prefix}:wfrun:{{{run_id}}}"

    def keys(self, run_id: str) -> list[str]:
        key = self.key(run_id)
        return [key, f"{key}:events"]

    async def _write(
        self,
        run_id: str,
        fence: int | None,
        fields: Mapping[str, str],
        events: list[dict[str, Any]],
        *,
        release: bool = False,
    ) -> int:
        pairs = [part for item in fields.items() for part in item]
        args = [
            "" if fence is None else str(fence),
            self.event_maxlen,
            self.ttl_s,
            "1" if release else "0",
            len(fields),
            *pairs,
        ]
        args += [json.dumps(event, separators=(",", ":"), ensure_ascii=False) for event in events]
        async with self.store.guard("commit workflow run"):
            code, current, seq = await self._commit(keys=self.keys(run_id), args=args)
        if code == _EXISTS:
            raise RunExistsError(run_id)
        if code == _MISSING:
            raise NotFoundError(f"workflow run {run_id} not found")
        if code == _STALE:
            raise StaleRunOwnerError(run_id, fence or 0, int(current))
        return int(seq)

    async def create(
        self, run_id: str, workflow: Workflow, run_input: Any, *, now_ms: int, meta: Mapping[str, str] | None = None
    ) -> None:
        """A new run, every node pending; RunExistsError when `run_id` is taken (a run id derived from a
        schedule tick is how a tick starts one run only)."""
        definition = workflow.definition.model_dump(mode="json", by_alias=True, exclude_none=True)
        fields = {
            "workflow": workflow.name,
            "definition": json.dumps(definition, separators=(",", ":"), ensure_ascii=False),
            "input": json.dumps(run_input, separators=(",", ":"), ensure_ascii=False),
            "state": state_to_json(RunState.new(workflow.order)),
            "status": RunStatus.RUNNING.value,
            "finished": "0",
            "owner": "",
            "lease_until": "0",
            "created_ms": str(now_ms),
            **{f"m.{name}": value for name, value in (meta or {}).items()},
        }
        await self._write(run_id, None, fields, [{"kind": "run", "status": "running", "workflow": workflow.name}])

    async def acquire(self, run_id: str, owner: str, lease_ms: int) -> int | None:
        """This replica's fence for the run, or None when it is finished or a live owner holds it."""
        async with self.store.guard("acquire workflow run"):
            reply = await self._acquire(keys=[self.key(run_id)], args=[owner, lease_ms])
        if int(reply[0]) == -2:
            raise NotFoundError(f"workflow run {run_id} not found")
        return int(reply[1]) if int(reply[0]) == 1 else None

    async def load(self, run_id: str) -> RunRecord:
        async with self.store.guard("read workflow run"):
            raw = await self.store.redis.hgetall(self.key(run_id))
        if not raw:
            raise NotFoundError(f"workflow run {run_id} not found")
        fields = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw.items()
        }
        return RunRecord(
            run_id=run_id,
            workflow=fields["workflow"],
            definition=json.loads(fields["definition"]),
            input=json.loads(fields["input"]),
            state=state_from_json(fields["state"]),
            status=RunStatus(fields["status"]),
            fence=int(fields["fence"]),
            last_sequence=int(fields.get("last_sequence", "0")),
            created_ms=int(fields.get("created_ms", "0")),
            cancel=fields.get("cancel", ""),
            meta={name[2:]: value for name, value in fields.items() if name.startswith("m.")},
        )

    async def commit(
        self,
        run_id: str,
        fence: int,
        state: RunState,
        status: RunStatus,
        events: list[dict[str, Any]],
        *,
        release: bool = False,
    ) -> int:
        """Writes the state if `fence` is still the run's; returns the last event sequence."""
        fields = {
            "state": state_to_json(state),
            "status": status.value,
            "finished": "0" if status == RunStatus.RUNNING else "1",
        }
        return await self._write(run_id, fence, fields, events, release=release or status != RunStatus.RUNNING)

    async def wait_events(self, run_id: str, after: int, timeout_s: float) -> None:
        """Returns once the run has an event above `after`, or after `timeout_s` (capped at half the
        socket timeout: a blocking read holds its connection)."""
        block_ms = max(1, int(min(timeout_s, self.store.settings.socket_timeout_s * 0.5) * 1000))
        async with self.store.guard("wait for workflow run events", blocking=True):
            await self.store.redis.xread({f"{self.key(run_id)}:events": f"0-{after}"}, count=1, block=block_ms)

    async def events(self, run_id: str, after: int = 0, count: int = 1000) -> list[tuple[int, dict[str, Any]]]:
        """The run's events with a sequence above `after`, in order."""
        async with self.store.guard("read workflow run events"):
            entries = await self.store.redis.xrange(f"{self.key(run_id)}:events", f"0-{after + 1}", "+", count=count)
        found: list[tuple[int, dict[str, Any]]] = []
        for entry_id, data in entries or []:
            text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
            body = (data or {}).get(b"e", (data or {}).get("e", b"{}"))
            found.append((int(text.split("-")[1]), json.loads(body)))
        return found
