"""Meta-learning (Maes et al. Sec. 4): Power-P features, Alg. 2 (EDA), learned policies."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from subsample_mcmc.bandits import environments as E
from subsample_mcmc.bandits import index as ix
from subsample_mcmc.bandits import meta, run_episode, simulate
from subsample_mcmc.bandits.simulate import fast_compile


def test_power_features_are_the_monomials_of_eq8():
    tk, mean, sd, t = jnp.array([3.0, 7.0]), jnp.array([0.2, 0.6]), jnp.array([0.1, 0.4]), 11.0
    feats = np.asarray(meta.power_features(2, tk, mean, sd, t))
    v = np.stack([np.full(2, np.sqrt(np.log(t))), 1 / np.sqrt(tk), mean, sd], axis=1)
    for row, (i, j, k, l) in enumerate(meta.power_exponents(2).astype(int)):
        np.testing.assert_allclose(feats[:, row], v[:, 0] ** i * v[:, 1] ** j * v[:, 2] ** k *
                                   v[:, 3] ** l, rtol=1e-5)
    theta = np.random.default_rng(0).normal(size=81).astype(np.float32)
    policy = meta.power_policy(2, theta)
    index_fn = meta._power_index(2)
    np.testing.assert_allclose(index_fn(jnp.asarray(theta), tk, mean, sd, t), feats @ theta,
                               rtol=1e-4)
    assert policy.default_params.shape == (81,)


def test_power1_contains_ucb1_exactly():
    env = E.bernoulli(3)
    run_power = jax.jit(lambda k: run_episode(meta.power_policy(1), env, 80,
                                              jnp.asarray(meta.ucb1_as_power1(2.0)), k))
    run_ucb1 = jax.jit(lambda k: run_episode(ix.ucb1(), env, 80, (jnp.float32(2.0),), k))
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        a, b = run_power(key), run_ucb1(key)
        np.testing.assert_array_equal(np.asarray(a.arms), np.asarray(b.arms))


def test_candidate_evaluation_is_vmapped_simulation():
    # candidates evaluated together == each evaluated alone (same run keys)
    env = E.bernoulli(2)
    problems = jax.vmap(env.sample_problem)(jax.random.split(jax.random.PRNGKey(0), 5))
    thetas = np.stack([meta.ucb1_as_power1(c) for c in (0.2, 2.0, 8.0)])
    together = meta.evaluate_candidates(meta.power_policy(1), env, 50, jnp.asarray(thetas),
                                        problems, jax.random.PRNGKey(1), num_runs=3)
    alone = meta.evaluate_candidates(ix.ucb1(), env, 50, (jnp.array([0.2, 2.0, 8.0]),),
                                     problems, jax.random.PRNGKey(1), num_runs=3)
    np.testing.assert_allclose(together, alone, rtol=1e-5)


def test_eda_minimises_a_quadratic():
    # (the univariate EDA shrinks its variance geometrically, so the optimum must lie
    # within reach of the initial N(0, 1) marginals)
    target = np.array([0.9, -0.7, 0.3])
    res = meta.eda(lambda th, k: ((th - target) ** 2).sum(axis=1), 3, jax.random.PRNGKey(0),
                   iterations=40)
    np.testing.assert_allclose(res.best_theta, target, atol=0.05)
    assert res.evaluations == 40 * 40           # n_p = max(8 d, 40) = 40
    assert np.all(np.diff(np.minimum.accumulate(res.history)) <= 0)


@pytest.mark.statistical
def test_learned_power1_beats_ucb1_tuned():
    """Table 1: Power-1 trained for T = 100 beats UCB1-Tuned on Bernoulli problems
    (paper: 1.84 vs 2.28).  A short EDA (8 iterations, 5 runs per training problem)
    already does; the comparison uses paired test problems."""
    env = E.bernoulli(2)
    with fast_compile(False):     # execution-bound: 1,024 candidates x 500 episodes
        res = meta.learn_policy(meta.power_policy(1), env, 100, jax.random.PRNGKey(0),
                                num_problems=100, num_runs=5, iterations=8)
    key = jax.random.PRNGKey(123)
    learned = simulate(meta.power_policy(1, res.best_theta), env, 100, key, 4000)
    tuned = simulate(ix.ucb1_tuned(), env, 100, key, 4000)
    d = learned.regret[:, 0] - tuned.regret[:, 0]
    assert d.mean() < -3 * d.std() / np.sqrt(len(d)), (learned.mean, tuned.mean)


def test_errors():
    with pytest.raises(ValueError, match="theta"):
        meta.power_policy(1, np.zeros(5))
    with pytest.raises(ValueError, match="degree"):
        meta.power_policy(7)
    with pytest.raises(ValueError, match="no numerical parameters"):
        meta.learn_policy(ix.ucb1_tuned(), E.bernoulli(2), 10, jax.random.PRNGKey(0))
