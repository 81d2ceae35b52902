"""Benchmark: context_svc on public long conversations (LoCoMo), against keeping the newest turns (issue 37).

LoCoMo (snap-research/locomo, ACL 2024) has ten long multi-session conversations between two people
(about 600 turns each) and question/answer pairs naming their evidence turns. For each question the
conversation is appended to a fresh session (the first speaker's turns as user messages, the
second's as assistant messages, each prefixed with the speaker's name; each session opens with a
system line giving its date), the question is appended as the newest user message, and BuildContext runs at 2k, 4k and
8k tokens. Measured per budget: the share of the questions' evidence turns whose text is in the
built context, beside the newest-turns baseline (the newest turns that fit the same budget less the
reply reserve); the budget the view uses when turns were left out; BuildContext p50.

Tune on one half of the conversations (`--half tune`: the five first files by name), report the
other (`--half held-out`). The data states no licence, so it is not in this repository:

    git clone https://github.com/snap-research/locomo && cp locomo/data/locomo10.zip /tmp/
    .venv/bin/python -m bench.bench_conversations --data /tmp/locomo10.zip --half held-out [--questions 40]

(or set AGENTMESH_LOCOMO to the zip's path). `--retriever hybrid` ranks older turns by BM25 fused with
the offline multilingual embedder's cosine (agentmesh/semantic.py `Hybrid`, issue 51) instead of BM25 alone;
`--retriever fused` fuses BM25 with the cosine of the newest message to each turn-and-previous-turn window
by standardised score (context_svc/semantic_recall.py `TurnRetriever`, `--semantic-weight` its weight).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmesh.config import ContextSettings, RedisSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.embeddings import CachedEmbedder, OfflineEmbedder
from agentmesh.semantic import Hybrid
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from context_svc.model import Caller, Message, Role
from context_svc.recall import Recall
from context_svc.semantic_recall import TurnRetriever

BUDGETS = (2000, 4000, 8000)
OPERATOR = Caller("bench", is_operator=True)
HOW_TO_GET = (
    "LoCoMo's data is not in this repository (it states no licence). Get it with\n"
    "  git clone https://github.com/snap-research/locomo && cp locomo/data/locomo10.zip /tmp/\n"
    "then pass --data /tmp/locomo10.zip (or set AGENTMESH_LOCOMO)."
)


@dataclass(frozen=True)
class Turn:
    dia_id: str
    role: Role
    content: str
    text: str
    """The turn's own words (what counts as the evidence being in the context)."""


@dataclass(frozen=True)
class Conversation:
    name: str
    speakers: tuple[str, str]
    turns: list[Turn]
    questions: list[tuple[str, list[str]]]


@dataclass
class Tally:
    evidence: int = 0
    kept: int = 0
    baseline: int = 0
    build_ms: list[float] = field(default_factory=list)
    use_when_cut: list[float] = field(default_factory=list)


def load(path: Path) -> list[Conversation]:
    """The conversations of LoCoMo's zip (data/multimodal_dialog/locomo10_v2/*.json), by file name."""
    out = []
    with zipfile.ZipFile(path) as archive:
        names = sorted(n for n in archive.namelist() if n.endswith(".json"))
        for name in names:
            data: dict[str, Any] = json.loads(archive.read(name))
            a, b = data["speaker_a"], data["speaker_b"]
            turns: list[Turn] = []
            n = 1
            while f"session_{n}" in data:
                date = data.get(f"session_{n}_date_time", "")
                for i, raw in enumerate(data[f"session_{n}"]):
                    text = str(raw.get("text", ""))
                    content = f"{raw['speaker']}: {text}"
                    if raw.get("blip_caption"):
                        content += f" [shares a photo: {raw['blip_caption']}]"
                    if i == 0:
                        # The date opens each session as a system line, as a chat log shows it.
                        turns.append(Turn(f"S{n}", Role.SYSTEM, f"[session {n}: {date}]", ""))
                    role = Role.USER if raw["speaker"] == a else Role.ASSISTANT
                    turns.append(Turn(str(raw["dia_id"]), role, content, text))
                n += 1
            ids = {t.dia_id for t in turns}
            questions = []
            for qa in data.get("qa", []):
                evidence = [e for e in qa.get("evidence", []) if e in ids]
                if evidence:
                    questions.append((str(qa["question"]), evidence))
            out.append(Conversation(Path(name).stem, (a, b), turns, questions))
    return out


def _norm(text: str) -> str:
    return " ".join(text.split())


async def _question(
    engine: ContextEngine, sid: str, conv: Conversation, question: str, evidence: list[str], tallies: dict[int, Tally]
) -> None:
    a, b = conv.speakers
    await engine.create_session(OPERATOR, session_id=sid, goal=f"Continue the conversation between {a} and {b}.")
    tokens: list[int] = []
    for turn in conv.turns:
        appended = await engine.append_message_once(OPERATOR, sid, Message(turn.role, turn.content))
        tokens.append(appended.token_count)
    asked = await engine.append_message_once(OPERATOR, sid, Message(Role.USER, f"{a}: {question}"))
    tokens.append(asked.token_count)
    by_id = {t.dia_id: i for i, t in enumerate(conv.turns)}
    # Largest budget first: a build compacts what its window leaves out, and a smaller budget's
    # compaction must not shrink the window a larger one would have had (a session has one budget).
    for budget in sorted(BUDGETS, reverse=True):
        started = time.perf_counter()
        view = await engine.build_context(OPERATOR, sid, budget_tokens=budget)
        tally = tallies[budget]
        tally.build_ms.append((time.perf_counter() - started) * 1000)
        context = _norm("\n".join(m.content for m in view.messages))
        # Baseline: the newest turns that fit the budget less the same reply reserve.
        room, first = budget - round(budget * engine.settings.reply_ratio), len(tokens)
        while first > 0 and tokens[first - 1] <= room:
            room -= tokens[first - 1]
            first -= 1
        for dia in evidence:
            tally.evidence += 1
            tally.kept += _norm(conv.turns[by_id[dia]].text) in context
            tally.baseline += by_id[dia] >= first
        if view.summarized_messages + view.dropped_messages > 0:
            tally.use_when_cut.append(view.total_tokens / budget)
    await engine.delete_session(OPERATOR, sid)


async def run(
    conversations: list[Conversation],
    questions: int,
    retriever: str = "lexical",
    semantic_weight: float = 1.0,
    min_score: float = 0.3,
) -> dict[int, Tally]:
    tallies = {budget: Tally() for budget in BUDGETS}
    with LocalRedis() as redis:
        async with await Store.connect(RedisSettings(url=redis.url), "dev") as store:
            engine = ContextEngine(ContextSettings(), store)
            if retriever == "hybrid":
                embedder = CachedEmbedder(OfflineEmbedder())  # the same turns recur in every question's session
                engine.assembly.recall = Recall(
                    retriever=lambda: Hybrid[int](embedder, semantic_weight=semantic_weight, min_score=min_score)
                )
            elif retriever == "fused":
                embedder = CachedEmbedder(OfflineEmbedder())
                engine.assembly.recall = Recall(
                    retriever=lambda: TurnRetriever(embedder, semantic_weight=semantic_weight)
                )
            for conv in conversations:
                for q, (question, evidence) in enumerate(conv.questions[:questions]):
                    await _question(engine, f"locomo-{conv.name}-{q}", conv, question, evidence, tallies)
                print(f"  conversation {conv.name}: {min(questions, len(conv.questions))} questions", file=sys.stderr)
    return tallies


def table(tallies: dict[int, Tally]) -> str:
    rows = [
        "| budget | evidence kept | newest-turns baseline | ratio | budget used when turns were left out (min / mean) "
        "| BuildContext p50 |",
        "|---|---|---|---|---|---|",
    ]
    for budget, t in tallies.items():
        kept, base = t.kept / max(1, t.evidence), t.baseline / max(1, t.evidence)
        use = t.use_when_cut or [0.0]
        ratio = f"{kept / base:.1f}x" if base else "-"
        rows.append(
            f"| {budget // 1000}k | {100 * kept:.1f} % | {100 * base:.1f} % | {ratio} "
            f"| {100 * min(use):.0f} % / {100 * statistics.fmean(use):.0f} % "
            f"| {statistics.median(t.build_ms or [0.0]):.1f} ms |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.environ.get("AGENTMESH_LOCOMO", ""), help="path of locomo10.zip")
    parser.add_argument("--half", choices=("tune", "held-out", "all"), default="held-out")
    parser.add_argument("--questions", type=int, default=40, help="first N questions per conversation")
    parser.add_argument(
        "--retriever", choices=("lexical", "hybrid", "fused"), default="lexical", help="how older turns rank"
    )
    parser.add_argument(
        "--semantic-weight",
        type=float,
        default=1.0,
        help="hybrid: the cosine ranking's RRF weight; fused: the cosine z-score's weight",
    )
    parser.add_argument("--min-score", type=float, default=0.3, help="hybrid: the least cosine of a semantic hit")
    args = parser.parse_args(argv)
    if not args.data or not Path(args.data).is_file():
        print(f"no LoCoMo data at {args.data or '(unset)'}.\n{HOW_TO_GET}", file=sys.stderr)
        return 2
    conversations = load(Path(args.data))
    half = len(conversations) // 2
    chosen = {"tune": conversations[:half], "held-out": conversations[half:], "all": conversations}[args.half]
    tallies = asyncio.run(run(chosen, args.questions, args.retriever, args.semantic_weight, args.min_score))
    evidence = tallies[BUDGETS[0]].evidence
    print(
        f"LoCoMo {args.half} half ({', '.join(c.name for c in chosen)}), first {args.questions} questions per "
        f"conversation, {evidence} evidence turns, {args.retriever} recall"
        + (
            f" (semantic weight {args.semantic_weight}, min score {args.min_score})"
            if args.retriever == "hybrid"
            else f" (semantic weight {args.semantic_weight})"
            if args.retriever == "fused"
            else ""
        )
    )
    print(table(tallies))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
