"""Racing arms with populations of different sizes (App. C.3): exactness, error <= delta, cost."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from problems import unequal_problem as _problem
from scipy import stats

from subsample_mcmc.racing import best_arm, sample_discrete


@pytest.mark.parametrize("dist", ["normal", "lognormal", "rare"])
def test_error_rate_below_delta_on_power_law_sizes(dist):
    """Over reading orders, the race errs at most delta (binomial limit), on light, skewed and
    rare-spike rewards, with a close second among arms of sizes 1 to 3,000."""
    delta, races = 0.1, 600
    errors = 0
    for seed in range(3):
        rewards, sizes, offsets, truth = _problem(dist, seed)
        race = jax.jit(jax.vmap(lambda k: best_arm(k, jnp.asarray(rewards), population_sizes=jnp.asarray(sizes),
                                                   arm_offset=jnp.asarray(offsets), delta=delta)))
        out = race(jax.random.split(jax.random.PRNGKey(seed), races))
        errors += int(np.sum(np.asarray(out.arm) != truth))
    assert errors <= stats.binom.ppf(1 - 1e-3, 3 * races, delta), errors


def test_sample_discrete_with_unequal_populations_matches_the_exact_law():
    """Gumbel-max over totals: the racing draws follow softmax(log f0 + totals) (chi-square)."""
    rng = np.random.default_rng(2)
    sizes = np.array([400, 60, 1, 0])
    rewards = np.where(np.arange(400)[None] < sizes[:, None], rng.normal(0.0, 0.05, (4, 400)), 0.0)
    log_f0 = np.array([0.0, 0.3, -0.2, 0.1], np.float32) - rewards.sum(1).astype(np.float32)
    logits = log_f0 + rewards.sum(1)
    p = np.exp(logits - logits.max()); p /= p.sum()
    draws = jax.jit(jax.vmap(lambda k: sample_discrete(k, log_f0, rewards, population_sizes=sizes,
                                                       delta=0.05).value))(
        jax.random.split(jax.random.PRNGKey(5), 4000))
    counts = np.bincount(np.asarray(draws), minlength=4)
    assert stats.chisquare(counts, 4000 * p).pvalue > 1e-3, (counts, 4000 * p)


def test_without_the_guard_the_papers_three_point_first_batch_breaks_the_promise():
    """The README's claim: App. C.3's unguarded Racing-Normal with m1 = 3 errs above delta on a hard race
    with Normal rewards (its 3-point variance estimates are too noisy); the guard is what keeps the promise."""
    delta, races, errors = 0.1, 600, 0
    for seed in range(3):
        rewards, sizes, offsets, truth = _problem("normal", seed)
        race = jax.jit(jax.vmap(lambda k: best_arm(k, jnp.asarray(rewards), population_sizes=jnp.asarray(sizes),
                                                   arm_offset=jnp.asarray(offsets), delta=delta,
                                                   heavy_tail_guard=False)))
        errors += int(np.sum(np.asarray(race(jax.random.split(jax.random.PRNGKey(seed), races)).arm) != truth))
    assert errors > stats.binom.ppf(1 - 1e-3, 3 * races, delta), errors
