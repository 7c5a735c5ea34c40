# `make demo` and `make test` create .venv and install the project on first use.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "installing regbench and its dependencies into $(VENV) (first run only, a few minutes)"
	$(BIN)/python -m pip install --quiet -e '.[dev]' 2>&1 | sed '/^WARNING: Location .* is ignored/d'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/regbench demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf runs .pytest_cache
