# Two entry points for a fresh machine: `make demo` and `make test`. Both go
# through `make setup`, which creates .venv and installs with pinned versions.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-all bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[test]"
	touch $(STAMP)

demo: setup
	$(VENV)/bin/trainteam demo --yes

test: setup
	$(PY) -m pytest -q

test-all: setup
	$(PY) -m pytest -q -m "slow or not slow"

bench: setup
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf .trainteam build dist *.egg-info
