"""What one process holds of the sessions it served, so a load reads only what it lacks (sessions.py).

A session's immutable global state, its index entries and its last messages are kept per session (keyed
by the session's random epoch, so a re-created session is never confused with the old one): messages
and index entries never change once appended, so a load asks Redis only for those after what is held,
and `combine` joins the load script's reply with the snapshot the load was asked with. Snapshots are
replaced, never mutated (concurrent loads each combine the reply with the snapshot they asked with).

An append of this process extends the snapshot by the message it sent when the snapshot ends right
before it (issue 45): the next load, or the load in the same script as the append, then reads no
message or index entry of its own session's writes. The known facts (entities) are held too, with the
message count they are current at: only an append writes them, in its script, with the labels of
its message at that message's index (every release), so they stay current while every message since
was appended by this process (whose labels it applies); another replica's append makes the next
load read them all again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from context_svc.access import decode_tasks
from context_svc.model import IndexEntry, Message, Session

__all__ = ["KNOWN_MESSAGES", "Known", "KnownSessions", "Loaded", "combine", "load_args"]

KNOWN_MESSAGES: Final = 64
"""Messages held per session: enough for any recent window of keep_recent_messages <= 50."""


@dataclass(frozen=True)
class Known:
    """What this process holds of one session: its immutable state, its index entries from
    `idx_base`, and its last messages."""

    session: Session
    idx_base: int
    entries: tuple[IndexEntry, ...]
    messages: dict[int, Message]
    entities: Mapping[str, tuple[str, int]] | None = None
    """label -> (latest value, message index), current at `entities_at` messages (None: not held)."""
    entities_at: int = -1

    @property
    def held(self) -> tuple[int, int]:
        """The contiguous message range held, (0, -1) when none."""
        if not self.messages:
            return 0, -1
        return min(self.messages), max(self.messages)

    @property
    def idx_hi(self) -> int:
        """The last index entry held (-1 when none)."""
        return self.idx_base + len(self.entries) - 1

    def ends_before(self, index: int) -> bool:
        """Whether both the messages and the index entries held end right before message `index`
        (nothing held counts as ending before message 0): the test the load script applies too."""
        return self.held[1] == index - 1 and self.idx_hi == index - 1

    def after_append(self, index: int, message_json: str, entry_json: str, labels: Sequence[tuple[str, str]]) -> Known:
        """This snapshot after this process appended message `index` (in its epoch): extended by the
        message, parsed from the JSON the append stored (what a load would have read back), when it
        ends right before it, keeping the last KNOWN_MESSAGES messages; its entities updated by the
        message's labels (as the append script writes them) when they were current up to it."""
        snap = self
        if self.ends_before(index):
            messages = {i: m for i, m in self.messages.items() if i > index - KNOWN_MESSAGES}
            messages[index] = Message.from_json(message_json, index)
            entries = (*self.entries, IndexEntry.from_json(entry_json))
            snap = replace(snap, entries=entries, messages=messages)
        if self.entities is not None and self.entities_at == index:
            entities = {**self.entities, **{label: (value, index) for label, value in labels}}
            snap = replace(snap, entities=entities, entities_at=index + 1)
        return snap


@dataclass(frozen=True)
class Loaded:
    """What one BuildContext reads in one round trip."""

    session: Session
    summary_version: int
    entries: list[IndexEntry]
    """Index entries of messages summarized_upto+1 .. message_count-1."""
    tail: dict[int, Message]
    """The last messages of the log by index (those this process holds, and those just read)."""
    entities: dict[str, tuple[str, int]]
    """label -> (latest value, message index)."""


def load_args(snap: Known | None) -> list[str | int]:
    """The load script's ARGV for a caller holding `snap`: the messages wanted at the end of the log
    (keep_recent + 2), the epoch held and the ranges held."""
    tail = (snap.session.budget.keep_recent_messages if snap is not None else 20) + 2
    if snap is None:
        return [tail, "-", 0, -1, -1, -1]
    lo, hi = snap.held
    return [tail, snap.session.epoch, lo, hi, snap.idx_hi, snap.entities_at if snap.entities is not None else -1]


def combine(
    data: Mapping[str, Any], snap: Known | None, session_of: Callable[[Mapping[str, Any], int], Session]
) -> tuple[Loaded, Known] | None:
    """The load script's document joined with the snapshot it was asked with: what was loaded and the
    snapshot to keep; None when the snapshot did not line up with the reply (defensive: the caller
    forgets it and loads everything again). `session_of(meta, upto)` parses a whole meta hash."""
    upto, count, idx_from = int(data["upto"]), int(data["n"]), int(data["if"])
    meta = data["meta"]
    if data["same"] and snap is not None:
        session = replace(
            snap.session,
            message_count=int(meta["message_count"] or 0),
            total_tokens=int(meta["total_tokens"] or 0),
            summary_count=int(meta["summary_count"] or 0),
            summary_rejections=int(meta["summary_rejections"] or 0),
            summarized_upto=upto,
            tasks=decode_tasks(meta.get("tasks")),  # the attached set may grow (access.py)
        )
        held_entries = snap.entries[upto + 1 - snap.idx_base : idx_from - snap.idx_base]
        messages = dict(snap.messages)
    else:
        session = session_of(meta, upto)
        held_entries, messages = (), {}
    entries = [*held_entries, *(IndexEntry.from_dict(raw) for raw in data["idx"])]
    if len(entries) != count - upto - 1 and snap is not None:
        return None
    for first, part in ((int(data["a"]), data["ta"]), (int(data["b"]), data["tb"])):
        for i, raw in enumerate(part):
            messages[first + i] = Message.from_dict(raw, first + i)
    keep_from = count - KNOWN_MESSAGES
    messages = {i: m for i, m in messages.items() if i >= keep_from}
    if data["entities"] is not None:
        entities = {label: (str(v["v"]), int(v["i"])) for label, v in data["entities"].items()}
    elif snap is not None and snap.entities is not None:  # held and current (the script's test)
        entities = dict(snap.entities)
    else:  # pragma: no cover - the script reads them whenever the caller holds none
        return None
    loaded = Loaded(session=session, summary_version=int(data["version"]), entries=entries, tail=messages,
                    entities=entities)  # fmt: skip
    return loaded, Known(session, upto + 1, tuple(entries), messages, entities, count)


class KnownSessions:
    """The snapshots of the sessions this process served, least recently used dropped first."""

    def __init__(self, size: int) -> None:
        self._known: OrderedDict[str, Known] = OrderedDict()
        self._size = size

    def __len__(self) -> int:
        return len(self._known)

    def get(self, session_id: str) -> Known | None:
        return self._known.get(session_id)

    def remember(self, session_id: str, known: Known) -> None:
        self._known[session_id] = known
        self._known.move_to_end(session_id)
        while len(self._known) > self._size:
            self._known.popitem(last=False)

    def forget(self, session_id: str) -> None:
        self._known.pop(session_id, None)

    def extend(
        self, session_id: str, epoch: str, index: int, message_json: str, entry_json: str,
        labels: Sequence[tuple[str, str]],
    ) -> None:  # fmt: skip
        """After this process appended message `index` in the session's `epoch`: the snapshot held
        `after_append` it (what it cannot extend, the next load reads)."""
        snap = self._known.get(session_id)
        if snap is not None and snap.session.epoch == epoch:
            self._known[session_id] = snap.after_append(index, message_json, entry_json, labels)
