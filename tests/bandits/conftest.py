"""Bandit tests are dominated by XLA compilation of small scan programs: compile them
with XLA's cheapest settings (:func:`subsample_mcmc.bandits.simulate.fast_compile`);
the computations are the same."""

import pytest

from subsample_mcmc.bandits.simulate import fast_compile


@pytest.fixture(autouse=True, scope="module")
def _bandits_fast_compile():
    with fast_compile():
        yield
