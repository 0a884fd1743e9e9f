"""The heavy-tail battery: :mod:`subsample_mcmc.testing` is its home (re-exported here for the
benchmark scripts)."""

from subsample_mcmc.testing import FAMILIES, make_heavy_problem, run_cell

__all__ = ["FAMILIES", "make_heavy_problem", "run_cell"]
