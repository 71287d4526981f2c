# Two entry points for a fresh machine: `make demo` and `make test` (`make lint` and
# `make docs` for changes).
# Both create a virtual environment in .venv and install Tessera into it (editable), with the
# tested versions of its dependencies (constraints.txt).

PYTHON ?= python3
VENV ?= .venv
BIN := $(abspath $(VENV))/bin

.PHONY: demo test test-fast faults lint docs clean

$(VENV)/.trainer: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -c constraints.txt -e ".[trainer]"
	touch $@

$(VENV)/.dev: $(VENV)/.trainer
	$(BIN)/pip install --quiet -c constraints.txt -e ".[trainer,operator,dev]"
	touch $@

demo: $(VENV)/.trainer  ## import UMLS, train ComplEx, evaluate and export (a few minutes)
	PATH="$(BIN):$$PATH" bash examples/umls/demo.sh

# The test targets run pytest in TEST_WORKERS processes (pytest-xdist), each test file whole in
# one of them, so that its module-wide servers start once; TEST_WORKERS=0 runs in this one.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

test: $(VENV)/.dev  ## the whole test suite
	$(PYTEST)

# The fast lane: the unit and component tests, without those marked slow, the fault families
# and the end-to-end ones (a real API server, pods as processes); the whole suite before a merge.
test-fast: $(VENV)/.dev  ## most tests in a few minutes: not slow, faults or end-to-end
	$(PYTEST) -m "not slow and not faults and not real_cluster" --ignore=tests/e2e

faults: $(VENV)/.dev  ## the fault families alone (tests/faults: kills, OS errors, races, secrets)
	$(PYTEST) -m faults

lint: $(VENV)/.dev docs  ## ruff, mypy (its files: pyproject.toml's [tool.mypy]) and the docs build
	$(BIN)/ruff check trainer operator tests bench
	$(BIN)/mypy

# The docs site (mkdocs.yml, docs/) with warnings as errors: a broken link or anchor, a missing
# page or a page left out of the nav fails. Built into build/site, which git ignores; it reads
# nothing from the network. NO_MKDOCS_2_WARNING silences the Material theme's banner.
docs: $(VENV)/.dev  ## build the documentation site strictly into build/site
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

clean:
	rm -rf $(VENV) demo-output build/site
