"""Gumbel-max discrete sampling (Eq. 2-3) and its total variation (Prop. 1)."""

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from subsample_mcmc.racing import sample_discrete


def _problem(n=2000, d=6, sigma=0.02, seed=0):
    rng = np.random.default_rng(seed)
    raw = rng.standard_normal((d, n))
    raw = (raw - raw.mean(1, keepdims=True)) / raw.std(1, keepdims=True)
    p = np.arange(1, d + 1, dtype=np.float64)
    p /= p.sum()
    log_fn = (sigma * raw + np.log(p)[:, None] / n).astype(np.float32)
    # exact law of X for these float32 rewards
    logits = log_fn.astype(np.float64).sum(1)
    q = np.exp(logits - logits.max())
    return jnp.asarray(log_fn), q / q.sum()


def _draws(log_fn, method, delta, num):
    d = log_fn.shape[0]

    def one(k):
        s = sample_discrete(k, jnp.zeros(d), log_fn, method=method, delta=delta)
        return s.value, s.gumbel, s.race.num_rewards_read

    keys = jax.random.split(jax.random.PRNGKey(42), num)
    return jax.jit(lambda ks: jax.lax.map(one, ks))(keys)


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


def test_tie_share_is_checked():
    import pytest

    from subsample_mcmc.kernels import racing_mh_accept
    log_fn, _ = _problem(n=200, d=3)
    for bad in (1.0, -0.1, True):
        with pytest.raises(ValueError, match="tie_share must lie in"):
            sample_discrete(jax.random.PRNGKey(0), jnp.zeros(3), log_fn, tie_share=bad)
        with pytest.raises(ValueError, match="tie_share must lie in"):
            racing_mh_accept(jax.random.PRNGKey(0), lambda i: log_fn[:2, i], 200, 0.0, 0.0, tie_share=bad)
