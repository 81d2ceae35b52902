"""Benchmarks: each `bench_*.py` prints a table (run them all with `make bench`)."""
