"""Embed: texts to unit vectors, with usage and cost recorded like Generate's (issue 51).

Two kinds of model: the offline one (`agentmesh.embeddings.OfflineEmbedder`, USE multilingual v3 shipped
in its wheel, named `offline/use-multilingual-v3`, the default, free) and a configured backend of type
`openai` (`provider/model`, its `/embeddings` endpoint, `models/openai_embeddings.py`), priced at the
model's `input_price_per_mtok`. Each distinct (model, text) is embedded once per process: vectors are
kept by content hash (`agentmesh.embeddings.content_key`) in an LRU, and a cached text costs nothing.

Bad input is INVALID_REQUEST naming the field: no inputs, more than `MAX_INPUTS`, an empty text or one
over `MAX_CHARS`, more than `MAX_TOTAL_CHARS` in all, a model of a backend that does not embed
(Anthropic, scripted). A model the caller's API key may not use is PERMISSION_DENIED; a backend without
its key PROVIDER_AUTH_FAILED; upstream failures are the typed errors of `_http.py`.

Like Generate, a call that computes anything is admitted first in the caller's quota scopes (requests,
tokens and budgets: its estimated tokens and their cost are reserved, then settled at the real usage; a
failure releases the reservation, or settles it at no cost once a request went upstream), and a remote
model's transient failures (network, 5xx, 429) are retried by the backend's `retry:` policy, each attempt
listed in the call context. A call answered wholly from the cache is not admitted: it costs nothing.

The offline model runs in a worker thread (a batch of 256 short texts is ~0.4 s of CPU); its token
usage is estimated as UTF-8 bytes / 4 (at least 1 a text), since its SentencePiece count is internal.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentmesh.chat import Usage
from agentmesh.embeddings import OFFLINE_MODEL, Embedder, OfflineEmbedder, Vectors, content_key
from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError, PermissionDeniedError, echo
from provider_svc.composition import retry_policy
from provider_svc.models.base import Attempt, CallContext
from provider_svc.models.openai_embeddings import EmbeddingResult, OpenAIEmbeddings
from provider_svc.models.retry import RetryPolicy, http_status_of, retry_delay
from provider_svc.service import ANONYMOUS_AGENT, Providers, unavailable_reason
from provider_svc.usage import Prices, cost_usd

__all__ = ["MAX_CHARS", "MAX_INPUTS", "MAX_TOTAL_CHARS", "OFFLINE_NAME", "Embedded", "Embeddings"]

OFFLINE_NAME = f"offline/{OFFLINE_MODEL}"
"""The offline model's name in Embed requests and usage rows."""
MAX_INPUTS = 256
MAX_CHARS = 8192
MAX_TOTAL_CHARS = 65536
"""A call's texts together: the offline model costs ~25 us of CPU a character (251k characters: 6.2 s on
one core), so a batch of 256 maximal texts would hold it for ~50 s; this bounds a call to ~1.6 s."""
_CACHE_ENTRIES = 65536


@dataclass(frozen=True, slots=True)
class Embedded:
    """One Embed call's answer: a vector per input (in order), which came from the cache, and accounting."""

    model: str
    vectors: Vectors
    cached: tuple[bool, ...]
    usage: Usage
    cost_usd: float
    latency_s: float


def validate_inputs(texts: Sequence[str]) -> None:
    """INVALID_REQUEST naming the field for an empty or oversized batch or text."""
    if not texts:
        raise InvalidRequestError("inputs", "at least one text is required")
    if len(texts) > MAX_INPUTS:
        raise InvalidRequestError("inputs", f"at most {MAX_INPUTS} texts a call, got {len(texts)}")
    for i, text in enumerate(texts):
        if not text.strip():
            raise InvalidRequestError(f"inputs[{i}]", "must not be empty")
        if len(text) > MAX_CHARS:
            raise InvalidRequestError(f"inputs[{i}]", f"at most {MAX_CHARS} characters, got {len(text)}")
    total = sum(len(t) for t in texts)
    if total > MAX_TOTAL_CHARS:
        raise InvalidRequestError("inputs", f"at most {MAX_TOTAL_CHARS} characters in all, got {total}")


def estimate_tokens(text: str) -> int:
    """The offline model's token usage of `text` (UTF-8 bytes / 4, at least 1)."""
    return max(1, len(text.encode()) // 4)


class Embeddings:
    """The Embed RPC's domain (see the module docstring)."""

    def __init__(self, providers: Providers, *, offline: Embedder | None = None, entries: int = _CACHE_ENTRIES) -> None:
        self.providers = providers
        self.offline = offline or OfflineEmbedder()
        self._entries = entries
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._remote: dict[str, OpenAIEmbeddings] = {}
        self._policies: dict[str, RetryPolicy] = {}

    def _model(self, name: str, ctx: CallContext) -> tuple[str, OpenAIEmbeddings | None, Prices]:
        """(model name, its remote adapter or None for the offline model, its prices)."""
        if name in ("", OFFLINE_NAME, OFFLINE_MODEL, "offline"):
            return OFFLINE_NAME, None, Prices()
        resolved = self.providers.router.resolve(name)
        if not self.providers.allowed(resolved, ctx.model_patterns, name):
            raise PermissionDeniedError(f"model:{resolved.name}", f"this API key may not use {echo(name)}")
        backend = resolved.backend
        if backend.type != "openai":
            raise InvalidRequestError(
                "model", f"{echo(name)} is on a {backend.type} backend, which has no embeddings endpoint"
            )
        if not backend.available:
            raise AgentmeshError(
                ErrorCode.PROVIDER_AUTH_FAILED,
                f"{resolved.name} is unavailable: {unavailable_reason(backend)}",
                retryable=False,
                metadata={"provider": backend.name, "reason": "unavailable"},
            )
        adapter = self._remote.get(resolved.name)
        if adapter is None:
            http = self.providers._http_backend(backend)
            adapter = self._remote[resolved.name] = OpenAIEmbeddings(http, backend.name, resolved.model_id)
            self._policies[adapter.name] = retry_policy(backend)
        return resolved.name, adapter, self.providers.prices(resolved.name)

    def _lookup(self, keys: Sequence[str]) -> list[Vectors | None]:
        out: list[Vectors | None] = []
        for key in keys:
            vector = self._cache.get(key)
            if vector is not None:
                self._cache.move_to_end(key)
            out.append(vector)
        return out

    def _keep(self, key: str, vector: Vectors) -> None:
        self._cache[key] = vector
        self._cache.move_to_end(key)
        while len(self._cache) > self._entries:
            self._cache.popitem(last=False)

    async def _compute(self, texts: list[str], adapter: OpenAIEmbeddings | None, ctx: CallContext) -> EmbeddingResult:
        if adapter is not None:
            return await self._remote_embed(texts, adapter, ctx)
        started = time.monotonic()
        vectors = await asyncio.to_thread(self.offline.embed, texts)
        return EmbeddingResult(vectors, sum(estimate_tokens(t) for t in texts), time.monotonic() - started)

    async def _remote_embed(self, texts: list[str], adapter: OpenAIEmbeddings, ctx: CallContext) -> EmbeddingResult:
        """The adapter's answer, transient failures retried by the backend's policy (as `RetryModel` does)."""
        policy = self._policies[adapter.name]
        retry = 0
        while True:
            started = time.monotonic()
            try:
                result = await adapter.embed(texts, ctx)
            except AgentmeshError as err:
                ctx.attempts.append(Attempt(adapter.name, err, http_status_of(err), time.monotonic() - started))
                retry += 1
                delay = retry_delay(policy, err, retry, ctx)
                if delay is None:
                    raise
                await asyncio.sleep(delay)
                continue
            ctx.attempts.append(Attempt(adapter.name, None, 200, time.monotonic() - started))
            return result

    async def _admitted(
        self, texts: list[str], adapter: OpenAIEmbeddings | None, prices: Prices, ctx: CallContext
    ) -> EmbeddingResult:
        """`_compute` inside a quota reservation of the batch's estimated tokens and their cost."""
        admission = self.providers.admission
        estimate = sum(estimate_tokens(t) for t in texts)
        reserve_usd = cost_usd(Usage(input_tokens=estimate), prices)
        reservation = await admission.reserve(ctx, reserve_usd=reserve_usd, tokens=estimate)
        try:
            result = await self._compute(texts, adapter, ctx)
        except asyncio.CancelledError:
            if adapter is not None:  # a request may be under way upstream: it may be billed
                admission.settle_at(reservation, cost_usd=reserve_usd, tokens=estimate)
            else:
                admission.release(reservation)
            raise
        except BaseException:
            if ctx.attempts:  # an upstream error is not billed, but the request went upstream
                admission.settle_at(reservation, cost_usd=0.0, tokens=0)
            else:
                admission.release(reservation)
            raise
        admission.settle_at(
            reservation, cost_usd=cost_usd(Usage(input_tokens=result.input_tokens), prices), tokens=result.input_tokens
        )
        return result

    async def embed(self, texts: Sequence[str], ctx: CallContext, *, model: str = "") -> Embedded:
        """A vector per text (see the module docstring); raises AgentmeshError."""
        validate_inputs(texts)
        name, adapter, prices = self._model(model, ctx)
        if self.providers.ledger is not None:
            # Before any work: a usage key this agent id cannot make fails the call, not a later flush.
            self.providers.ledger.store.keys.usage(ctx.agent_id or ANONYMOUS_AGENT, "2000-01-01")
        keys = [content_key(name, t) for t in texts]
        found = self._lookup(keys)
        first: dict[str, int] = {}
        for i, vector in enumerate(found):
            if vector is None:
                first.setdefault(keys[i], i)
        todo = sorted(first.values())
        usage, cost, latency = Usage(), 0.0, 0.0
        made: dict[str, Vectors] = {}
        if todo:
            result = await self._admitted([texts[i] for i in todo], adapter, prices, ctx)
            for row, i in enumerate(todo):
                made[keys[i]] = result.vectors[row]
                self._keep(keys[i], result.vectors[row])
            usage = Usage(input_tokens=result.input_tokens)
            cost = cost_usd(usage, prices)
            latency = result.latency_s
            self._account(name, usage, cost, latency, ctx)
        fresh = set(todo)
        vectors = np.stack([made[k] if v is None else v for k, v in zip(keys, found, strict=True)])
        return Embedded(
            model=name,
            vectors=vectors.astype(np.float32, copy=False),
            cached=tuple(i not in fresh and found[i] is not None for i in range(len(texts))),
            usage=usage,
            cost_usd=cost,
            latency_s=latency,
        )

    def _account(self, name: str, usage: Usage, cost: float, latency_s: float, ctx: CallContext) -> None:
        agent = ctx.agent_id or ANONYMOUS_AGENT
        if self.providers.ledger is not None:
            self.providers.ledger.add(agent, name, usage, cost, latency_s, api_key_id=ctx.key_id)
        provider, _, model_id = name.partition("/")
        label = ctx.metric_agent if ctx.metric_agent is not None else agent
        self.providers.metrics.model_usage(label, provider, model_id, usage.input_tokens, 0, cost)

    def forget(self, texts: Sequence[str], *, model: str = OFFLINE_NAME) -> int:
        """Drops the cached vectors of `texts` (a user's erasure); returns how many were held."""
        return sum(self._cache.pop(content_key(model, t), None) is not None for t in texts)
