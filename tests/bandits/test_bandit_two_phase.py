"""Two-Phase algorithm (paper 004) and the Laplace posterior for logistic bandits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize

from subsample_mcmc.bandits import BanditSpec, run_episode, simulate
from subsample_mcmc.bandits import environments as E
from subsample_mcmc.bandits import index as ix
from subsample_mcmc.bandits import laplace as lp
from subsample_mcmc.bandits import two_phase as tp


def test_epoch_structure_and_schedule():
    env = E.logistic_bernoulli(8, 3)
    ep = run_episode(tp.two_phase(1.0), env, 60, (jnp.float32(1.0),), jax.random.PRNGKey(0))
    arms = np.asarray(ep.arms)
    problem = env.sample_problem(jax.random.split(jax.random.PRNGKey(0), 3)[0])
    basis = np.asarray(tp.exploration_arms(problem.actions, 3))
    assert abs(np.linalg.det(np.asarray(problem.actions)[basis])) > 1e-3
    pos, c = 0, 1
    while pos < 60:
        # phase 1: each exploration arm once, in order
        np.testing.assert_array_equal(arms[pos:pos + 3], basis[:len(arms[pos:pos + 3])])
        pos += 3
        n2 = max(1, int(np.floor(np.e ** c)) - int(np.floor(np.e ** (c - 1))))
        block = arms[pos:pos + n2]
        assert len(set(block.tolist())) <= 1           # one exploited arm per phase 2
        pos += n2
        c += 1


@pytest.mark.parametrize("phase_one", [
    [(1.0, 1.0), (1.0, 0.0), (0.0, 0.0)],    # p = (1, 1), (1, 1/2): bad by p < 1 only
    [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0)],    # p = (0, 0), (1/2, 0): bad by p > 0 only
], ids=["upper", "lower"])
def test_phase_two_arm_is_the_logistic_estimate(phase_one):
    """Phase-1 rewards chosen by hand make epochs 1 and 2 bad (some ``p_i`` is 1, or some
    is 0: the exploration arm with the best ``p`` is exploited) and epoch 3 certainly
    good (``p = (2/3, 1/3)``); its phase 2 must then play ``argmax_a x_a^T z_hat`` with
    ``z_hat = X_B^{-1} logit(p)`` (Remark II.1), which for these attributes is neither
    an exploration arm (the bad-epoch fallback) nor the arm that ``p`` in place of
    ``logit(p)`` would pick."""
    x = jnp.array([[2.0, 0.0], [0.0, 1.8], [1.0, -1.0], [-1.0, 1.0], [1.2, -1.5]])
    basis = np.asarray(tp.exploration_arms(x, 2))
    np.testing.assert_array_equal(basis, [0, 1])
    p = np.array([2 / 3, 1 / 3])
    z_hat = np.linalg.solve(np.asarray(x)[basis], np.log(p / (1 - p)))
    expected = int(np.argmax(np.asarray(x) @ z_hat))
    assert expected == 4
    linear_in_p = int(np.argmax(np.asarray(x) @ np.linalg.solve(np.asarray(x)[basis], p)))
    assert expected not in basis and expected != linear_in_p

    policy = tp.two_phase(0.5)
    params = (jnp.float32(0.5),)
    select, update = jax.jit(policy.select), jax.jit(policy.update)
    state = policy.init(params, None, BanditSpec(5, 100, 2))
    t = 1
    for epoch, phase1 in enumerate(phase_one, start=1):
        assert int(state.epoch) == epoch and int(state.position) == 0
        for i, r in enumerate(phase1):
            arm = select(params, state, None, t, x)
            assert int(arm) == basis[i]
            state = update(params, state, None, t, arm, jnp.float32(r), x)
            t += 1
        good = epoch == 3
        assert int(state.good_epochs) == int(good)
        assert int(state.exploit) == (expected if good else basis[0])
        pulls = int(state.remaining)
        assert pulls == int(tp.phase_two_length(epoch, 0.5)) >= 1
        for _ in range(pulls):          # phase 2 plays the exploited arm; its rewards are not used
            arm = select(params, state, None, t, x)
            assert int(arm) == int(state.exploit)
            state = update(params, state, None, t, arm, jnp.float32(1.0), x)
            t += 1
    np.testing.assert_allclose(np.asarray(state.successes), [2.0, 1.0])


@pytest.mark.statistical
def test_laplace_ts_exploits_the_structure_and_two_phase_learns():
    """With 50 arms but d = 3, Laplace-TS beats UCB1-Tuned (which learns each arm
    separately); the Two-Phase algorithm's regret is sublinear: its second half of the
    horizon costs clearly less than its first half."""
    env = E.logistic_bernoulli(50, 3, preference_sd=2.0)
    key = jax.random.PRNGKey(0)
    base = simulate(ix.ucb1_tuned(), env, 400, key, 100)
    res = simulate(lp.ts_laplace(), env, 400, key, 100)
    d = res.regret[:, 0] - base.regret[:, 0]
    assert d.mean() < -3 * d.std() / np.sqrt(len(d)), (res.mean, base.mean)
    keys = jax.random.split(key, 200)
    regret = np.asarray(jax.jit(jax.vmap(lambda k: run_episode(
        tp.two_phase(0.5), env, 800, (jnp.float32(0.5),), k).regret))(keys))
    first, second = regret[:, :400].sum(1), regret[:, 400:].sum(1)
    diff = second - 0.7 * first
    assert diff.mean() < -3 * diff.std() / np.sqrt(len(diff)), (first.mean(), second.mean())


def test_laplace_map_and_covariance():
    rng = np.random.default_rng(0)
    d, n = 3, 40
    xs = rng.normal(size=(n, d)).astype(np.float32)
    ys = (rng.uniform(size=n) < 1 / (1 + np.exp(-xs @ np.array([1.0, -0.5, 0.3])))).astype(np.float32)
    post = lp.laplace_logistic_posterior(8)
    params = (jnp.float32(1.5),)
    state = post.init(params, None, BanditSpec(n, n, d))
    update = jax.jit(post.update)
    for i in range(n):
        state = update(params, state, None, jnp.int32(i), jnp.float32(ys[i]), jnp.asarray(xs))

    def nlp(z):
        s = xs @ z
        return np.sum(np.logaddexp(0, s) - ys * s) + z @ z / (2 * 1.5 ** 2)

    z_ref = minimize(nlp, np.zeros(d), method="BFGS", options=dict(gtol=1e-8)).x
    np.testing.assert_allclose(np.asarray(state.z_map), z_ref, atol=2e-4)
    draws = np.asarray(jax.vmap(lambda k: post.sample(params, state, k, jnp.eye(d)))(
        jax.random.split(jax.random.PRNGKey(0), 30000)))
    s = 1 / (1 + np.exp(-xs @ z_ref))
    h = np.eye(d) / 1.5 ** 2 + (xs * (s * (1 - s))[:, None]).T @ xs
    np.testing.assert_allclose(np.cov(draws.T), np.linalg.inv(h), atol=0.01)


def test_errors():
    with pytest.raises(ValueError, match="gamma"):
        tp.two_phase(0.0)
    with pytest.raises(ValueError, match="dim"):
        E.logistic_bernoulli(3, 5)
