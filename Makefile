# Two commands do all set-up on a fresh machine:
#   make demo   -- create .venv if missing, install the package with its extras, run the main job
#   make test   -- create .venv if missing, install the package with its extras, run the tests
# (both install .[dev]: the core plus the models, bandits, notebooks, docs and test extras)
# make test runs every tier (tests/unit, tests/statistical, tests/e2e, tests/bandits) at its CI size;
# make test-full runs them at full size with the benchmarks' own tests; make test-newest runs the
# smoke tier on the newest Python and packages (.ci/run runs make test, then make test-newest).
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_WORKERS ?= 2

.PHONY: demo racing-demo test test-full test-unit test-statistical test-e2e test-newest bench docs notebook clean

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) -m subsample_mcmc arch

racing-demo: $(STAMP)
	$(PY) -m subsample_mcmc demo

PYTEST := $(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal --durations=25 -rs

test: $(STAMP)
	$(PYTEST)

test-full: $(STAMP)
	SUBSAMPLE_MCMC_TEST_SIZE=full ZOO_EXTENDED=1 $(PYTEST) tests benchmarks/tests

# one tier at its CI size, to iterate on what you change
test-unit test-statistical test-e2e: test-%: $(STAMP)
	$(PYTEST) -m $*

# the smoke tier on the newest stack: the newest Python found (3.13, else 3.12) in .venv-newest
# with the newest packages pip resolves (JAX, NumPyro, ArviZ 1.x)
NEWEST_VENV ?= .venv-newest
NEWEST_PY   ?= $(shell for v in 3.13 3.12; do for p in python$$v $$(pyenv root 2>/dev/null)/versions/$$v*/bin/python$$v; do \
                 if $$p -c pass >/dev/null 2>&1; then echo $$p; exit 0; fi; done; done)
test-newest: pyproject.toml
	@if [ -z "$(NEWEST_PY)" ]; then echo "test-newest: no Python 3.12 or 3.13 on this machine; skipped"; exit 0; fi; \
	set -e; test -x $(NEWEST_VENV)/bin/python || $(NEWEST_PY) -m venv $(NEWEST_VENV); \
	$(NEWEST_VENV)/bin/python -m pip install -q --upgrade pip; \
	$(NEWEST_VENV)/bin/python -m pip install -q --upgrade --upgrade-strategy eager -e '.[models,bandits,test]'; \
	$(NEWEST_VENV)/bin/python -c "import sys, jax, numpyro, arviz; print('newest stack: Python', sys.version.split()[0], \
	  'JAX', jax.__version__, 'NumPyro', numpyro.__version__, 'ArviZ', arviz.__version__)"; \
	$(NEWEST_VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) -m smoke --durations=10 -rs -p no:cacheprovider

# the API reference from the docstrings (warnings are errors; tests/test_docs.py builds it too)
docs: $(STAMP)
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html

# run one notebook headless: make notebook NB=racing_synthetic [SIZE=full]
NB   ?= racing_synthetic
SIZE ?= small
notebook: $(STAMP)
	SUBSAMPLE_MCMC_NOTEBOOK_SIZE=$(SIZE) $(VENV)/bin/jupyter nbconvert --to notebook --execute \
		--output-dir notebooks/_executed notebooks/$(NB).ipynb

bench: $(STAMP)
	$(PY) benchmarks/racing_cost_vs_n.py
	$(PY) benchmarks/racing_synthetic.py
	$(PY) benchmarks/arch_order_selection.py

clean:
	rm -rf $(VENV) $(NEWEST_VENV) *.egg-info .pytest_cache docs/_build notebooks/_executed
