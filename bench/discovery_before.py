"""DiscoverTools' ranking before issue 51, kept for bench/bench_discovery.py's comparison only.

Classic Okapi idf `log((N - n + 0.5) / (n + 0.5))` with rank_bm25's floor for negative values (a quarter
of the mean idf), ASCII-only words (`[a-z0-9]+`, so "café" was "caf"), the name and description and
examples indexed (not the input schema), ties by name.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from agentmesh.retrieval import _STOP_WORDS, _stem
from tool_svc.model import ToolDef

_TOKEN_RE = re.compile(r"[a-z0-9]+|[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_CJK_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    for match in _TOKEN_RE.finditer(text.lower().replace("_", " ").replace("-", " ")):
        run = match.group(0)
        if _CJK_RE.match(run):
            tokens.extend([run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)])
        elif run not in _STOP_WORDS and (len(run) > 1 or run.isdigit()):
            tokens.append(_stem(run))
    return tokens


def document(tool: ToolDef) -> str:
    return " ".join([tool.name, tool.name.replace("_", " "), tool.description, *tool.examples])


def rank(tools: Sequence[ToolDef], query: str) -> list[str]:
    """Tool names, best first, as DiscoverTools ranked them before issue 51."""
    docs = [Counter(tokenize(document(t)) or ["_"]) for t in tools]
    lengths = [sum(d.values()) for d in docs]
    n = len(docs)
    mean_length = sum(lengths) / n
    df: Counter[str] = Counter(term for d in docs for term in d)
    idf = {term: math.log(n - c + 0.5) - math.log(c + 0.5) for term, c in df.items()}
    floor = 0.25 * sum(idf.values()) / len(idf)
    scores = [0.0] * n
    for term in tokenize(query):
        if term not in df:
            continue
        weight = idf[term] if idf[term] >= 0 else floor
        for i, d in enumerate(docs):
            tf = d.get(term, 0)
            if tf:
                norm = 1.5 * (1 - 0.75 + 0.75 * lengths[i] / mean_length)
                scores[i] += weight * tf * 2.5 / (tf + norm)
    order = sorted(range(n), key=lambda i: (-scores[i], tools[i].name))
    return [tools[i].name for i in order]
