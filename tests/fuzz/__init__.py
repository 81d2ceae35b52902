"""Hostile-input fuzzing of every RPC of every service (issue 19): `python -m tests.fuzz`, `make fuzz`."""
