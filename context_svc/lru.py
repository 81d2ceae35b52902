"""The bounded in-process LRU mapping the context engine's per-process caches use."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["LRU"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """A small bounded mapping; the least recently used entry goes first."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"an LRU needs room for at least one entry, got size {size}")
        self.size = size
        self._data: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: K) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def keys_of(self, value: V) -> list[K]:
        """The keys holding `value` (a scan of every entry: for rare operations, such as an erasure)."""
        return [key for key, held in self._data.items() if held == value]

    def forget(self, key: K) -> None:
        self._data.pop(key, None)

    def put(self, key: K, value: V) -> V:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.size:
            self._data.popitem(last=False)
        return value
