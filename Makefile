# `make demo` and `make test` create .venv and install the project on first use.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow lint install clean

# DeepSpeed (a dependency) is built without compiled ops (DS_BUILD_OPS=0) and against the installed torch
# (--no-build-isolation), so torch and the build backend go in first. pyproject.toml gives torch/torchvision as
# ranges (the `vllm` extra needs torch 2.14.0); this is the exact pair installed: the newest that imports together
# on these machines, from the local wheels.
TORCH_PINS := torch==2.14.1 torchvision==0.29.1

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "installing regbench and its dependencies into $(VENV) (first run only, a few minutes)"
	$(BIN)/python -m pip install --quiet 'setuptools>=68' wheel $(TORCH_PINS) 2>&1 \
		| sed '/^WARNING: Location .* is ignored/d'
	DS_BUILD_OPS=0 $(BIN)/python -m pip install --quiet --no-build-isolation -e '.[dev]' 2>&1 \
		| sed '/^WARNING: Location .* is ignored/d'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/regbench demo

# `make test` leaves out the tests marked slow (pyproject.toml, [tool.pytest.ini_options] markers); `make test-slow`
# runs only those. CI (.ci/run) runs both, so every test runs there.
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf runs .pytest_cache
