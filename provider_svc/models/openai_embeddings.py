"""`openai` embeddings: `POST {base_url}/embeddings` (OpenAI, and vLLM, Ollama, llama.cpp, TEI servers).

Only translates: texts -> `{"model", "input": [...], "encoding_format": "float"}` -> one vector per text
(ordered by each item's `index`), normalized to unit length, and the usage's `prompt_tokens`. A body that
is not what the protocol promises is a malformed-response error, never a KeyError.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentmesh.embeddings import Vectors, normalize
from agentmesh.errors import AgentmeshError
from provider_svc.exceptions import malformed
from provider_svc.models._http import HttpBackend, RawNumber
from provider_svc.models.base import CallContext

__all__ = ["EmbeddingResult", "OpenAIEmbeddings", "parse_embeddings"]


@dataclass(frozen=True, slots=True)
class EmbeddingResult:
    """Vectors of a batch, in input order, with the tokens the upstream counted and its latency."""

    vectors: Vectors
    input_tokens: int
    latency_s: float


def _number(provider: str, value: Any) -> float:
    if isinstance(value, RawNumber):
        return float(value.text)
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    raise malformed(provider, "an embedding holds a non-number")


def parse_embeddings(provider: str, data: Any, count: int, latency_s: float = 0.0) -> EmbeddingResult:
    """The vectors of an embeddings body for `count` inputs; malformed-response errors."""
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list) or len(items) != count:
        raise malformed(provider, f"expected {count} embeddings in data")
    rows: list[list[float] | None] = [None] * count
    for position, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("embedding"), list):
            raise malformed(provider, f"data[{position}] has no embedding list")
        index = item.get("index", position)
        if not isinstance(index, int) or not 0 <= index < count or rows[index] is not None:
            raise malformed(provider, f"data[{position}].index is missing, out of range or repeated")
        rows[index] = [_number(provider, v) for v in item["embedding"]]
    full = [r for r in rows if r is not None]  # every index was seen once: all are set
    dims = {len(r) for r in full}
    if len(dims) != 1 or 0 in dims:
        raise malformed(provider, "embeddings are empty or of different lengths")
    usage = data.get("usage") or {}
    tokens = usage.get("prompt_tokens", 0) if isinstance(usage, dict) else None
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        raise malformed(provider, "usage.prompt_tokens is not a non-negative integer")
    return EmbeddingResult(normalize(full), tokens, latency_s)


class OpenAIEmbeddings:
    """An embedding model on an OpenAI-compatible `/embeddings` endpoint."""

    def __init__(self, backend: HttpBackend, provider_name: str, model_id: str) -> None:
        self._backend = backend
        self._provider = provider_name
        self.model_id = model_id
        self.name = f"{provider_name}/{model_id}"

    async def embed(self, texts: Sequence[str], ctx: CallContext) -> EmbeddingResult:
        """One unit vector per text; typed upstream errors (timeouts, 4xx/5xx, malformed bodies)."""
        body = json.dumps(
            {"model": self.model_id, "input": list(texts), "encoding_format": "float"},
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()
        started = time.monotonic()
        _, data, latency = await self._backend.post_json("embeddings", body, ctx)
        try:
            return parse_embeddings(self._provider, data, len(texts), latency or time.monotonic() - started)
        except AgentmeshError as err:
            raise self._backend.scrubbed(err) from None
