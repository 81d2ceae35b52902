"""Vector search at 10k and 100k records: the exact scan of agentmesh/semantic.py against an engine (issue 51).

Data: synthetic, 512-dimensional unit vectors (the offline embedder's size) drawn around 2,000 centres
(each record = its centre + noise of the same norm, so neighbourhoods are as crowded as a memory of many
similar statements); 200 queries drawn the same way. Not public data: 100k embedded texts would take
~140 s of CPU with the offline model, and the recall of an exact scan does not depend on the texts.

Measured per size:
- exact (`VectorIndex.search_vector`, one matrix-vector product over every row): query p50 / p95, one core
  (OMP and BLAS threads 1); its recall@10 is 1 by definition;
- LanceDB (when `lancedb` is importable; not a dependency: `pip install --target DIR lancedb==0.40.0` and
  PYTHONPATH=DIR), a table on local disk: brute force (no index) and an IVF_HNSW_SQ index; recall@10
  against the exact top 10, query p50 / p95, index build time.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python -m bench.bench_vectors [--sizes 10000 100000]
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agentmesh.embeddings import Vectors, normalize
from agentmesh.semantic import VectorIndex

DIM = 512
CENTRES = 2000
QUERIES = 200
K = 10


class _NoEmbedder:
    model = "none"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> Vectors:
        raise AssertionError("the bench adds vectors, it never embeds")


def data(n: int, seed: int = 7) -> tuple[Vectors, Vectors]:
    rng = np.random.default_rng(seed)
    centres = normalize(rng.standard_normal((CENTRES, DIM)).astype(np.float32))

    def around(count: int) -> Vectors:
        picks = rng.integers(0, CENTRES, count)
        noise = normalize(rng.standard_normal((count, DIM)).astype(np.float32))
        return normalize(centres[picks] + noise)

    return around(n), around(QUERIES)


def timed(fn: Callable[[Vectors], list[int]], queries: Vectors) -> tuple[list[list[int]], list[float]]:
    results, times = [], []
    for q in queries:
        started = time.perf_counter()
        results.append(fn(q))
        times.append((time.perf_counter() - started) * 1000)
    return results, times


def recall(got: list[list[int]], truth: list[list[int]]) -> float:
    return sum(len(set(g[:K]) & set(t[:K])) for g, t in zip(got, truth, strict=True)) / (K * len(truth))


def p(times: list[float], q: float) -> float:
    return statistics.quantiles(times, n=100)[int(q) - 1] if len(times) > 1 else times[0]


def lance_rows(n: int, rows: Vectors) -> list[dict[str, Any]]:
    return [{"id": i, "vector": rows[i]} for i in range(n)]


def bench_lance(
    rows: Vectors, queries: Vectors, truth: list[list[int]]
) -> list[tuple[str, float, float, float, float]]:
    try:
        import lancedb  # type: ignore[import-not-found, unused-ignore]
        import pyarrow as pa  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return []
    out = []
    folder = tempfile.mkdtemp(prefix="bench-lance-")
    try:
        db = lancedb.connect(folder)
        n = rows.shape[0]
        table = db.create_table(
            "v",
            pa.table(
                {"id": pa.array(range(n), pa.int64()), "vector": pa.FixedSizeListArray.from_arrays(rows.ravel(), DIM)}
            ),
        )

        def search(q: Vectors) -> list[int]:
            hits = table.search(q).distance_type("dot").limit(K).to_arrow()
            return [int(x) for x in hits.column("id").to_pylist()]

        got, times = timed(search, queries)
        out.append(("lancedb, no index", recall(got, truth), p(times, 50), p(times, 95), 0.0))
        from lancedb.index import IvfHnswSq  # type: ignore[import-not-found, unused-ignore]

        started = time.perf_counter()
        partitions = max(1, int(n**0.5) // 4)
        table.create_index("vector", config=IvfHnswSq(distance_type="dot", num_partitions=partitions))
        built = time.perf_counter() - started
        for nprobes in sorted({max(1, partitions // 8), max(1, partitions // 2), partitions}):

            def search_index(q: Vectors, nprobes: int = nprobes) -> list[int]:
                hits = table.search(q).distance_type("dot").nprobes(nprobes).ef(64).limit(K).to_arrow()
                return [int(x) for x in hits.column("id").to_pylist()]

            got, times = timed(search_index, queries)
            name = f"lancedb IVF_HNSW_SQ {nprobes}/{partitions} probes"
            out.append((name, recall(got, truth), p(times, 50), p(times, 95), built))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return out


def exact_search(index: VectorIndex[int], q: Vectors) -> list[int]:
    return [h.key for h in index.search_vector(q, K)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    args = parser.parse_args()
    print(f"{'records':>8}  {'method':<38} {'recall@10':>9} {'p50 ms':>8} {'p95 ms':>8} {'build s':>8}")
    for n in args.sizes:
        rows, queries = data(n)
        index: VectorIndex[int] = VectorIndex(_NoEmbedder(), min_score=-1.0)
        index.add_vectors(list(range(n)), rows)
        truth, times = timed(functools.partial(exact_search, index), queries)
        exact = "exact scan (VectorIndex)"
        print(f"{n:>8}  {exact:<38} {1.0:>9.3f} {p(times, 50):>8.2f} {p(times, 95):>8.2f} {0.0:>8.1f}")
        for name, r, p50, p95, built in bench_lance(rows, queries, truth):
            print(f"{n:>8}  {name:<38} {r:>9.3f} {p50:>8.2f} {p95:>8.2f} {built:>8.1f}")


if __name__ == "__main__":
    main()
