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

# pywb, which the tests replay exports with, pins redis==2.10.6 against our redis>=5: a venv
# of its own (tests/support/pywb.py).
PYWB := var/tools/pywb
$(PYWB)/bin/wayback:
	python3 -m venv $(PYWB)
	$(PYWB)/bin/pip install -q 'pywb>=2.10'

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
	tests/watches/test_watch_scheduler.py tests/watches/test_watch_events.py \
	tests/lifecycle/test_lanes.py tests/lifecycle/test_quotas.py \
	tests/lifecycle/test_revision_bounds.py tests/lifecycle/test_freshness.py \
	tests/lifecycle/test_open_tally.py tests/lifecycle/test_group_settle.py \
	tests/lifecycle/test_group_claim.py tests/lifecycle/test_confined_groups.py \
	tests/lifecycle/test_confined_lane.py tests/lifecycle/test_recovery.py::TestExpiry \
	tests/ops/test_keys.py
# Test processes per run (pytest-xdist, a test file at a time): each has services of its own (a
# database, Redis, the HTTPS sites, Celery workers). Most tests wait on those processes, so three
# keep two cores busier than two did.
TEST_PROCESSES ?= 3
PYTEST_N := -n $(TEST_PROCESSES) --dist loadfile
# The suite's two runs with the pytest command $(1): PostgreSQL, then what runs different SQL
# on SQLite. Both run even when the first fails; `failed` names those that failed.
suite = failed=""; \
	$(1) -q $(PYTEST_N) -m "not fault and not cluster" --durations=15 || failed="$$failed postgres"; \
	$(1) -q $(PYTEST_N) --db sqlite -m "not fault and not cluster" $(SQLITE_TESTS) || failed="$$failed sqlite";

test: install $(PYWB)/bin/wayback  ## Run the test suite (PostgreSQL, then what runs different SQL on SQLite)
	./deploy/ensure-services.sh --postgres
	@$(call suite,$(PYTEST)) \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed"; exit 1; fi

# Coverage doubles the suite's CPU (it traces every process the tests start), so it is a target
# of its own rather than part of `make test` and CI (docs/measurements.md, "CI's time").
coverage: install $(PYWB)/bin/wayback  ## `make test` under coverage, across every process it starts, against its floor
	./deploy/ensure-services.sh --postgres
	rm -rf var/coverage && mkdir -p var/coverage
	@# The report is printed even when a test fails; then make fails.
	@$(call suite,$(COV) run -m pytest) \
	$(COV) combine -q; \
	if $(COV) report --format=total --fail-under=$(COVERAGE_FLOOR) >/dev/null; then \
		echo "coverage: $$($(COV) report --format=total) % of api/ and worker/ (floor $(COVERAGE_FLOOR) %)"; \
	else \
		$(COV) report --sort=cover | tail -25; echo "coverage below $(COVERAGE_FLOOR) %"; failed="$$failed coverage"; \
	fi; \
	if [ -n "$$failed" ]; then echo "make coverage: failed:$$failed"; exit 1; fi

# Fault tests wait on leases and restarts; a class at a time spreads test_faults.py's classes,
# which as one file kept one process busy for most of the run.
FAULT_PROCESSES ?= 2
test-faults: install  ## Run the fault-injection suite against the real services
	./deploy/ensure-services.sh --postgres
	$(PYTEST) -q -n $(FAULT_PROCESSES) --dist loadscope -m fault

# Hosts as network namespaces (tests/cluster): needs root and iproute2, skipped otherwise.
test-cluster: install  ## Run the cluster suite: worker hosts as network namespaces (as root)
	./deploy/ensure-services.sh --postgres
	$(PYTEST) -q -m cluster tests/cluster

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

ORIGIN_SHARE_ARGS ?=
bench-origin-share: install  ## A host's slots shared: an agent's singles of a host another workspace keeps busy
	./deploy/ensure-services.sh --postgres
	$(PY) -m bench.origin_share $(ORIGIN_SHARE_ARGS)

REVALIDATION_ARGS ?= --pages 1000
bench-revalidation: install  ## Re-retrieving unchanged pages (304s) against a first pass: CPU and bytes
	./deploy/ensure-services.sh --postgres
	$(PY) -m bench.revalidation $(REVALIDATION_ARGS)

CLUSTER_ARGS ?= --per-host 100 --in-flight 4
bench-cluster: install  ## Throughput with one, two, three worker hosts (network namespaces, as root)
	./deploy/ensure-services.sh --postgres
	$(PY) -m bench.cluster_throughput $(CLUSTER_ARGS)

QUOTES_ARGS ?= --runs 200
bench-archive: install  ## The archive's cost: WARC bytes per 1 000 pages, CPU with it off and on
	$(PY) -m bench.archive_cost $(ARCHIVE_ARGS)

bench-quotes: install  ## Quote verification: a 1 000-character quote and a batch of 100 against a 200 000-character revision
	$(PY) -m bench.quote_verify $(QUOTES_ARGS)

# The public pages are prepared once from git clones of the repositories bench/quality/prepare.py
# pins (it prints the `git clone` to run for any it misses) into var/quality-data, then verified.
QUALITY_REPOS ?= var/quality-src
QUALITY_ARGS ?= --split held_out
bench-quality: install  ## Page text on public labelled pages (held out): the service beside trafilatura, readability-lxml, resiliparse, jusText
	$(PY) -m bench.quality.prepare --verify 2>/dev/null || $(PY) -m bench.quality.prepare --repos $(QUALITY_REPOS)
	$(PY) -m bench.quality.run $(QUALITY_ARGS)

.PHONY: help install run demo test coverage test-faults test-cluster bench-cluster lint format migrate load overload bench bench-fairness \
	bench-origin-share bench-revalidation bench-archive bench-quotes bench-quality
