"""Sessions in Redis: one hash tag per session, every write one atomic Lua script.

Keys (`{<session>}` is the Cluster hash tag, so every script touches one slot):
- `am:sess:{s}:meta`     hash: global state (agent, goal, sub-goals, system prompt, budget JSON,
                         epoch, owner, `tasks`: the attached tasks as a JSON array, absent in older
                         sessions; `newest`/`newest_gen`/`newest_ms`: attach.py) and counters
                         (message_count, total_tokens, summary_count, ...)
- `am:sess:{s}:log`      list: the messages as JSON, in order; the list index is the message index
- `am:sess:{s}:idx`      list: per message role + token count + call pairing (what BuildContext needs
                         without reading contents); kept in step with `log` by the append script
- `am:sess:{s}:entities` hash: label -> {"v": latest value, "i": message index}
- `am:sess:{s}:summary`  hash: upto (last summarised index), version, json (the rolling summary)
- `am:sess:{s}:compact`  the compaction lease (SET NX PX), so one replica runs the summarizer
- `am:sess:{s}:dedupe`   hash: `c:<tool_call_id>` / `m:<client_message_id>` -> {"i": message index,
                         "h": content hash, "e": session epoch}; written by the append script, so a
                         repeated append returns the original position (absent in older sessions)

Appends are atomic and ordered across replicas: RPUSH inside a script that first checks the session
exists (a deleted session is never half re-created) and updates the counters and entities in the
same step. Nothing is read-modified-written in Python. An append with a dedupe key (a tool result's
call id, a message's client_message_id) checks and records it in that same script, so of concurrent
identical appends exactly one lands and the others get its position.

BuildContext's read (`load`) is one script returning one JSON document. Each process remembers
what never changes of a session it served (global state, index entries, the last messages; keyed by
the session's random epoch, so a re-created session is never confused with the old one) and asks
Redis only for the rest, so a load costs the same at 50 or 5,000 messages.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agentmesh.errors import NotFoundError, PermissionDeniedError, echo
from agentmesh.payload_grants import GRANTS_PART
from agentmesh.payloads import PAYLOAD_INDEX_PART
from agentmesh.store import Store
from context_svc import session_scripts as scripts
from context_svc.access import decode_tasks, encode_tasks
from context_svc.model import Budget, Message, Session, SessionAccess, Summary
from context_svc.session_known import Known, KnownSessions, Loaded, combine, load_args

__all__ = ["Dedupe", "EncodingChangedError", "Existing", "Loaded", "SessionStore", "new_epoch"]


class EncodingChangedError(Exception):
    """The session uses another encoding than the one the caller counted tokens in."""


_PARTS: Final = ("meta", "log", "idx", "entities", "summary", "dedupe")
TTL_REFRESH_S: Final = 60
"""An append refreshes the session's TTL (every key's) at most this often, so a session expires up to
this much earlier than `context.session_ttl_s` after its last message (the append script; issue 45)."""


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _pairs(flat: Sequence[Any]) -> dict[str, bytes]:
    return {_text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}


class SessionStore:
    """The Redis side of sessions (see the module docstring)."""

    def __init__(self, store: Store, *, session_ttl_s: int = 0, cache_entries: int = 2_000) -> None:
        self.store = store
        self.session_ttl_s = session_ttl_s
        self._create = store.script("context_create", scripts.CREATE_LUA, durable=True)
        self._append = store.script("context_append", scripts.APPEND_LUA, durable=True)
        self._seen = store.script("context_seen", scripts.SEEN_LUA)
        self._load = store.script("context_load", scripts.LOAD_LUA)
        self._commit = store.script("context_commit_summary", scripts.COMMIT_SUMMARY_LUA, durable=True)
        self._incr = store.script("context_incr_if_exists", scripts.INCR_IF_EXISTS_LUA)
        self._release = store.script("context_release", scripts.RELEASE_LUA)
        self._append_load = store.script("context_append_load", scripts.APPEND_LOAD_LUA, durable=True)
        self._append_many_load = store.script("context_append_many_load", scripts.APPEND_MANY_LOAD_LUA, durable=True)
        self._create_append_load = store.script(
            "context_create_append_load", scripts.CREATE_APPEND_LOAD_LUA, durable=True
        )
        self._known = KnownSessions(cache_entries)  # what this process holds of each session
        self._known_size = cache_entries
        """Bound of `_known` and `_key_cache` (context.session_cache_entries)."""
        self._key_cache: dict[str, list[str]] = {}

    def key(self, session_id: str, part: str) -> str:
        return self.store.keys.session(session_id, part)

    def keys(self, session_id: str) -> list[str]:
        return [self.key(session_id, part) for part in _PARTS]

    def _load_keys(self, session_id: str) -> list[str]:
        # Built (and validated) once per session: BuildContext is the hot path.
        keys = self._key_cache.get(session_id)
        if keys is None:
            if len(self._key_cache) >= self._known_size:
                self._key_cache.clear()
            keys = self._key_cache[session_id] = [
                self.key(session_id, p) for p in ("meta", "idx", "log", "entities", "summary")
            ]
        return keys

    # -- create / read ---------------------------------------------------------------------

    async def create(self, session: Session) -> tuple[Session, bool]:
        """Creates `session` unless one with its id exists; returns (the stored session, created)."""
        fields = _create_fields(session)
        args: list[str | int] = [self.session_ttl_s]
        for name, value in fields.items():
            args += [name, value]
        async with self.store.guard("create session"):
            reply = await self._create(keys=[self.key(session.session_id, "meta")], args=args)
        if int(reply[0]) == 1:
            # Held from now on as a load would read it: the first load (the goal's append) reads no
            # meta hash, no entity, and the goal's own message not at all (issue 45).
            self._known.remember(session.session_id, self._created(session, fields))
            return session, True
        return self._session(session.session_id, _pairs(reply[1]), upto=-1), False

    def _created(self, session: Session, fields: Mapping[str, str | int]) -> Known:
        """What this process holds of `session` right after creating it with `fields`."""
        written = self._session(session.session_id, {name: str(value) for name, value in fields.items()}, upto=-1)
        return Known(written, 0, (), {}, entities={}, entities_at=0)

    async def create_append_load(
        self,
        session: Session,
        message: Message,
        entities: Sequence[tuple[str, str]],
        *,
        caller_agent: str | None,
        dedupe: Dedupe | None = None,
        caller_task: str = "",
    ) -> tuple[Session, tuple[int | Existing, Loaded | None] | None]:
        """`create`, then `append_and_load` of `message`, in one script (issue 45: one call, and neither
        the create's read and write of the meta hash nor its EXPIRE apart from the append's). Returns
        (the stored session, None) when a session with its id exists: nothing is written then, the
        caller appends as usual. Else the session is created, and the append raises as `append` does
        or returns (its result, the load right after it; None when a message was found under the
        dedupe key: the caller loads)."""
        fields = _create_fields(session)
        flat: list[str | int] = []
        for name, value in fields.items():
            flat += [name, value]
        snap = self._created(session, fields)
        appended = self._append_args(message, entities, caller_agent, session.budget.encoding, dedupe, caller_task)
        args = [self.session_ttl_s, len(flat), *flat, *load_args(snap), *appended]
        async with self.store.guard("create session"):
            reply = await self._create_append_load(keys=self.keys(session.session_id), args=args)
        if int(reply[0]) == 0:
            return self._session(session.session_id, _pairs(reply[1]), upto=-1), None
        self._known.remember(session.session_id, snap)
        if isinstance(reply[1], list):
            return session, (_existing(reply[1]), None)
        index = int(reply[1])
        if index < 0:
            raise _append_error(session.session_id, index)
        snap = snap.after_append(index, str(appended[0]), str(appended[1]), entities)
        return session, (index, await self._loaded(session.session_id, json.loads(reply[2]), snap))

    def _session(self, session_id: str, meta: Mapping[str, bytes | str], *, upto: int) -> Session:
        def get(name: str, default: str = "") -> str:
            value = meta.get(name)
            return default if value is None else _text(value)

        return Session(
            session_id=session_id,
            agent_id=get("agent_id"),
            goal=get("goal"),
            sub_goals=tuple(json.loads(get("sub_goals", "[]"))),
            system_prompt=get("system_prompt"),
            budget=Budget.from_json(get("budget")),
            create_time=float(get("create_time", "0")),
            epoch=get("epoch"),
            message_count=int(get("message_count", "0")),
            total_tokens=int(get("total_tokens", "0")),
            summary_count=int(get("summary_count", "0")),
            summarized_upto=upto,
            summary_rejections=int(get("summary_rejections", "0")),
            owner=get("owner"),
            tasks=decode_tasks(meta.get("tasks")),
            newest_task_id=get("newest", session_id),
        )

    async def get(self, session_id: str) -> tuple[Session, dict[str, tuple[str, int]]]:
        """The session and its entities; NotFoundError if it does not exist."""
        async with self.store.guard("get session"):
            pipe = self.store.redis.pipeline(transaction=True)
            pipe.hgetall(self.key(session_id, "meta"))
            pipe.hgetall(self.key(session_id, "entities"))
            pipe.hget(self.key(session_id, "summary"), "upto")
            meta, entities, upto = await pipe.execute()
        if not meta:
            raise _not_found(session_id)
        session = self._session(session_id, {_text(k): v for k, v in meta.items()}, upto=int(upto or -1))
        return session, _entities(entities)

    async def load(self, session_id: str) -> Loaded:
        """Meta, summary position, index entries after it, the last messages (keep_recent + 2) and
        the entities, in one round trip; what this process already holds is not sent again."""
        snap = self._known.get(session_id)
        async with self.store.guard("load session"):
            reply = await self._load(keys=self._load_keys(session_id), args=load_args(snap))
        if not reply:
            self._known.forget(session_id)
            raise _not_found(session_id)
        return await self._loaded(session_id, json.loads(reply), snap)

    async def _loaded(self, session_id: str, data: dict[str, Any], snap: Known | None) -> Loaded:
        combined = combine(data, snap, lambda meta, upto: self._session(session_id, meta, upto=upto))
        if combined is None:
            # Defensive: the held snapshot did not line up with the reply; read everything again.
            self._known.forget(session_id)
            return await self.load(session_id)
        loaded, known = combined
        self._known.remember(session_id, known)
        return loaded

    def forget(self, session_id: str) -> None:
        """Drops what this process holds of a session (it was deleted here)."""
        self._known.forget(session_id)

    async def messages(self, session_id: str, start: int, end: int) -> list[Message]:
        """Messages start..end (inclusive) of the log."""
        if end < start:
            return []
        raw = await self.store.call("read messages", self.store.redis.lrange(self.key(session_id, "log"), start, end))
        return [Message.from_json(item, start + i) for i, item in enumerate(raw)]

    async def summary(self, session_id: str) -> tuple[Summary | None, int]:
        """The persisted rolling summary and its version (None, 0 before the first compaction)."""
        raw, version = await self.store.call(
            "read summary", self.store.redis.hmget(self.key(session_id, "summary"), ["json", "version"])
        )
        return (Summary.from_json(raw) if raw else None), int(version or 0)

    async def summary_and_messages(
        self, session_id: str, start: int, end: int
    ) -> tuple[Summary | None, int, list[Message]]:
        """The persisted summary, its version and messages start..end, in one transaction."""
        if end < start:
            summary, version = await self.summary(session_id)
            return summary, version, []
        async with self.store.guard("read summary"):
            pipe = self.store.redis.pipeline(transaction=True)
            pipe.hmget(self.key(session_id, "summary"), ["json", "version"])
            pipe.lrange(self.key(session_id, "log"), start, end)
            (raw, version), items = await pipe.execute()
        messages = [Message.from_json(item, start + i) for i, item in enumerate(items)]
        return (Summary.from_json(raw) if raw else None), int(version or 0), messages

    # -- writes ------------------------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        message: Message,
        entities: Sequence[tuple[str, str]],
        *,
        caller_agent: str | None,
        encoding: str,
        dedupe: Dedupe | None = None,
        caller_task: str = "",
    ) -> int | Existing:
        """Appends atomically; returns the message's index. `caller_agent` None: an operator, who may
        append to any session; else the script applies context_svc/access.py to the caller's agent and task.

        With `dedupe`: if a message was appended under `dedupe.key` already, nothing is written and
        that message is returned (the caller compares the content hashes); else the key is recorded
        with this message's index and `dedupe.content_hash`, in the same script.

        NotFoundError if the session does not exist; PermissionDeniedError if the caller may not use it;
        EncodingChangedError if its tokens were not counted in `encoding`.
        """
        args = self._append_args(message, entities, caller_agent, encoding, dedupe, caller_task)
        async with self.store.guard("append message"):
            reply = await self._append(keys=self.keys(session_id), args=args)
        if not isinstance(reply, list):
            raise _append_error(session_id, int(reply))
        if len(reply) == 3:
            return _existing(reply)
        index = int(reply[0])
        self._known.extend(session_id, _text(reply[1]), index, str(args[0]), str(args[1]), entities)
        return index

    async def append_and_load(
        self,
        session_id: str,
        message: Message,
        entities: Sequence[tuple[str, str]],
        *,
        caller_agent: str | None,
        encoding: str,
        dedupe: Dedupe | None = None,
        caller_task: str = "",
    ) -> tuple[int | Existing, Loaded]:
        """`append`, then `load`, in one script (one round trip, issue 45): the load sees the session
        right after the append (a repeat's load: as it is), and reads neither the meta the append read
        and wrote nor the message it sent when this process held the session up to it."""
        snap = self._known.get(session_id)
        args = self._append_args(message, entities, caller_agent, encoding, dedupe, caller_task)
        async with self.store.guard("append message"):
            reply = await self._append_load(keys=self.keys(session_id), args=[*load_args(snap), *args])
        if not isinstance(reply, list):
            raise _append_error(session_id, int(reply))
        result: int | Existing = _existing(reply[0]) if isinstance(reply[0], list) else int(reply[0])
        data = json.loads(reply[1])
        if data["same"] and snap is not None and isinstance(result, int):
            # What the script took as held besides the snapshot: this append's message and labels.
            snap = snap.after_append(result, str(args[0]), str(args[1]), entities)
        return result, await self._loaded(session_id, data, snap)

    async def append_many_and_load(
        self,
        session_id: str,
        appends: Sequence[tuple[Message, Sequence[tuple[str, str]], Dedupe | None]],
        *,
        caller_agent: str | None,
        encoding: str,
        caller_task: str = "",
    ) -> tuple[list[int | Existing], Loaded]:
        """`append` of each (message, entities, dedupe) in order, then `load`, in one script (issue 45):
        the session's meta read and written once for all of them. Errors as `append`'s (only the first
        append can be refused, before anything is written: the others see the same session and caller)."""
        snap = self._known.get(session_id)
        each = [
            self._append_args(m, entities, caller_agent, encoding, dedupe, caller_task)
            for m, entities, dedupe in appends
        ]
        args: list[str | int] = [*load_args(snap), len(each)]
        for one in each:
            args += [len(one), *one]
        async with self.store.guard("append messages"):
            reply = await self._append_many_load(keys=self.keys(session_id), args=args)
        if not isinstance(reply, list):
            raise _append_error(session_id, int(reply))
        results: list[int | Existing] = [_existing(r) if isinstance(r, list) else int(r) for r in reply[0]]
        data = json.loads(reply[1])
        if data["same"] and snap is not None and all(isinstance(r, int) for r in results):
            # What the script took as held besides the snapshot: these appends' messages and labels.
            for index, one, (_, entities, _) in zip(results, each, appends, strict=True):
                assert isinstance(index, int)
                snap = snap.after_append(index, str(one[0]), str(one[1]), entities)
        return results, await self._loaded(session_id, data, snap)

    def _append_args(
        self,
        message: Message,
        entities: Sequence[tuple[str, str]],
        caller_agent: str | None,
        encoding: str,
        dedupe: Dedupe | None,
        caller_task: str,
    ) -> list[str | int]:
        args: list[str | int] = [
            message.to_json(),
            message.index_entry().to_json(),
            message.token_count,
            self.session_ttl_s,
            "*" if caller_agent is None else caller_agent,
            encoding,
            dedupe.key if dedupe is not None else "",
            dedupe.content_hash if dedupe is not None else "",
            caller_task,
            int(time.time()),
            TTL_REFRESH_S,
        ]
        for label, value in entities:
            args += [label, value]
        return args

    async def seen(self, session_id: str, key: str) -> Existing | None:
        """The message appended under dedupe `key`, if any (a read: the append script decides)."""
        keys = [self.key(session_id, "meta"), self.key(session_id, "log"), self.key(session_id, "dedupe")]
        async with self.store.guard("check appended"):
            reply = await self._seen(keys=keys, args=[key])
        return _existing(reply) if reply else None

    async def commit_summary(self, session_id: str, expected_upto: int, summary: Summary) -> int:
        """Stores `summary` if no other replica compacted since `expected_upto`; its version, or 0."""
        async with self.store.guard("store summary"):
            version = int(
                await self._commit(
                    keys=[self.key(session_id, "meta"), self.key(session_id, "summary")],
                    args=[expected_upto, summary.last_index, summary.to_json(), self.session_ttl_s],
                )
            )
        if version == -1:
            raise _not_found(session_id)
        return version

    async def count_rejection(self, session_id: str) -> None:
        async with self.store.guard("count summary rejection"):
            await self._incr(keys=[self.key(session_id, "meta")], args=["summary_rejections"])

    async def lease(self, session_id: str, ttl_s: float) -> str | None:
        """Takes the compaction lease; its token, or None if another replica holds it."""
        token = secrets.token_hex(8)
        taken = await self.store.call(
            "take compaction lease",
            self.store.redis.set(self.key(session_id, "compact"), token, nx=True, px=max(1, int(ttl_s * 1000))),
        )
        return token if taken else None

    async def release(self, session_id: str, token: str) -> None:
        async with self.store.guard("release compaction lease"):
            await self._release(keys=[self.key(session_id, "compact")], args=[token])

    async def exists(self, session_id: str) -> SessionAccess:
        """What decides who may use the session; NotFoundError if it does not exist."""
        meta = self.key(session_id, "meta")
        async with self.store.guard("check session"):
            pipe = self.store.redis.pipeline(transaction=False)
            pipe.exists(meta)
            pipe.hmget(meta, ["agent_id", "tasks"])
            found, (agent, tasks) = await pipe.execute()
        if not found:
            raise _not_found(session_id)
        return SessionAccess(agent_id=_text(agent or b""), tasks=decode_tasks(tasks))

    async def delete(self, session_id: str, payload_shas: Sequence[str]) -> bool:
        """Deletes the session, its payloads and leases in one transaction; whether it existed."""
        parts = ("compact", PAYLOAD_INDEX_PART, GRANTS_PART)  # grants: payload_grants.py
        keys = [*self.keys(session_id), *(self.key(session_id, part) for part in parts)]
        keys += [self.store.keys.payload(session_id, sha) for sha in payload_shas]
        async with self.store.guard("delete session"):
            pipe = self.store.redis.pipeline(transaction=True)
            pipe.exists(keys[0])
            pipe.delete(*keys)
            existed, _ = await pipe.execute()
        return bool(existed)


@dataclass(frozen=True, slots=True)
class Dedupe:
    """Makes an append happen once per `key` (`c:<tool_call_id>`, `m:<client_message_id>`)."""

    key: str
    content_hash: str
    """What the append carries (model.tool_outcome_hash / message_hash): a repeat compares it."""


@dataclass(frozen=True, slots=True)
class Existing:
    """The message an earlier append under the same dedupe key stored."""

    index: int
    content_hash: str
    message: Message


def _existing(reply: Sequence[Any]) -> Existing:
    index = int(reply[0])
    return Existing(index=index, content_hash=_text(reply[1]), message=Message.from_json(reply[2], index))


def _entities(raw: Mapping[Any, bytes]) -> dict[str, tuple[str, int]]:
    out: dict[str, tuple[str, int]] = {}
    for label, value in raw.items():
        data = json.loads(value)
        out[_text(label)] = (str(data["v"]), int(data["i"]))
    return out


def _append_error(session_id: str, code: int) -> Exception:
    """What the append script's error `code` (-1, -2, -3) means."""
    if code == -1:
        return _not_found(session_id)
    if code == -3:
        return EncodingChangedError(session_id)
    return PermissionDeniedError(
        f"session:{echo(session_id)}", f"session {echo(session_id)} belongs to other tasks or another agent"
    )


def _create_fields(session: Session) -> dict[str, str | int]:
    """The meta hash a create writes for `session`."""
    return {
        "agent_id": session.agent_id,
        "goal": session.goal,
        "sub_goals": json.dumps(list(session.sub_goals), ensure_ascii=False),
        "system_prompt": session.system_prompt,
        "budget": session.budget.to_json(),
        "encoding": session.budget.encoding,
        "create_time": repr(session.create_time),
        "epoch": session.epoch,
        "message_count": 0,
        "total_tokens": 0,
        "summary_count": 0,
        "summary_rejections": 0,
        "owner": session.owner,
        "tasks": encode_tasks(session.tasks or ()),
    }


def _not_found(session_id: str) -> NotFoundError:
    return NotFoundError(f"session {session_id} not found", metadata={"session_id": session_id})


def new_epoch() -> str:
    return secrets.token_hex(8)
