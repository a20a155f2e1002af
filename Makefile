# Two entry points a fresh machine needs (see README): `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup serve test lint bench

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==26.3
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

serve: setup
	$(BIN)/memstream serve

test: setup
	VENV=$(VENV) bash infra/run-tests.sh

lint: setup
	$(BIN)/ruff check .
