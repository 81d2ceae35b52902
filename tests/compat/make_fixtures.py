"""Writes a rolling-upgrade fixture: every Redis key one release writes, as readable JSON.

The records are written through the code's own domain APIs (never by hand), against a throwaway
redis-server, so the fixture holds exactly what that release stores:

- dispatcher_svc: four tasks (task hash with fence, cursor/checkpoint, usage, pending approval,
  error; event stream `0-<seq>`): one SUCCEEDED, one parked in WAITING_APPROVAL (plus its member of
  the `am:tasks:waiting` index), one FAILED, one PENDING whose entry is still in the `am:tasks` queue
  (with the consumer group);
- tool_svc: idempotency records settled `done` (an offloaded output, an error) and `pending` (bound
  to an approval); approval records pending and decided;
- context_svc: a session (meta, message log, index, entities, rolling summary) with its payloads
  (tool_svc's offloaded JSON output, referenced from the log, and a binary one), after a
  compaction and a BuildContext;
- from issue 18 on (fixture_settlement.py, written only when the tree has these features): a task
  parked on a settlement (pending of kind `settlement`, qualified tool call ids), the idempotency
  records of its calls (one `unknown` with its pending settlement, one settled RAN: `done` with the
  ran output, its settlement decided `ran`), its session with named appends (the `dedupe` hash), and
  a write in flight on another replica (`sent`, with its `:hb` heartbeat key).
- from issues 20-23 on (written when the tree has them): every task records its creator (`creator`,
  `creator_agent`: fixture_common.Dispatcher.create) and every session its owner and attached task
  (created and appended to by its task's token: fixture_common.context_caller); entity records are
  JSON records with provenance; fixture_owners.py adds a task an agent started, whose session's
  facts are labelled, rejected, corrected and uncertain (`known` in the manifest: their decoded
  records), and entries of the audit stream `am:audit` (`audit`).

Output (deterministic JSON, keys sorted): `keys` maps every Redis key to its type, value and TTL
(`ttl_s`, null when none); byte strings are UTF-8 text, or {"base64": ...} when not UTF-8. `records`
is the manifest: what was written and how this release reads it back (its domain objects, as
JSON); tests/compat/test_rolling_upgrade.py loads `keys` and checks the current code reads the same.
Ids and times are fixed where the APIs take them; the rest (Redis time, random ids) is a snapshot.

The script is this file and its fixture_*.py modules (fixture_dump: the JSON and the key dump;
fixture_common: ids, tools, tool_svc and dispatcher helpers; fixture_tasks: the records of every
fixture; fixture_settlement: issue 18's; fixture_owners: issues 20-23's). Run it against the
release to freeze, never against a newer one (a fixture is never regenerated: a format change gets
a NEW file, redis_v2.json, ...).
Import only modules that keep their place; a module for a newer format is imported only if the tree
has what it needs (make_fixtures prints what it skipped):

    git worktree add /tmp/compat-old <commit>
    cp tests/compat/make_fixtures.py tests/compat/fixture_*.py /tmp/compat-old/tests/compat/
    cd /tmp/compat-old && PYTHONPATH=/tmp/compat-old /path/to/.venv/bin/python \\
        tests/compat/make_fixtures.py --commit <commit> --out /tmp/redis_vN.json
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from agentmesh.config import ContextSettings, RedisSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from dispatcher_svc.events import EventLog
from tests.compat.fixture_common import (
    APPROVAL_TTL_S,
    PAYLOAD_TTL_S,
    SESSION,
    T0,
    TASK_DONE,
    TASK_FAILED,
    TASK_PARKED,
    TASK_QUEUED,
    Dispatcher,
    Tools,
    context_caller,
)
from tests.compat.fixture_dump import describe, dump_keys, enc
from tests.compat.fixture_tasks import write_decided_approval, write_task_done, write_task_failed, write_task_parked

SYSTEM_REDIS_PORT = 6379

NEWER_FORMATS = ("tests.compat.fixture_settlement", "tests.compat.fixture_owners")
"""Writers of formats a tree may predate, each imported only when the tree has what it needs."""


def newer_writers() -> list[ModuleType]:
    """The writers of NEWER_FORMATS this tree can run; says on stderr which it cannot, and why."""
    found = []
    for name in NEWER_FORMATS:
        try:
            found.append(importlib.import_module(name))
        except ImportError as exc:
            print(f"skipped {name}: this tree predates it ({exc})", file=sys.stderr)
    return found


async def write_all(store: Store) -> dict[str, Any]:
    """Writes every record, then dumps the keys and reads the records back (the manifest)."""
    d = Dispatcher(store)
    await d.start()
    tools = Tools(store)
    # From issue 37 on the recent window keeps every turn its share of the budget holds (keep_recent is a
    # floor): a small share, so the done task's session still has older turns to compact into a summary.
    small_recent = {"recent_ratio": 0.05} if "recent_ratio" in ContextSettings.model_fields else {}
    engine = ContextEngine(ContextSettings(payload_ttl_s=PAYLOAD_TTL_S, **small_recent), store)
    await write_task_done(d, tools, engine)
    await write_task_parked(d, tools)
    await write_task_failed(d, tools)
    # Before the queued task: a newer writer's tasks go through the queue, which must hand them over.
    newer = [(writer, await writer.write_all(d, tools, engine, store)) for writer in newer_writers()]
    await d.create(TASK_QUEUED, "Summarise last week's refunds.", T0 + 3000, take=False)
    decided = await write_decided_approval(tools)

    keys = await dump_keys(store)  # before any read: reads write nothing, but be sure
    records = await read_back(store, d, tools, engine, decided, newer)
    if await dump_keys(store) != keys:
        raise AssertionError("reading the records back changed Redis")
    return {"fixture_format": 1, "generator": "tests/compat/make_fixtures.py", "keys": keys, "records": records}


async def read_back(
    store: Store,
    d: Dispatcher,
    tools: Tools,
    engine: ContextEngine,
    decided: str,
    newer: list[tuple[ModuleType, Any]],
) -> dict[str, Any]:
    """The manifest: what this release reads back through its own APIs (`newer`: each newer writer
    with what it wrote; their tasks, approvals and sessions are read as the others, and what only
    they wrote is merged in by their own read_back)."""
    task_ids = [TASK_DONE, TASK_PARKED, TASK_FAILED, TASK_QUEUED]
    sessions = [SESSION]
    approval_ids: list[str] = []
    waiting: list[tuple[str, str]] = []
    for _, written in newer:
        task_ids += written.tasks
        sessions += written.sessions
        approval_ids += written.approvals
        waiting += written.waiting
    events = EventLog(store, d.tasks, heartbeat_interval_s=1.0)
    tasks: dict[str, Any] = {}
    for task_id in task_ids:
        record = await d.tasks.load(task_id)
        tasks[task_id] = {
            "record": describe(record),
            "view": describe(record.view()),
            "events": describe(await events.read(task_id)),
        }
    parked = await d.tasks.load(TASK_PARKED)
    assert parked.pending is not None
    approvals = {}
    for approval_id in [parked.pending.approval_id, decided, *approval_ids]:
        approvals[approval_id] = describe(await tools.approvals.get(approval_id))

    read_sessions: dict[str, Any] = {}
    for session_id in sessions:
        # The token of the session's task (same id), with the task's creator from issue 20 on.
        caller = context_caller(session_id, tasks[session_id]["record"].get("creator", ""))
        session, entities = await engine.get_session(caller, session_id)
        messages = await engine.sessions.messages(session_id, 0, session.message_count - 1)
        summary, version = await engine.sessions.summary(session_id)
        payloads = []
        for sha in await engine.payloads.list_shas(session_id):
            meta, content, partial = await engine.get_payload(caller, session_id, f"pl_{sha}")
            assert not partial
            payloads.append({"ref": describe(meta), "content": enc(content)})
        read_sessions[session_id] = {
            "caller": describe(caller),
            "session": describe(session),
            "entities": entities,
            "messages": describe(messages),
            "summary": describe(summary),
            "summary_version": version,
            "payloads": payloads,
        }
    records: dict[str, Any] = {
        "dispatcher": {
            "consumer_group": d.settings.consumer_group,
            "tasks": tasks,
            "queued": [TASK_QUEUED],
            "waiting": [
                {"task_id": task_id, "approval_id": approval_id}
                for task_id, approval_id in [(TASK_PARKED, parked.pending.approval_id), *waiting]
            ],
        },
        "tool": {
            "approval_ttl_s": APPROVAL_TTL_S,
            "idempotency": tools.records,
            "approvals": approvals,
        },
        "context": {"sessions": read_sessions},
    }
    for writer, written in newer:
        extra: dict[str, Any] = await writer.read_back(d, tools, engine, written)
        if "settlements" in extra:
            records["dispatcher"].setdefault("settlements", []).extend(extra["settlements"])
        for session_id, appends in extra.get("appends", {}).items():
            read_sessions[session_id]["appends"] = appends
            read_sessions[session_id]["dedupe"] = extra["dedupe"][session_id]
        if hasattr(writer, "read_session"):  # more facts of every session
            for session_id, read in read_sessions.items():
                read.update(await writer.read_session(engine, session_id))
        if "audit" in extra:
            records["audit"] = extra["audit"]
    return records


async def generate(url: str) -> dict[str, Any]:
    store = await Store.connect(RedisSettings(url=url), "dev")
    try:
        return await write_all(store)
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commit", required=True, help="the commit whose code writes the records")
    parser.add_argument("--out", type=Path, required=True, help="e.g. tests/compat/fixtures/redis_v1.json")
    args = parser.parse_args()
    server = LocalRedis().start()
    try:
        if server.port == SYSTEM_REDIS_PORT:
            raise RuntimeError("refusing to write fixtures into the system Redis")
        fixture = asyncio.run(generate(server.url))
    finally:
        server.stop()
    fixture["source_commit"] = args.commit
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(fixture, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}: {len(fixture['keys'])} keys", file=sys.stderr)


if __name__ == "__main__":
    main()
