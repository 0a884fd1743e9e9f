# Two commands do all set-up on a fresh machine:
#   make demo   -- create .venv if missing, install the package, run the main job
#   make test   -- create .venv if missing, install the package with test extras, run the tests
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_WORKERS ?= 2

.PHONY: demo racing-demo test bench clean

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

bench: $(STAMP)
	$(PY) benchmarks/racing_cost_vs_n.py
	$(PY) benchmarks/racing_synthetic.py
	$(PY) benchmarks/arch_order_selection.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
