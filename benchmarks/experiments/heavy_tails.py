"""The heavy-tail battery: :mod:`subsample_mcmc.testing` is its home (re-exported here for the
benchmark scripts)."""

from subsample_mcmc.testing import FAMILIES, INFINITE_FAMILIES, make_heavy_problem, make_infinite_problem, run_cell

__all__ = ["FAMILIES", "INFINITE_FAMILIES", "make_heavy_problem", "make_infinite_problem", "run_cell"]
