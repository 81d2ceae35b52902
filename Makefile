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

.PHONY: test lint protos gen clients toolchains demo bench fuzz fuzz-context chaos venv clean up baseline

# The contracts as released: `buf breaking` compares the protos against it in `make lint`. Recut it
# (`make baseline`) only in a commit that also records the break in CHANGELOG.md.
BASELINE := protos/breaking-baseline.binpb

venv: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

# buf is pinned in package.json/package-lock.json and installed from the npm registry.
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

protos: $(VENV)/.installed
	$(PY) -m agentmesh.codegen agentmesh/v1

# Go, TypeScript and Java stubs into gen/ (not committed), and the Python ones into agentmesh/v1 (the
# same bytes as `make protos`): buf.gen.yaml, local plugins only.
gen: venv toolchains
	rm -rf gen
	npx --no-install buf generate

# The example clients (examples/clients/go, examples/clients/ts) and the Java stubs, built from gen/.
clients: gen
	scripts/build-clients.sh all

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
	$(BIN)/pytest -q $(PYTEST_ARGS)

demo: venv
	$(BIN)/agentmesh demo

bench: venv
	@for b in bench/bench_*.py; do m=$$(basename $$b .py); echo "== $$b"; $(PY) -m bench.$$m || exit 1; done

# Hostile and mutated messages to every RPC of every service (tests/fuzz): never UNKNOWN or INTERNAL.
fuzz: venv
	$(PY) -m tests.fuzz --per-rpc 2000

# Generated long sessions (tests/contextgen, issue 23: English, Chinese, mixed; planted facts, negations,
# corrections, numbers in words) built at 3k/6k/12k tokens: no wrong fact stated, no planted fact lost
# while it fits. `make test` runs a bounded sample; `python -m tests.contextgen --help` for the knobs.
fuzz-context: venv
	$(PY) -m tests.contextgen --sessions 300 --turns 40-240

# Random kill -9 and SIGSTOP of the services and Redis during tasks whose side effects the upstreams
# count (tests/chaos, issue 18): 10 rounds x 30 tasks, 10 kill -9 per round (100 in all), then the
# invariants. Prints the table; exits 1 on any violation. `python -m tests.chaos --help` for the knobs.
CHAOS_SEED ?= 1
chaos: venv
	$(PY) -m tests.chaos --seed $(CHAOS_SEED) --rounds 10 --tasks 30 --kills 10

up: venv
	$(BIN)/agentmesh up

clean:
	rm -rf $(VENV) node_modules .mypy_cache .pytest_cache .ruff_cache gen build/clients examples/clients/ts/dist
