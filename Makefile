# Two entry points for a fresh machine: `make demo` and `make test`. Both go
# through `make setup`, which creates .venv and installs with pinned versions.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: setup browser postgres demo test test-all lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[test]"
	touch $(STAMP)

# Debian's chromium for the web console's browser tests (tests/shell/test_web_browser.py): Playwright drives
# it by path and never downloads a browser of its own. Skipped when chromium is already on PATH.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# Debian's PostgreSQL server for the tests that run on Postgres too (tests/pg_server.py starts a
# throwaway cluster on 127.0.0.1, as the postgres user when run as root). Skipped when initdb is found.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
		--no-install-recommends postgresql >/dev/null; }

demo: setup
	$(VENV)/bin/trainteam demo --yes

# The suite on both cores (pytest-xdist: a file's tests stay on one worker, so a module's fixtures are built
# once; tests/conftest.py starts the longest files first), then the 15 slowest tests: every run shows where
# the time goes. PYTEST_JOBS=0 runs it in one process.
PYTEST_JOBS ?= 2
PYTEST := $(PY) -m pytest -q -n $(PYTEST_JOBS) --dist loadfile --durations=15

test: setup browser postgres
	$(PYTEST)

test-all: setup browser postgres
	$(PYTEST) -m "slow or not slow"

# ruff (lint, format) and mypy on the product folders, configured in pyproject.toml; `ruff check --fix` and
# `ruff format` on a folder fix most findings. mypy runs through the test: it checks build/typecheck/trainteam.
lint: setup
	$(PY) -m pytest -q tests/architecture/test_tooling.py

bench: setup
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf .trainteam build dist *.egg-info
