# Two entry points a fresh machine needs (see README): `make serve` and `make test`.
# `make test-fast`: the unit tier alone (no broker, no browser, no servers; see tests/README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup serve test test-fast lint bench reference

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==26.3
	$(BIN)/pip install --quiet -e ".[test,langgraph,openai-agents]"
	touch $@

# CPersona 2.6.14, the reference, in .venv-cpersona (its pins clash with ours); `make test` runs it too.
reference:
	bash infra/install-cpersona.sh

serve: setup
	$(BIN)/memstream serve

test: setup
	VENV=$(VENV) bash infra/run-tests.sh

test-fast: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit

lint: setup
	$(BIN)/ruff check .
	VENV=$(VENV) bash infra/typecheck.sh
	$(BIN)/lint-imports --no-cache
	$(BIN)/python infra/check_paths.py
