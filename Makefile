# agentmesh developer entry points. `make test` is all a fresh clone needs: it creates .venv,
# installs the pinned dependencies, the pinned npm tooling (buf, protoc-gen-es, TypeScript) and the
# Debian toolchains of the Go/Java stubs (`make toolchains`), lints, then runs the suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PROTO_FILES := $(wildcard protos/agentmesh/v1/*.proto)
PYTEST_ARGS ?=
# `make test` runs the suite in this many pytest-xdist workers: most tests wait on processes, sockets and
# timers, so two workers on two cores took 800 s where one took 1,167 s (2026-12-07, same load). Every test
# owns its ports, Redis and temporary files, so workers share nothing. `PYTEST_WORKERS=0` runs it serially.
PYTEST_WORKERS ?= 2

.PHONY: test lint protos gen clients toolchains demo bench fuzz fuzz-context soak-context pool-pressure chaos venv clean up baseline test-cluster chaos-replicas chaos-relay test-readme mutate litellm-venv test-litellm bench-gateway bench-peer console console-screenshots

# The contracts as released: `buf breaking` compares the protos against it in `make lint`. Recut it
# (`make baseline`) only in a commit that also records the break in CHANGELOG.md.
BASELINE := protos/breaking-baseline.binpb

venv: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: pyproject.toml clients/python-tools/pyproject.toml clients/python/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	# agentmesh-tools (@tool functions served over MCP): its dependencies are agentmesh's, pinned above.
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e clients/python-tools
	# agentmesh-client: `agentmesh run` streams a task with it (its three dependencies are agentmesh's).
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e clients/python
	touch $@

# buf is pinned in package.json/package-lock.json and installed from the npm registry.
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The server's stubs (agentmesh/v1) and the Python client's copy (clients/python/agentmesh_client/_v1).
protos: $(VENV)/.installed
	$(PY) -m agentmesh.dev.codegen agentmesh/v1
	$(PY) -m agentmesh.dev.codegen --client clients/python/agentmesh_client/_v1

# Go, TypeScript and Java stubs into gen/ (not committed), and the Python ones into agentmesh/v1 (the
# same bytes as `make protos`): buf.gen.yaml, local plugins only.
gen: venv toolchains
	rm -rf gen
	npx --no-install buf generate

# The example clients (examples/clients/go, examples/clients/ts) and the Java stubs, built from gen/.
clients: gen
	scripts/build-clients.sh all

# The web console (console/, docs/design.md §17) into agentmesh/console_dist/, committed: the pinned
# protoc-gen-es, TypeScript (strict check) and esbuild; tests/console checks the committed bytes are its build.
console: node_modules/.installed
	scripts/build-console.sh

# The README's screenshots of the console (docs/console/*.png), taken by its browser tests.
console-screenshots: venv toolchains
	CONSOLE_SCREENSHOTS=1 $(BIN)/pytest -q tests/console/test_console_browser.py $(PYTEST_ARGS)

# Debian packages of the Go and Java toolchains (scripts/install-toolchains.sh): a no-op when present.
toolchains:
	scripts/install-toolchains.sh

baseline: node_modules/.installed
	npx --no-install buf build -o $(BASELINE)

lint: venv
	npx --no-install buf lint
	img=$$(mktemp --suffix=.binpb) && npx --no-install buf build -o $$img \
	  && npx --no-install buf breaking $$img --against $(BASELINE); rc=$$?; rm -f $$img; exit $$rc
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

test: lint toolchains
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

demo: venv
	$(BIN)/agentmesh demo
	$(BIN)/agentmesh demo relay

bench: venv
	@for b in bench/bench_*.py; do m=$$(basename $$b .py); echo "== $$b"; $(PY) -m bench.$$m || exit 1; done

# Mutation testing (scripts/mutate.py, issue 50) of the modules that keep a promise, each with its fast
# tests: the score per module (equivalent mutants of scripts/mutate_equivalent.txt excluded) and the
# survivors; results under var/mutate/<module>/. `make mutate MODULE=lease` runs one module. CPU-heavy:
# one module and one mutant at a time, under nice.
MODULE ?=
mutate: venv
	nice -n 10 $(PY) scripts/mutate.py $(MODULE)

# Hostile and mutated messages to every RPC of every service (tests/fuzz): never UNKNOWN or INTERNAL.
fuzz: venv
	$(PY) -m tests.fuzz --per-rpc 2000

# Generated long sessions (tests/contextgen, issue 23: English, Chinese, mixed; planted facts, negations,
# corrections, numbers in words) built at 3k/6k/12k tokens: no wrong fact stated, no planted fact lost
# while it fits. `make test` runs a bounded sample; `python -m tests.contextgen --help` for the knobs.
fuzz-context: venv
	$(PY) -m tests.contextgen --sessions 300 --turns 40-240

# context_svc's resident memory over 10,000 task attempts against its own process (issue 39): the
# per-process caches fill, then RSS stays flat; the growth over the second half is printed.
soak-context: venv
	$(PY) -m bench.soak_context --attempts 10000

# 750 tasks over Redis pools of 20 connections per service (issue 39): every task ends (SUCCEEDED, or FAILED
# typed and SUCCEEDED on resume); none stays RUNNING without a new event past the liveness window.
# The suite runs the same test with 40 tasks.
pool-pressure: venv
	AGENTMESH_POOL_TASKS=750 $(BIN)/pytest -q -s tests/contract/test_pool_pressure_stack.py

# Random kill -9 and SIGSTOP of the services and Redis during tasks whose side effects the upstreams
# count (tests/chaos, issue 18): 10 rounds x 30 tasks, 10 kill -9 per round (100 in all), then the
# invariants. Prints the table; exits 1 on any violation. `python -m tests.chaos --help` for the knobs.
# --no-resume (issue 49): the driver never resumes a FAILED task; the dispatcher waits out the restarts.
CHAOS_SEED ?= 1
chaos: venv
	$(PY) -m tests.chaos --seed $(CHAOS_SEED) --rounds 10 --tasks 30 --kills 10 --no-resume

# Relays of four agents (transfer, ask, transfer checked by a verifier) on two dispatcher replicas, one
# killed with -9 at random moments (issue 44): every relay whole (one child a hop, every event once).
# 40 relays and 12 kills (about 75 s); `PYTEST_ARGS=--redis=cluster` runs it on a Redis Cluster.
RELAY_CHAOS_SEED ?= 44
chaos-relay: venv
	AGENTMESH_RELAY_CHAOS_RUNS=40 AGENTMESH_RELAY_CHAOS_KILLS=12 AGENTMESH_RELAY_CHAOS_SEED=$(RELAY_CHAOS_SEED) \
	  $(BIN)/pytest -q -s tests/e2e/dispatcher/test_relay_chaos.py $(PYTEST_ARGS)

# The tests that touch the store, on a local Redis Cluster of 3 primaries and 3 replicas
# (tests/rediscluster.py, issue 28): the contract suites of the services' Redis state, the Store's own,
# stored formats, the end-to-end runs of several processes on one Redis, and a short chaos run with two
# replicas of every service. Left out (Redis only starts their services, or they test a standalone
# Redis itself): the edge, TLS, tracing, CLI and packaging tests, provider adapters' wire formats,
# tool_svc's HTTP rules, fuzzing and CPU isolation, and the exactly-once e2e tests that restart a
# standalone AOF Redis (the failover test and the chaos run are their cluster counterparts).
CLUSTER_TESTS := tests/contract/context tests/contract/dispatcher \
  $(addprefix tests/contract/tool/test_,execute.py idempotency.py idempotency_header.py unknown_outcome.py \
    audit.py registry_grpc.py secret_leaks.py security.py shared_breaker.py) \
  $(addprefix tests/contract/provider/test_,billing.py server.py retry_http.py) tests/contract/gateway \
  tests/contract/test_store_redis.py tests/contract/test_store_pool.py tests/contract/test_store_cluster.py \
  tests/contract/test_readiness.py tests/contract/test_audit_edge.py tests/compat \
  tests/contract/test_workflow_runs.py tests/contract/test_workflow_driver.py \
  tests/e2e/dispatcher/test_demo_scenario.py tests/e2e/dispatcher/test_crash_safety.py \
  $(addprefix tests/e2e/dispatcher/test_,handoff_relay.py handoff_crash.py relay_acceptance.py) \
  tests/e2e/dispatcher/test_workflow_crash.py tests/e2e/dispatcher/test_workflow_policies.py \
  tests/e2e/context tests/e2e/tool tests/chaos/test_chaos_replicas.py
test-cluster: venv
	$(BIN)/pytest -q --redis=cluster $(CLUSTER_TESTS) $(PYTEST_ARGS)

# The README from a fresh clone (tests/readme, issue 27): `git clone` of HEAD (commit first: uncommitted
# changes are not in the clone) into a temporary directory, the README's install step for real (PyPI,
# npm), `agentmesh up &` and the first `agentmesh run` (SUCCEEDED), then every other shell block in
# order, each exiting 0. `make test` runs the same session in this checkout.
# Then agentmesh-tools installs alone in a fresh venv (no agentmesh) and serves tools.py (issue 42).
test-readme: venv
	README_TEST_CLONE=1 $(BIN)/pytest -q tests/readme/test_readme.py -k fresh_clone $(PYTEST_ARGS)
	README_TEST_CLONE=1 $(BIN)/pytest -q tests/contract/tool/test_function_tools.py -k installs_alone $(PYTEST_ARGS)

# Two replicas of every service (round-robin between them) on a Redis Cluster: 200 tasks whose side
# effects the upstreams count, while one replica of each service and one Redis primary are killed with
# -9 and restarted (tests/chaos --rolling, issue 28). Prints the table; exits 1 on any violation.
chaos-replicas: venv
	$(PY) -m tests.chaos --seed $(CHAOS_SEED) --rounds 1 --tasks 200 --replicas 2 --redis cluster --rolling --no-resume

# LiteLLM's proxy in a venv of its own (its pins would fight ours), from PyPI at the versions in
# bench/litellm-requirements.txt: the third-party client of `make test-litellm` and the proxy bench_gateway
# compares against. Not part of `make venv`: it is large, and only these two targets need it.
LITELLM_VENV := .venv-litellm
litellm-venv: $(LITELLM_VENV)/.installed

$(LITELLM_VENV)/.installed: bench/litellm-requirements.txt
	test -x $(LITELLM_VENV)/bin/python || $(PYTHON) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/pip install --quiet --disable-pip-version-check -r bench/litellm-requirements.txt
	touch $@

# LiteLLM's proxy pointed at provider_svc's /v1/chat/completions serves a chat and a stream (issue 43);
# `make test` runs it too when the venv exists (about 10 s), and skips it otherwise.
test-litellm: venv litellm-venv
	LITELLM_REQUIRED=1 $(BIN)/pytest -q tests/litellm $(PYTEST_ARGS)

# The compatible endpoint beside LiteLLM's proxy on the same fake upstream (added p50, requests/s at c1 and c32).
bench-gateway: venv litellm-venv
	$(PY) -m bench.bench_gateway

# One task (model -> calculator -> model -> answer, scripted model) through agentmesh's four services and
# through LangGraph with its SQLite checkpointer, alternating rounds: c1 p50, c32 tasks/s, CPU-ms and Redis
# commands per task, and their ratios (issue 45), beside the task's bare shape on four gRPC processes (the
# floor of this design, bench/peer_skeleton.py). BEFORE=<checkout> also runs another agentmesh checkout.
BEFORE ?=
bench-peer: venv
	$(PY) -m bench.bench_peer --skeleton $(if $(BEFORE),--before $(BEFORE))

up: venv
	$(BIN)/agentmesh up

clean:
	rm -rf $(VENV) $(LITELLM_VENV) node_modules .mypy_cache .pytest_cache .ruff_cache gen build/clients examples/clients/ts/dist console/gen
