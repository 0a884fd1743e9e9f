"""Thompson sampling, MOTS and batching (Karbasi, Mirrokni & Shadravan 2021)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from subsample_mcmc.bandits import environments as E
from subsample_mcmc.bandits import run_episode, simulate
from subsample_mcmc.bandits import thompson as th
from subsample_mcmc.bandits.base import BanditSpec


def _f32(p):
    return jax.tree_util.tree_map(jnp.float32, p)


@pytest.mark.parametrize("make", [th.ts_beta, th.mots, th.mots_j, th.ts_gaussian])
def test_static_batch_of_one_is_the_sequential_policy(make):
    policy = make()
    env = E.bernoulli(4)
    key = jax.random.PRNGKey(2)
    seq = run_episode(policy, env, 120, _f32(policy.default_params), key)
    batched = th.static_batch(policy, 1)
    bat = run_episode(batched, env, 120, _f32(batched.default_params), key)
    np.testing.assert_array_equal(np.asarray(seq.arms), np.asarray(bat.arms))
    assert int(bat.num_batches) == 120


@pytest.mark.parametrize("make", [th.ts_beta, th.mots])
def test_dynamic_batch_queries_when_a_count_reaches_a_power_of_two(make):
    policy = th.dynamic_batch(make())
    env = E.bernoulli(5)
    horizon = 700
    ep = run_episode(policy, env, horizon, _f32(policy.default_params), jax.random.PRNGKey(4))
    arms = np.asarray(ep.arms)
    counts = np.zeros(5, int)
    expected = 0
    for a in arms:
        counts[a] += 1
        expected += (counts[a] & (counts[a] - 1)) == 0   # count is a power of two
    assert int(ep.num_batches) == expected
    assert expected <= 5 * (math.floor(math.log2(horizon)) + 1)   # Theorem 4.1


def test_batched_policy_only_sees_queried_rewards():
    # Between two queries the observed posterior is frozen: with a greedy-mean policy
    # (TS with zero posterior noise would be the same) the arm can only change at a query.
    from subsample_mcmc.bandits import index as ix
    policy = th.dynamic_batch(ix.greedy())
    env = E.gaussian(3, means=[0.0, 0.1, 0.2], noise_sd=1.0)
    ep = run_episode(policy, env, 200, (), jax.random.PRNGKey(0))
    arms = np.asarray(ep.arms)
    counts = np.zeros(3, int)
    queried_before = [True]
    for a in arms[:-1]:
        counts[a] += 1
        queried_before.append((counts[a] & (counts[a] - 1)) == 0)
    # greedy picks the same arm as in the previous round unless a query happened
    # (ties among equal means are impossible with Gaussian rewards)
    for t in range(3, 200):
        if not queried_before[t]:
            assert arms[t] == arms[t - 1]


@pytest.mark.statistical
def test_batch_ts_close_to_ts_and_static_batching_worse():
    """Sec. 7 / Fig. 2a-b of Karbasi et al.: B-TS regret within ~10% of TS with
    O(N log T) queries; static batches with as many queries are clearly worse."""
    env = E.bernoulli(5)
    horizon, problems = 500, 300
    key = jax.random.PRNGKey(0)
    ts = simulate(th.ts_beta(), env, horizon, key, problems)
    bts = simulate(th.dynamic_batch(th.ts_beta()), env, horizon, key, problems)
    nb = int(round(bts.num_batches.mean()))
    static = simulate(th.static_batch(th.ts_beta(), math.ceil(horizon / nb)), env, horizon,
                      key, problems)
    # the same key gives the same problems: paired differences
    d1 = bts.regret[:, 0] - 1.10 * ts.regret[:, 0]
    assert d1.mean() < 3 * d1.std() / np.sqrt(problems), (bts.mean, ts.mean)
    d2 = static.regret[:, 0] - bts.regret[:, 0]
    assert d2.mean() > 3 * d2.std() / np.sqrt(problems), (static.mean, bts.mean)
    assert bts.num_batches.max() <= 5 * (math.floor(math.log2(horizon)) + 1)
    assert abs(static.num_batches.mean() - nb) <= 1


def test_gaussian_posterior_moments():
    post = th.gaussian_posterior()
    state = th.CountState(jnp.array([0.0, 3.0, 10.0]), jnp.array([0.0, 2.4, -5.0]),
                          jnp.float32(100))
    params = _f32((0.5, 2.0, 1.5))
    draws = jax.vmap(lambda k: post.sample(params, state, k, None))(
        jax.random.split(jax.random.PRNGKey(0), 40000))
    prec = 1 / 2.0 ** 2 + np.array([0, 3, 10]) / 1.5 ** 2
    mean = (0.5 / 2.0 ** 2 + np.array([0, 2.4, -5.0]) / 1.5 ** 2) / prec
    sd = 1 / np.sqrt(prec)
    np.testing.assert_allclose(draws.mean(0), mean, atol=4 * sd.max() / 200)
    np.testing.assert_allclose(draws.std(0), sd, rtol=0.03)


def test_mots_clipping_and_j_distribution():
    state = th.CountState(jnp.array([4.0, 50.0]), jnp.array([2.0, 30.0]), jnp.float32(1000))
    keys = jax.random.split(jax.random.PRNGKey(1), 40000)
    k = np.array([4.0, 50.0])
    mean = np.array([0.5, 0.6])
    tau = mean + np.sqrt(2.0 / k * np.maximum(np.log(1000 / (2 * k)), 0))
    for jin in (False, True):
        post = th.mots_posterior(jin)
        draws = np.asarray(jax.vmap(lambda kk: post.sample(_f32((0.9999, 2.0)), state, kk, None))(keys))
        assert np.all(draws <= tau + 1e-6)
        # unclipped (alpha huge) second moment: N(mu, 1/(rho k)) has E(x-mu)^2 = 1/(rho k),
        # J(mu, 1/k) (two-sided Rayleigh) has 2/k
        free = np.asarray(jax.vmap(lambda kk: post.sample(_f32((0.9999, 1e9)), state, kk, None))(keys))
        m2 = ((free - mean) ** 2).mean(0)
        np.testing.assert_allclose(m2, (2.0 if jin else 1 / 0.9999) / k, rtol=0.04)


def test_linear_posterior_is_exact_gaussian_posterior():
    rng = np.random.default_rng(0)
    d, n, prior_sd, noise_sd = 3, 20, 1.5, 0.7
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.normal(size=n).astype(np.float32)
    post = th.linear_posterior("exact")
    params = _f32(((noise_sd / prior_sd) ** 2, noise_sd))
    state = post.init(params, None, BanditSpec(n, 100, d))
    for i in range(n):
        state = post.update(params, state, None, jnp.int32(i), jnp.float32(y[i]), jnp.asarray(x))
    cov = np.linalg.inv(np.eye(d) / prior_sd ** 2 + x.T @ x / noise_sd ** 2)
    mean = cov @ x.T @ y / noise_sd ** 2
    eye = jnp.eye(d)  # obs = identity: the sample of "mean rewards" is theta itself
    draws = np.asarray(jax.vmap(lambda k: post.sample(params, state, k, eye))(
        jax.random.split(jax.random.PRNGKey(0), 40000)))
    np.testing.assert_allclose(draws.mean(0), mean, atol=0.01)
    np.testing.assert_allclose(np.cov(draws.T), cov, atol=0.01)


def test_batch_ts_contextual_runs_with_few_queries():
    env = E.linear_contextual(8, 4, 0.1)
    key = jax.random.PRNGKey(3)
    seq = simulate(th.ts_contextual(), env, 400, key, 40)
    bat = simulate(th.dynamic_batch(th.ts_contextual()), env, 400, key, 40)
    assert bat.num_batches.max() <= 8 * (math.floor(math.log2(400)) + 1)
    # regret well below a uniformly random policy's (E max_a b_a^T mu - mean, > 0.3 T)
    assert seq.mean < 0.25 * 400 and bat.mean < 0.25 * 400


def test_parameter_errors():
    with pytest.raises(ValueError, match="rho"):
        th.mots(rho=0.3)
    with pytest.raises(ValueError, match="batch_size"):
        th.static_batch(th.ts_beta(), 0)
    with pytest.raises(ValueError, match="delta"):
        th.ts_contextual(delta=2.0)


def test_cli_batch_and_ensemble_json(capsys):
    import json

    from subsample_mcmc.cli import main

    assert main(["bandits", "batch", "--arms", "3", "--horizon", "40", "--problems", "20",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["TS", "B-TS", "Static-TS", "Static-TS-2", "Static-TS-4"]
    assert rows[0]["batches"] == 40 and rows[1]["batches"] <= 3 * (5 + 1)
    assert main(["bandits", "ensemble", "--arms", "4", "--horizon", "20", "--problems", "10",
                 "--models", "2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["TS", "ES-2"]
    with pytest.raises(SystemExit):
        main(["bandits", "ensemble", "--models", "0"])
