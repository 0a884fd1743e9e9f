"""Ensemble sampling (Lu & Van Roy 2017): for a deterministic action sequence the
models are i.i.d. posterior draws; ensembles approach TS as M grows; neural agents."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from subsample_mcmc.bandits import BanditSpec, simulate
from subsample_mcmc.bandits import ensemble as es
from subsample_mcmc.bandits import environments as E
from subsample_mcmc.bandits import thompson as th

M = 20000


def _f32(p):
    return jax.tree_util.tree_map(jnp.float32, p)


def test_gaussian_ensemble_models_are_posterior_draws():
    post = es.gaussian_ensemble_posterior(M)
    params = _f32((0.5, 2.0, 1.5))
    state = post.init(params, jax.random.PRNGKey(0), BanditSpec(3, 10))
    arms, rewards = [0, 0, 1, 0, 2, 1, 1], [0.3, 1.2, -0.5, 0.8, 0.1, 0.0, 2.0]
    for i, (a, r) in enumerate(zip(arms, rewards)):
        state = post.update(params, state, jax.random.PRNGKey(i + 1), jnp.int32(a),
                            jnp.float32(r), None)
    models = np.asarray(state.natural / state.precision)
    n = np.bincount(arms, minlength=3)
    s = np.bincount(arms, weights=rewards, minlength=3)
    prec = 1 / 2.0 ** 2 + n / 1.5 ** 2
    mean = (0.5 / 2.0 ** 2 + s / 1.5 ** 2) / prec
    var = 1 / prec
    se_mean = np.sqrt(var / M)
    assert np.all(np.abs(models.mean(0) - mean) < 4 * se_mean)
    assert np.all(np.abs(models.var(0) / var - 1) < 4 * np.sqrt(2 / M))


def test_linear_ensemble_models_are_posterior_draws():
    rng = np.random.default_rng(1)
    d, k, prior_sd, noise_sd = 3, 6, 1.3, 0.8
    actions = jnp.asarray(rng.normal(size=(k, d)), jnp.float32)
    post = es.linear_ensemble_posterior(M)
    params = _f32((prior_sd, noise_sd))
    state = post.init(params, jax.random.PRNGKey(0), BanditSpec(k, 50, d))
    seq = rng.integers(0, k, 15)
    ys = rng.normal(size=15)
    for i, (a, y) in enumerate(zip(seq, ys)):
        state = post.update(params, state, jax.random.PRNGKey(i + 7), jnp.int32(a),
                            jnp.float32(y), actions)
    models = np.asarray(state.natural @ state.cov.T)                 # theta_m = Sigma b_m
    x = np.asarray(actions)[seq]
    cov = np.linalg.inv(np.eye(d) / prior_sd ** 2 + x.T @ x / noise_sd ** 2)
    mean = cov @ x.T @ ys / noise_sd ** 2
    np.testing.assert_allclose(np.asarray(state.cov), cov, rtol=1e-4, atol=1e-5)
    assert np.all(np.abs(models.mean(0) - mean) < 4 * np.sqrt(np.diag(cov) / M))
    np.testing.assert_allclose(np.cov(models.T), cov, atol=6 * np.abs(cov).max() / np.sqrt(M))


@pytest.mark.statistical
def test_ensemble_regret_approaches_thompson_sampling():
    """Fig. 1a of Lu & Van Roy: |regret(ES_M) - regret(TS)| shrinks as M grows."""
    env = E.gaussian(10)
    key = jax.random.PRNGKey(0)
    horizon, problems = 100, 300
    ts = simulate(th.ts_gaussian(), env, horizon, key, problems)
    gaps = {}
    for m in (1, 500):
        res = simulate(es.ensemble_gaussian(m), env, horizon, key, problems)
        d = res.regret[:, 0] - ts.regret[:, 0]                           # same problems
        gaps[m] = (d.mean(), d.std() / np.sqrt(problems))
    # one model is greedy w.r.t. a perturbed fit: clearly worse than TS ...
    assert gaps[1][0] > 4 * gaps[1][1]
    # ... a large ensemble is TS up to Monte Carlo error
    assert abs(gaps[500][0]) < 4 * gaps[500][1]


def test_neural_network_training_fits_the_reward_function():
    # uniform exploration (eps = 1) gives i.i.d. data; the trained network must then
    # rank the actions like the true single-neuron reward function
    env = E.neural(num_arms=20, dim=4, hidden=0, noise_var=1.0)
    policy = es.neural_agent("eps_greedy", epsilon=1.0, hidden=0, prior_var=10.0,
                             noise_var=1.0, learning_rate=3e-2)
    key = jax.random.PRNGKey(0)
    problem = env.sample_problem(key)
    # run the episode by hand to get the final state
    from subsample_mcmc.bandits.simulate import _step_keys, episode_keys
    _, k_init, k_run = episode_keys(key)
    params = _f32(policy.default_params)
    spec = env.spec(300)

    def step(state, t):
        k_obs, k_sel, k_rew, k_upd = _step_keys(k_run, t)
        obs = env.observe(problem, k_obs, t)
        arm = policy.select(params, state, k_sel, t, obs)
        r = env.sample_reward(problem, k_rew, obs, arm)
        return policy.update(params, state, k_upd, t, arm, r, obs), arm

    state, arms = jax.jit(lambda s: jax.lax.scan(step, s, jnp.arange(1, 301)))(
        policy.init(params, k_init, spec))
    assert len(np.unique(np.asarray(arms))) > 15                      # it explored
    pred = es._forward(state.weights[0], problem.actions)
    truth = env.mean_rewards(problem, problem.actions)
    assert np.corrcoef(np.asarray(pred), np.asarray(truth))[0, 1] > 0.9


def test_neural_agents_run_and_count():
    env = E.neural(num_arms=12, dim=5, hidden=4, noise_var=1.0)
    for policy in (es.neural_agent("ensemble", 3, hidden=4, prior_var=1.0),
                   es.neural_agent("dropout", hidden=4, dropout=0.5, prior_var=1.0),
                   es.neural_agent("eps_annealed", hidden=4, epsilon=10.0, prior_var=1.0)):
        res = simulate(policy, env, 12, jax.random.PRNGKey(1), 2, curve=True)
        assert res.curve.shape == (12,) and res.regret.shape == (2, 1)
        assert np.all(np.diff(res.curve) >= -1e-5) and res.curve[0] >= 0   # regret_t >= 0


def test_parameter_errors():
    with pytest.raises(ValueError, match="num_models"):
        es.ensemble_gaussian(0)
    with pytest.raises(ValueError, match="dropout"):
        es.neural_agent("dropout", hidden=0)
    with pytest.raises(ValueError, match="kind"):
        es.neural_agent("boltzmann")
