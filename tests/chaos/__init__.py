"""`make chaos`: random kill -9 and SIGSTOP of the services and Redis during tasks with counted side
effects, then hard invariant checks (issue 18). The library is `tests.chaos.harness.run_chaos`;
`python -m tests.chaos` prints its table; `test_chaos_short.py` is the short seeded run of `make test`."""
