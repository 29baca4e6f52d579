.DEFAULT_GOAL := help
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PYTEST := $(PY) -m pytest

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed  ## Create the venv and install the project with its dev tools

run: install  ## Run the whole service here: API, worker, beat and Flower (SQLite + local Redis)
	./deploy/ensure-services.sh
	EVIDENCE=$(BIN)/evidence ./deploy/dev-env.sh
	set -a && . var/dev.env && set +a && PATH="$(abspath $(BIN)):$$PATH" exec ./deploy/run.sh deploy/Procfile

demo: install  ## Watch it work offline: local HTTPS samples, API, worker, beat, `evidence enqueue --wait`
	./deploy/demo.sh

COVERAGE_FLOOR ?= 93
COV := COVERAGE_FILE=$(abspath var/coverage/data) $(PY) -m coverage
# On SQLite (`make run`'s database) again: what runs different SQL there (the store, claims,
# batch inserts, quotas, revisions, freshness, expiry, the read side). The lifecycle through the
# worker on SQLite is `make demo`'s; input checks, long-poll, killed workers and content errors
# do not depend on the database and run once, on PostgreSQL.
SQLITE_TESTS ?= tests/read tests/lifecycle/test_store.py tests/lifecycle/test_batch.py \
	tests/lifecycle/test_lanes.py tests/lifecycle/test_quotas.py \
	tests/lifecycle/test_revision_bounds.py tests/lifecycle/test_freshness.py \
	tests/lifecycle/test_open_tally.py tests/lifecycle/test_group_settle.py \
	tests/lifecycle/test_group_claim.py tests/lifecycle/test_confined_groups.py \
	tests/lifecycle/test_confined_lane.py tests/lifecycle/test_recovery.py::TestExpiry \
	tests/ops/test_keys.py
# Test processes per run (pytest-xdist, a test file at a time): each has services of its own (a
# database, Redis, the HTTPS sites, Celery workers). Many tests wait on those processes, so two
# keep both cores busy where one left them half idle.
TEST_PROCESSES ?= 2
PYTEST_N := -n $(TEST_PROCESSES) --dist loadfile
test: install  ## Run the test suite (PostgreSQL, then what runs different SQL on SQLite) with coverage
	./deploy/ensure-services.sh --postgres
	rm -rf var/coverage && mkdir -p var/coverage
	@# Every part runs, and coverage is printed, even when a part fails; then make fails.
	@failed=""; \
	$(COV) run -m pytest -q $(PYTEST_N) -m "not fault" --durations=15 || failed="$$failed postgres"; \
	$(COV) run -m pytest -q $(PYTEST_N) --db sqlite -m "not fault" $(SQLITE_TESTS) || failed="$$failed sqlite"; \
	$(COV) combine -q; \
	if $(COV) report --format=total --fail-under=$(COVERAGE_FLOOR) >/dev/null; then \
		echo "coverage: $$($(COV) report --format=total) % of api/ and worker/ (floor $(COVERAGE_FLOOR) %)"; \
	else \
		$(COV) report --sort=cover | tail -25; echo "coverage below $(COVERAGE_FLOOR) %"; failed="$$failed coverage"; \
	fi; \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed"; exit 1; fi

test-faults: install  ## Run the fault-injection suite against the real services
	./deploy/ensure-services.sh --postgres
	$(PYTEST) -q $(PYTEST_N) -m fault

lint: install  ## Ruff (lint and format), mypy (strict on api/ and worker/), import-linter (layers)
	$(BIN)/ruff check api worker tests bench
	$(BIN)/ruff format --check api worker tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

format: install  ## Format the code
	$(BIN)/ruff format api worker tests bench
	$(BIN)/ruff check --fix api worker tests bench

migrate: install  ## Apply the migrations to EVIDENCE_DATABASE_URL
	$(BIN)/evidence migrate

LOAD_ARGS ?= --rate 200 --duration 60 --as-make-run
load: install  ## Load test: open-loop POST-then-poll against the running service (PostgreSQL)
	./deploy/ensure-services.sh --postgres
	$(PY) -m bench.load $(LOAD_ARGS)

# About 5 minutes; the issue's full size: OVERLOAD_ARGS="--duration 30 --flood-duration 30".
OVERLOAD_ARGS ?=
overload: install  ## Overload: one workspace's pollers ignoring Retry-After and its read flood, against another's retrievals, for make run's processes and the CLI defaults
	./deploy/ensure-services.sh --postgres
	$(PY) -m bench.overload $(OVERLOAD_ARGS)

BENCH_ARGS ?= --pages 1000 --repeat 2 --latency-ms 0,mix
bench: install  ## Throughput side by side: extraction limit, plain script, trafilatura CLI, the service
	./deploy/ensure-services.sh --postgres
	$(PY) -m bench.throughput $(BENCH_ARGS)

FAIRNESS_ARGS ?=
bench-fairness: install  ## Fairness: an agent's single retrievals during another workspace's 1 500-URL batch
	./deploy/ensure-services.sh --postgres
	$(PY) -m bench.fairness $(FAIRNESS_ARGS)

REVALIDATION_ARGS ?= --pages 1000
bench-revalidation: install  ## Re-retrieving unchanged pages (304s) against a first pass: CPU and bytes
	./deploy/ensure-services.sh --postgres
	$(PY) -m bench.revalidation $(REVALIDATION_ARGS)

.PHONY: help install run demo test test-faults lint format migrate load overload bench bench-fairness \
	bench-revalidation
