# Two commands: `make train` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CONFIG ?= configs/chain_reaction.yaml
WORKDIR ?= runs/chain_reaction
ARGS ?=
PYTEST_ARGS ?=

.PHONY: train test lint bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[test]'
	$(PY) -m pip install --quiet --no-deps 'jax2onnx>=0.17,<0.18'  # see the export extra
	touch $@

# make train [CONFIG=configs/X.yaml] [WORKDIR=runs/X] [ARGS="dotted.key=value ..."]
train: $(VENV)/.installed
	$(VENV)/bin/azjax-train --config $(CONFIG) --workdir $(WORKDIR) $(ARGS)

test: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -n 2 --dist loadgroup --durations=15 $(PYTEST_ARGS)

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) scripts/bench.py games

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .jax_cache
