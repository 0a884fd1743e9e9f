"""Gumbel-max discrete sampling (Eq. 2-3) and its total variation (Prop. 1)."""

import jax
import jax.numpy as jnp
import numpy as np
from problems import discrete_draws as _draws
from problems import discrete_problem as _problem
from scipy import stats

from subsample_mcmc.racing import sample_discrete


def test_exact_sampler_follows_the_target():
    log_fn, q = _problem()
    values, _, evals = _draws(log_fn, "exact", 0.05, 4000)
    counts = np.bincount(np.asarray(values), minlength=len(q))
    assert stats.chisquare(counts, 4000 * q).pvalue > 1e-3
    assert np.all(np.asarray(evals) == log_fn.size)


def test_racing_sampler_total_variation_within_delta():
    log_fn, q = _problem()
    delta, num = 0.05, 4000
    race, gumbel, evals = _draws(log_fn, "normal", delta, num)
    exact = np.argmax(np.asarray(log_fn, np.float64).sum(1)[None] + np.asarray(gumbel, np.float64), 1)
    # coupling: P(race != exact | same Gumbel noise) <= delta, hence TV <= delta (Prop. 1)
    mismatches = int(np.sum(np.asarray(race) != exact))
    assert mismatches <= stats.binom.ppf(1 - 1e-3, num, delta)
    # the racing draws' empirical TV to the exact law is within delta + sampling noise
    emp = np.bincount(np.asarray(race), minlength=len(q)) / num
    tv = 0.5 * np.abs(emp - q).sum()
    rng = np.random.default_rng(0)
    noise = [0.5 * np.abs(rng.multinomial(num, q) / num - q).sum() for _ in range(2000)]
    assert tv <= delta + np.quantile(noise, 0.999)
    assert np.mean(np.asarray(evals)) < log_fn.size


def test_tie_share_stops_near_ties_and_keeps_the_draw_within_delta():
    """``tie_share``: the race runs at ``(1 - s) delta`` and stops once its widths are below
    ``log(1 + s delta)`` nats.  On arms whose per-datum differences are small (N sd 0.5 nats per pair,
    N = 20,000) the draws still differ from the exact Gumbel-max draw on the same noise at most at rate
    delta, no race reads all N (without the share some do), and the mean read is smaller."""
    n, d, delta, num = 20_000, 6, 0.05, 3000
    log_fn, _ = _problem(n=n, d=d, sigma=0.5 / (np.sqrt(2.0) * n), seed=3)
    totals = np.asarray(log_fn, np.float64).sum(1)
    keys = jax.random.split(jax.random.PRNGKey(5), num)

    def draws(share):
        def one(k):
            s = sample_discrete(k, jnp.zeros(d), log_fn, delta=delta, tie_share=share)
            return s.value, s.gumbel, s.race.num_points_read
        value, gumbel, reads = jax.jit(jax.vmap(one))(keys)
        exact = np.argmax(totals[None] + np.asarray(gumbel, np.float64), 1)
        return int(np.sum(np.asarray(value) != exact)), np.asarray(reads)

    wrong, reads = draws(0.5)
    wrong0, reads0 = draws(0.0)
    limit = stats.binom.ppf(1 - 1e-3, num, delta)
    assert wrong <= limit and wrong0 <= limit
    assert reads.max() < n and reads0.max() == n
    assert reads.mean() < reads0.mean()
