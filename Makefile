# Two commands do all set-up on a fresh machine:
#   make demo   -- create .venv if missing, install the package with its extras, run the main job
#   make test   -- create .venv if missing, install the package with its extras, run the tests
# (both install .[dev]: the core plus the models, bandits, notebooks, docs and test extras)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_WORKERS ?= 2

.PHONY: demo racing-demo test bench docs notebook clean

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) -m subsample_mcmc arch

racing-demo: $(STAMP)
	$(PY) -m subsample_mcmc demo

test: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --durations=15 -rs

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
	rm -rf $(VENV) *.egg-info .pytest_cache docs/_build notebooks/_executed
