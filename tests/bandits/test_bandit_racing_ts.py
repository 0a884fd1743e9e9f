"""Thompson sampling for the logistic bandit with RacingMH posterior draws."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from subsample_mcmc.bandits import environments as E
from subsample_mcmc.bandits import racing_ts as R
from subsample_mcmc.bandits import simulate
from subsample_mcmc.bandits.base import BanditSpec

N_DATA, BUFFER, DIM = 200, 256, 2
STEPS = 4   # MH transitions per round


def _history():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N_DATA, DIM)).astype(np.float32)
    y = (rng.uniform(size=N_DATA) < 1 / (1 + np.exp(-x @ np.array([1.0, -0.5])))).astype(np.float32)
    return x, y


def _grid_posterior(x, y, prior_sd):
    """Mean and variance of the 2-d logistic posterior by quadrature on a fine grid
    (spacing 0.017, the posterior sds are ~0.15; the box holds > 8 sds each way)."""
    a, b = np.meshgrid(np.linspace(-1, 3, 241), np.linspace(-3, 1, 241), indexing="ij")
    z = np.stack([a.ravel(), b.ravel()], 1)
    s = z @ x.T.astype(np.float64)
    lp = -0.5 * (z ** 2).sum(1) / prior_sd ** 2 + (y * s - np.logaddexp(0, s)).sum(1)
    w = np.exp(lp - lp.max())
    w /= w.sum()
    mean = w @ z
    return mean, w @ (z - mean) ** 2


def _chain(post, params, x, y, key, rounds):
    """Feed the fixed history one datum per round (the bandit path: ``add_observation``,
    i.e. proxy sums and refreshes, then the round's MH steps), then run ``rounds`` more
    rounds of MH steps on the full history; one compiled transition."""
    k0, k1 = jax.random.split(key)
    state = post.init(params, k0, BanditSpec(N_DATA, BUFFER, DIM))
    xs, ys = jnp.asarray(x), jnp.asarray(y)

    def round_(st, inp):
        i, k = inp
        st = jax.lax.cond(i < N_DATA,
                          lambda s: R.add_observation(s, xs[jnp.minimum(i, N_DATA - 1)],
                                                      ys[jnp.minimum(i, N_DATA - 1)]),
                          lambda s: s, st)
        st = R.mh_transitions(post, params, st, k)
        return st, (st.z, st.mh_evals, st.steps_done, st.accepted)

    total = N_DATA + rounds
    state, (zs, evals, steps, acc) = jax.lax.scan(
        round_, state, (jnp.arange(total), jax.random.split(k1, total)))
    filled = dict(mh_evals=evals[N_DATA - 1], steps_done=steps[N_DATA - 1],
                  accepted=acc[N_DATA - 1])
    return zs[N_DATA:], filled, state


# two chains, each compiled once (a single race level: min_level = BUFFER): the proxied
# random-walk race, and exact MH (every datum read) with the Langevin proposal
CONFIGS = {"race_rw_proxy": dict(proposal="random_walk", proxy=True),
           "exact_langevin": dict(proposal="langevin", proxy=True, method="exact")}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def fixed_history_run(request):
    x, y = _history()
    post = R.racing_logistic_posterior(steps=STEPS, min_level=BUFFER, **CONFIGS[request.param])
    params = (jnp.float32(1.0), jnp.float32(1.2))
    run = jax.jit(jax.vmap(lambda k: _chain(post, params, x, y, k, 300)))
    zs, filled, final = run(jax.random.split(jax.random.PRNGKey(3), 4))
    return request.param, x, y, np.asarray(zs, np.float64), filled, final


@pytest.mark.statistical
def test_draws_match_the_exact_posterior_on_a_fixed_history(fixed_history_run):
    """Chain draws (4 chains, batch-means MCSE) have the posterior mean within 4 MCSE and
    the posterior variances within 25 % (grid quadrature reference)."""
    name, x, y, zs, filled, final = fixed_history_run
    mean, var = _grid_posterior(x, y, 1.0)
    zs = zs[:, 20:]                                               # [chains, draws, d]
    batches = zs.reshape(4, 20, -1, DIM).mean(2).reshape(-1, DIM)
    mcse = batches.std(0, ddof=1) / np.sqrt(batches.shape[0])
    z = (zs.reshape(-1, DIM).mean(0) - mean) / mcse
    assert np.all(np.abs(z) < 4.0), (name, zs.reshape(-1, DIM).mean(0), mean, mcse)
    np.testing.assert_allclose(zs.reshape(-1, DIM).var(0), var, rtol=0.25)
    steps = np.asarray(final.steps_done - filled['steps_done'])
    acc = np.asarray(final.accepted - filled['accepted']) / steps
    assert np.all((acc > 0.15) & (acc < 0.95)), acc


def test_likelihood_evaluations_per_step(fixed_history_run):
    """Exact MH reads every slot once per step, and once more at a round's first step
    (the chain's current sum is cached from step to step within a round, not across the
    new datum), plus the Langevin mini-batch gradients at x and x'; the proxied race
    computes both arms at most at every slot, rounded up to its 50-point chunks.  (With
    256 slots the heavy-tail guard lets a race stop only once the skewed proxy
    residuals' sample moments allow it -- usually late: at this size racing buys little;
    at N = 1e5 a proxied race stops after 50 points.)"""
    name, _, _, _, filled, final = fixed_history_run
    per_step = np.asarray(final.mh_evals - filled['mh_evals']) / np.asarray(
        final.steps_done - filled['steps_done'])
    if name == "exact_langevin":
        np.testing.assert_array_equal(per_step, (STEPS + 1) * BUFFER / STEPS + 2 * 32)
    else:
        chunked = -(-BUFFER // 50) * 50
        assert np.all((per_step > 0) & (per_step <= 2 * chunked)), per_step


def test_proxy_sums_track_the_history(fixed_history_run):
    """The incrementally updated G, H equal a direct recomputation at the reference (MH
    transitions leave them alone)."""
    _, x, y, _, _, final = fixed_history_run
    for c in range(2):
        ref = np.asarray(final.reference[c], np.float64)
        p = 1 / (1 + np.exp(-(x @ ref)))
        np.testing.assert_allclose(np.asarray(final.grad_sum[c]), ((y - p)[:, None] * x).sum(0),
                                   rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(np.asarray(final.hess_sum[c]),
                                   -(x * (p * (1 - p))[:, None]).T @ x, rtol=1e-3, atol=1e-3)
    # moved to the current draw at n = 1, 2, 4, ..., 128, and O(1) evaluations per datum
    np.testing.assert_array_equal(np.asarray(final.refresh_at), 256)
    np.testing.assert_array_equal(np.asarray(final.proxy_evals), N_DATA + 255)


@pytest.mark.statistical
def test_regret_well_below_uniform_play():
    env = E.logistic_bernoulli(8, 3, preference_sd=1.5)
    horizon, problems = 120, 12
    key = jax.random.PRNGKey(4)
    res = simulate(R.ts_racing(1.5, steps=2, min_level=128), env, horizon, key, problems)

    def uniform(k):
        problem = env.sample_problem(jax.random.split(k)[0])
        mu = env.mean_rewards(problem, env.observe(problem, k, 1))
        return horizon * jnp.mean(jnp.max(mu) - mu)

    uni = np.asarray(jax.vmap(uniform)(jax.random.split(key, problems)))
    assert res.mean < 0.4 * uni.mean(), (res.mean, uni.mean())


def test_population_levels():
    assert R.population_levels(1000) == (64, 128, 256, 512, 1000)
    assert R.population_levels(64) == (64,)
    assert R.population_levels(10) == (10,)
    assert R.population_levels(300, min_level=100) == (128, 256, 300)


def test_bad_input():
    with pytest.raises(ValueError, match="steps"):
        R.racing_logistic_posterior(steps=0)
    with pytest.raises(ValueError, match="proposal"):
        R.racing_logistic_posterior(proposal="hmc")
    with pytest.raises(ValueError, match="method"):
        R.racing_logistic_posterior(method="ebs")
    with pytest.raises(ValueError, match="delta"):
        R.racing_logistic_posterior(delta=0.7)
    with pytest.raises(ValueError, match="prior_sd"):
        R.ts_racing(prior_sd=0.0)
    with pytest.raises(ValueError, match="step_scale"):
        R.ts_racing(step_scale=-1.0)
    with pytest.raises(ValueError, match="min_level"):
        R.racing_logistic_posterior(min_level=1)
    with pytest.raises(ValueError, match="horizon"):
        R.population_levels(1)
    with pytest.raises(ValueError, match="context_dim"):
        simulate(R.ts_racing(), E.bernoulli(2), 10, jax.random.PRNGKey(0), 2)
