"""Alg. 1 racing and adapted lil'UCB: exactness, error rates, early exit, precision."""

import pytest
from scipy import stats

from subsample_mcmc.testing import make_problem, run_setting

RACING = [("normal", "pairwise"), ("normal", "marginal"), ("normal_union", "pairwise"),
          ("ebs", "pairwise"), ("ebs", "marginal"), ("lil_ucb", "pairwise")]


@pytest.mark.parametrize("distribution,sigma,num_arms", [("normal", 0.1, 10), ("lognormal", 0.1, 2),
                                                         ("uniform", 0.1, 10)])
def test_error_rate_below_delta(distribution, sigma, num_arms):
    """The synthetic experiment of Sec. 5.1 at CI size: error <= delta (binomial CI).

    sigma = 0.1 is the 'very hard' setting where Racing-Normal's bound is sharp, so a
    bound too small (or a wrong B_Normal) shows up as an excess of errors.
    """
    problem = make_problem(11, num_arms, 10_000, distribution, sigma)
    delta, races = 0.1, 400
    out = run_setting(problem, method="normal", delta=delta, num_races=races, batch_size=1)
    limit = stats.binom.ppf(1 - 1e-3, races, delta)
    assert out["errors"] <= limit, out
    assert out["fraction_read"] < 1.0


def test_error_rate_other_bounds():
    problem = make_problem(5, 10, 10_000, "normal", 0.1)
    for method, variance in [("ebs", "pairwise"), ("normal", "marginal"), ("lil_ucb", "pairwise")]:
        races = 60 if method == "lil_ucb" else 200
        out = run_setting(problem, method=method, variance=variance, delta=0.1, num_races=races,
                          batch_size=1)
        assert out["errors"] <= stats.binom.ppf(1 - 1e-3, races, 0.1), out
