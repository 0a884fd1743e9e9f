"""Without-replacement index streams: a true permutation, uniform, O(points read)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from subsample_mcmc.racing import index_stream


@pytest.mark.parametrize("n", list(range(1, 70)) + [255, 256, 257, 1000, 4097, 65536, 65537, 99991])
def test_is_a_permutation(n):
    for seed in range(3):
        perm = np.asarray(index_stream(jax.random.PRNGKey(seed), n)(jnp.arange(n)))
        # no index read twice, every index reachable
        assert np.array_equal(np.sort(perm), np.arange(n))


def test_large_population_permutation():
    n = 1_000_003
    perm = np.asarray(index_stream(jax.random.PRNGKey(7), n)(jnp.arange(n)))
    assert np.array_equal(np.bincount(perm, minlength=n), np.ones(n, int))


def test_every_index_reachable_first_uniformly():
    # the first point read is uniform over range(n): chi-square over many keys
    n, keys = 13, 6500
    first = jax.vmap(lambda k: index_stream(k, n)(jnp.zeros(1, jnp.int32))[0])(
        jax.random.split(jax.random.PRNGKey(0), keys)
    )
    counts = np.bincount(np.asarray(first), minlength=n)
    assert counts.min() > 0
    assert stats.chisquare(counts).pvalue > 1e-4


def test_prefix_mean_has_without_replacement_variance():
    # values sorted by index (an adversarial order): prefix means of a random order
    # must have mean mu and variance sigma^2/m (N-m)/(N-1); a structured order fails
    n, m, keys = 5000, 64, 4000
    values = jnp.arange(n, dtype=jnp.float32)
    mu, var = float(values.mean()), float(values.var())

    def prefix_mean(k):
        return values[index_stream(k, n)(jnp.arange(m))].mean()

    means = np.asarray(jax.vmap(prefix_mean)(jax.random.split(jax.random.PRNGKey(1), keys)))
    expected_var = var / m * (n - m) / (n - 1)
    z = (means.mean() - mu) / np.sqrt(expected_var / keys)
    assert abs(z) < 4.0
    ratio = means.var(ddof=1) / expected_var
    lo, hi = stats.chi2.ppf([1e-4, 1 - 1e-4], keys - 1) / (keys - 1)
    assert lo < ratio < hi
    # consecutive blocks are (nearly) uncorrelated: covariance -sigma^2/(N-1)
    def two_blocks(k):
        idx = index_stream(k, n)(jnp.arange(2 * m))
        return values[idx[:m]].mean(), values[idx[m:]].mean()

    a, b = jax.vmap(two_blocks)(jax.random.split(jax.random.PRNGKey(2), keys))
    r = np.corrcoef(np.asarray(a), np.asarray(b))[0, 1]
    assert abs(r) < 4.0 / np.sqrt(keys)


def test_cost_is_independent_of_population_size():
    # reading 16 positions of a population of 2**30 builds no array larger than 16
    stream = index_stream(jax.random.PRNGKey(0), 2**30)
    jaxpr = jax.make_jaxpr(lambda s: s(jnp.arange(16)))(stream)
    sizes = [int(np.prod(v.aval.shape)) for eqn in jaxpr.eqns for v in eqn.outvars]
    assert max(sizes) <= 16


def test_distinct_keys_give_distinct_orders():
    n = 1000
    a = index_stream(jax.random.PRNGKey(0), n)(jnp.arange(n))
    b = index_stream(jax.random.PRNGKey(1), n)(jnp.arange(n))
    assert np.mean(np.asarray(a) == np.asarray(b)) < 0.02


def test_bad_population_size():
    with pytest.raises(ValueError, match="population_size"):
        index_stream(jax.random.PRNGKey(0), 0)
