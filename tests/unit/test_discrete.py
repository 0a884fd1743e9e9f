"""Gumbel-max discrete sampling (Eq. 2-3) and its total variation (Prop. 1)."""

import jax
import jax.numpy as jnp
import numpy as np
from problems import discrete_problem as _problem
from scipy import stats

from subsample_mcmc.racing import sample_discrete


def test_same_key_same_draw():
    log_fn, _ = _problem(n=500)
    a = sample_discrete(jax.random.PRNGKey(3), jnp.zeros(6), log_fn)
    b = sample_discrete(jax.random.PRNGKey(3), jnp.zeros(6), log_fn)
    assert int(a.value) == int(b.value)
    assert int(a.race.num_rewards_read) == int(b.race.num_rewards_read)


def test_prior_factor_enters_the_law():
    # with flat likelihoods, X follows f0 exactly
    d, n = 4, 300
    log_f0 = jnp.log(jnp.array([0.1, 0.2, 0.3, 0.4]))
    log_fn = jnp.zeros((d, n))

    def one(k):
        return sample_discrete(k, log_f0, log_fn, first_batch=n).value

    values = jax.lax.map(one, jax.random.split(jax.random.PRNGKey(0), 3000))
    counts = np.bincount(np.asarray(values), minlength=d)
    assert stats.chisquare(counts, 3000 * np.array([0.1, 0.2, 0.3, 0.4])).pvalue > 1e-3


def test_sample_discrete_exact_is_the_coupled_exact_draw_from_totals():
    """``sample_discrete_exact(key, log_f0, sums)`` draws what ``sample_discrete(key, ...,
    method="exact")`` draws on the same key (the same Gumbel noise; what ModelSelection's exact
    model draw and its decision checks rely on), follows p(i) ∝ f0(i) exp(sums[i]) (0 for a sum of
    -inf), and returns -1 for a NaN sum or when every sum is -inf."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from subsample_mcmc.racing import sample_discrete, sample_discrete_exact

    rewards = jnp.asarray(np.random.default_rng(0).normal(0.0, 1.0, (4, 300)) * 0.01 + np.array([[0.0], [0.001], [0.002], [-0.001]]))
    log_f0 = jnp.log(jnp.asarray([0.1, 0.2, 0.3, 0.4]))
    keys = jax.random.split(jax.random.PRNGKey(0), 2000)
    raced = jax.vmap(lambda k: sample_discrete(k, log_f0, rewards, method="exact").value)(keys)
    exact = jax.vmap(lambda k: sample_discrete_exact(k, log_f0, rewards.sum(1)))(keys)
    assert np.mean(np.asarray(raced) == np.asarray(exact)) > 0.999
    p = np.exp(np.asarray(log_f0 + rewards.sum(1), np.float64))
    p /= p.sum()
    freq = np.bincount(np.asarray(exact), minlength=4) / 2000
    assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / 2000)), (freq, p)
    assert int(sample_discrete_exact(keys[0], log_f0, jnp.asarray([0.0, jnp.nan, 1.0, 2.0]))) == -1
    assert int(sample_discrete_exact(keys[0], log_f0, jnp.full(4, -jnp.inf))) == -1
    # a -inf total is a value of probability 0, never drawn; the others keep their odds
    impossible = jnp.asarray([0.0, -jnp.inf, 1.0, -jnp.inf])
    drawn = np.asarray(jax.vmap(lambda k: sample_discrete_exact(k, log_f0, impossible))(keys))
    p = np.array([0.1, 0.0, 0.3 * np.e, 0.0])
    p /= p.sum()
    freq = np.bincount(drawn, minlength=4) / 2000
    assert freq[1] == freq[3] == 0 and abs(freq[2] - p[2]) < 4 * np.sqrt(p[2] * (1 - p[2]) / 2000), (freq, p)




def test_tie_share_is_checked():
    import pytest

    from subsample_mcmc.kernels import racing_mh_accept
    log_fn, _ = _problem(n=200, d=3)
    for bad in (1.0, -0.1, True):
        with pytest.raises(ValueError, match="tie_share must lie in"):
            sample_discrete(jax.random.PRNGKey(0), jnp.zeros(3), log_fn, tie_share=bad)
        with pytest.raises(ValueError, match="tie_share must lie in"):
            racing_mh_accept(jax.random.PRNGKey(0), lambda i: log_fn[:2, i], 200, 0.0, 0.0, tie_share=bad)
