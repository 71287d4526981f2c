# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create a virtual environment in .venv and install Tessera into it (editable), with the
# tested versions of its dependencies (constraints.txt).

PYTHON ?= python3
VENV ?= .venv
BIN := $(abspath $(VENV))/bin

.PHONY: demo test faults lint clean

$(VENV)/.trainer: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -c constraints.txt -e ".[trainer]"
	touch $@

$(VENV)/.dev: $(VENV)/.trainer
	$(BIN)/pip install --quiet -c constraints.txt -e ".[trainer,operator,dev]"
	touch $@

demo: $(VENV)/.trainer  ## import UMLS, train ComplEx, evaluate and export (a few minutes)
	PATH="$(BIN):$$PATH" bash examples/umls/demo.sh

test: $(VENV)/.dev  ## the whole test suite
	$(BIN)/python -m pytest

faults: $(VENV)/.dev  ## the fault families alone (tests/faults: kills, OS errors, races, secrets)
	$(BIN)/python -m pytest -m faults

lint: $(VENV)/.dev  ## ruff and mypy (mypy's files: pyproject.toml's [tool.mypy])
	$(BIN)/ruff check trainer operator tests bench
	$(BIN)/mypy

clean:
	rm -rf $(VENV) demo-output
