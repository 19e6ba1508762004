# Agentdesk: `make run` to try it, `make test` to check it.
# Everything runs from .venv (created on first use from requirements.lock).

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# Re-install only when the lock (or the project's metadata) changed.
STAMP := $(VENV)/.installed
WHEELS := $(VENV)/wheelhouse

# `make bench QUICK=1`, `make chaos SEED=7 SESSIONS=500`: passed on as
# environment variables, only when given.
PASSTHROUGH := $(if $(QUICK),QUICK=$(QUICK)) $(if $(SEED),SEED=$(SEED)) \
	$(if $(SESSIONS),SESSIONS=$(SESSIONS))

.PHONY: install run test lint bench chaos clean-data

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

# The lock's wheels are kept in $(WHEELS): the image test (tests/deploy/)
# installs the same pins into a fresh virtualenv from there, without network.
$(STAMP): requirements.lock pyproject.toml | $(PY)
	$(PY) -m pip wheel --quiet -r requirements.lock -w $(WHEELS)
	$(PY) -m pip install --quiet --no-index --find-links $(WHEELS) -r requirements.lock
	$(PY) -m pip install --quiet -e . --no-deps
	cp requirements.lock $(WHEELS)/.lock
	touch $(STAMP)

# Embedded PostgreSQL and Redis (data in .data/) unless DATABASE_URL /
# REDIS_URL are set; then migrate, demo data, sandbox, web, worker, beat.
run: install
	$(PY) scripts/run.py

# Several pytest workers (pytest-xdist), each with its own test database and
# Redis db (config/settings_test.py); a file's tests stay on one worker.
# Most tests wait on real processes, so more workers than cores pays.
# `make test TEST_WORKERS=0` runs them in this one process.
TEST_WORKERS ?= 3

test: install
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --durations=30 $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: install
	$(PASSTHROUGH) $(PY) -m bench

chaos: install
	$(PASSTHROUGH) $(PY) -m bench.chaos

# Removes the embedded PostgreSQL, Redis and sandbox data (not while `make run` runs).
clean-data:
	@if [ -f .data/postgres/postmaster.pid ]; then \
		echo "clean-data: PostgreSQL still runs on .data/postgres; stop make run first"; exit 1; fi
	rm -rf .data
