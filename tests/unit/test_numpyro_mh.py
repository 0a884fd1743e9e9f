"""RacingMH as a NumPyro MCMCKernel: exactness, known posteriors, NumPyro/ArviZ workflow."""

import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS, Predictive

from subsample_mcmc.kernels import random_walk
from subsample_mcmc.numpyro import RacingMH

N = 20_000
Y = jax.random.normal(jax.random.PRNGKey(0), (N,)) * 2.0 + 1.0
PRIOR_SD = 10.0


def normal_model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SD))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, 2.0), obs=y)


def ecs_normal_model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SD))
    with numpyro.plate("data", y.shape[0], subsample_size=100):
        batch = numpyro.subsample(y, event_dim=0)
        numpyro.sample("y", dist.Normal(mu, 2.0), obs=batch)


def logistic_model(x, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 5.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=x @ w + b), obs=y)


def _posterior():
    prec = 1 / PRIOR_SD**2 + N / 4.0
    return float(np.sum(np.asarray(Y, np.float64)) / 4.0 / prec), prec**-0.5


# at the CI size each model with one proposal, each proposal with one model; the other two pairs
# at the full size only (make test-full)
@pytest.mark.parametrize("model,proposal", [
    (normal_model, "random_walk"), (ecs_normal_model, "langevin"),
    pytest.param(normal_model, "langevin", marks=pytest.mark.full_only),
    pytest.param(ecs_normal_model, "random_walk", marks=pytest.mark.full_only),
])
def test_conjugate_posterior_mcse_z(model, proposal):
    """Posterior mean within 4 ArviZ MCSEs of the analytic mean; sd within 10%."""
    mean, sd = _posterior()
    mcmc = MCMC(RacingMH(model, proposal=proposal), num_warmup=400, num_samples=1500, num_chains=4,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), Y, extra_fields=("num_likelihood_evals", "accept_prob"))
    # ArviZ cannot replay a subsample plate for pointwise log-likelihoods (as with HMCECS)
    idata = az.from_numpyro(mcmc, log_likelihood=model is normal_model)
    post = idata.posterior["mu"]
    mcse = float(az.mcse(idata, var_names=["mu"])["mu"])
    assert abs(float(post.mean()) - mean) < 4 * mcse
    assert abs(float(post.std()) / sd - 1) < 0.1
    assert float(az.rhat(idata)["mu"]) < 1.05
    evals = idata.sample_stats["num_likelihood_evals"]
    # a small fraction of the exact step's cost in the same units: both arms at all N data,
    # each a Taylor residual costing point_cost likelihood evaluations
    point_cost = mcmc.sampler._cost("point")
    assert float(evals.mean()) < 0.05 * 2 * N * point_cost


@pytest.mark.smoke
def test_full_read_reproduces_exact_mh_bit_for_bit():
    """first_batch = N, no proxy, no adaptation: the chain equals a textbook MH chain
    (float64 potential, same keys) draw for draw."""
    n, steps, step = 3000, 60, 0.05
    y = Y[:n]
    kernel = RacingMH(normal_model, proposal="random_walk", first_batch=n, control_variate=None, adapt_step_size=False,
                      adapt_mass_matrix=False, step_size=step, init_strategy="prior")
    init = {"mu": jnp.array(0.9, jnp.float32)}
    state = kernel.init(jax.random.PRNGKey(5), 0, init, (y,), {})
    state = state._replace(inverse_mass_matrix=jnp.ones(1))
    sample = jax.jit(lambda s: kernel.sample(s, (y,), {}))
    yy = np.asarray(y, np.float64)

    def log_target(mu):
        return -0.5 * (mu / PRIOR_SD) ** 2 + np.sum(-0.5 * ((yy - mu) / 2.0) ** 2)

    propose = jax.jit(lambda k, v: random_walk()(k, v, jnp.float32(step), jnp.ones(1))[0])
    x = np.float32(0.9)
    accepted = 0
    for _ in range(steps):
        key, key_step = jax.random.split(state.rng_key)
        key_prop, _, key_accept = jax.random.split(key_step, 3)
        # the proposal via the library's own (jitted) random walk, so that XLA's fused
        # multiply-add rounds it the same way; the MH decision below is independent
        prop = np.float32(propose(key_prop, jnp.array([x], jnp.float32))[0])
        key_u, _ = jax.random.split(key_accept)
        log_u = float(jnp.log(jax.random.uniform(key_u, minval=jnp.finfo(jnp.float32).tiny)))
        take = log_u + log_target(float(x)) < log_target(float(prop))
        state = sample(state)
        # decision for decision; the value to the last bit where the kernel's step and the separately
        # compiled proposal fuse the multiply-add alike (on some JAX versions they differ by one ulp)
        assert (float(state.z["mu"]) != float(x)) == take
        if take:
            assert abs(float(state.z["mu"]) - float(prop)) <= float(np.spacing(np.float32(prop)))
            accepted += 1
        x = np.float32(state.z["mu"])
        assert int(state.num_likelihood_evals) == 2 * n
    assert 0 < accepted < steps


# full size only (make test-full): RacingMH against NUTS on a logistic regression runs at the CI size in the zoo
# (logistic_regression), the Langevin proposal in test_conjugate_posterior_mcse_z
@pytest.mark.full_only
def test_logistic_regression_matches_nuts():
    rng = np.random.default_rng(0)
    n, d = 5000, 3
    x = jnp.asarray(rng.normal(size=(n, d)), jnp.float32)
    w_true = np.array([0.5, -1.0, 0.25])
    y = jnp.asarray(rng.random(n) < 1 / (1 + np.exp(-(np.asarray(x) @ w_true + 0.3))), jnp.float32)
    ref = MCMC(NUTS(logistic_model), num_warmup=500, num_samples=1000, num_chains=4,
               chain_method="vectorized", progress_bar=False)
    ref.run(jax.random.PRNGKey(0), x, y)
    racing = MCMC(RacingMH(logistic_model, proposal="langevin"), num_warmup=500, num_samples=2000,
                  num_chains=4, chain_method="vectorized", progress_bar=False)
    racing.run(jax.random.PRNGKey(1), x, y)
    a, b = az.from_numpyro(ref), az.from_numpyro(racing)
    for name in ("w", "b"):
        m_ref, m_rac = a.posterior[name].mean(("chain", "draw")), b.posterior[name].mean(("chain", "draw"))
        se = np.sqrt(az.mcse(a, var_names=[name])[name] ** 2 + az.mcse(b, var_names=[name])[name] ** 2)
        z = np.abs(np.asarray(m_rac - m_ref)) / np.asarray(se)
        assert np.all(z < 4.5), (name, z)
        sd_ratio = np.asarray(b.posterior[name].std(("chain", "draw")) / a.posterior[name].std(("chain", "draw")))
        assert np.all(np.abs(sd_ratio - 1) < 0.15), (name, sd_ratio)


def test_sequential_and_vectorized_chains_agree():
    kw = dict(num_warmup=100, num_samples=100, num_chains=2, progress_bar=False)
    seq = MCMC(RacingMH(normal_model), chain_method="sequential", **kw)
    seq.run(jax.random.PRNGKey(3), Y)
    vec = MCMC(RacingMH(normal_model), chain_method="vectorized", **kw)
    vec.run(jax.random.PRNGKey(3), Y)
    a = seq.get_samples(group_by_chain=True)["mu"]
    b = vec.get_samples(group_by_chain=True)["mu"]
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_vectorized_init_gives_each_chain_its_own_start_and_state():
    """Vectorized chains are initialised one at a time and stacked: chain c's state is the one
    a one-chain init from its key and ``init_params[c]`` builds; each ascent from its own
    ``init_params[c]`` (3 and 11 posterior sds away) ends at the posterior mode."""
    kernel = RacingMH(normal_model)
    keys = jax.random.split(jax.random.PRNGKey(5), 3)
    starts = np.array([0.9, 1.0, 1.2], np.float32)
    states = kernel.init(keys, 10, {"mu": starts}, (np.asarray(Y),), {})
    mean, sd = _posterior()
    np.testing.assert_allclose(np.asarray(states.z["mu"]), mean, atol=0.05 * sd)
    for c in range(3):
        one = RacingMH(normal_model).init(keys[c], 10, {"mu": starts[c]}, (np.asarray(Y),), {})
        for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(jax.tree.map(lambda v, c=c: v[c], states))):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)




@pytest.mark.smoke
def test_post_warmup_state_continues_without_retrace():
    kernel = RacingMH(normal_model)
    mcmc = MCMC(kernel, num_warmup=100, num_samples=50, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), Y)
    traces = {"n": 0}
    original = kernel.sample

    def counting(state, args, kwargs):
        traces["n"] += 1
        return original(state, args, kwargs)

    kernel.sample = counting
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.run(mcmc.post_warmup_state.rng_key, Y)
    first = traces["n"]
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.run(mcmc.post_warmup_state.rng_key, Y)
    assert traces["n"] == first  # the second continuation reuses the compiled step
    assert mcmc.get_samples()["mu"].shape == (50,)


@pytest.mark.smoke
def test_predictive_and_arviz():
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(2000, 2)), jnp.float32)
    y = jnp.asarray(rng.random(2000) < 0.5, jnp.float32)
    mcmc = MCMC(RacingMH(logistic_model), num_warmup=100, num_samples=100, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), x, y, extra_fields=("num_likelihood_evals", "accept_prob", "race_stage"))
    pred = Predictive(logistic_model, mcmc.get_samples())(jax.random.PRNGKey(1), x)
    assert pred["y"].shape == (100, 2000)
    idata = az.from_numpyro(mcmc)
    for field in ("num_likelihood_evals", "race_stage"):
        assert field in idata.sample_stats
    assert az.summary(idata).shape[0] == 3


# ----------------------------------------------------------------------------- bad input
def no_plate(y):
    mu = numpyro.sample("mu", dist.Normal(0, 1))
    numpyro.sample("y", dist.Normal(mu, 1).expand([y.shape[0]]).to_event(1), obs=y)


def no_obs(y):
    numpyro.sample("mu", dist.Normal(0, 1))


def two_plates(y):
    mu = numpyro.sample("mu", dist.Normal(0, 1))
    with numpyro.plate("a", y.shape[0]):
        numpyro.sample("ya", dist.Normal(mu, 1), obs=y)
    with numpyro.plate("b", y.shape[0]):
        numpyro.sample("yb", dist.Normal(mu, 2), obs=y)


def discrete(y):
    k = numpyro.sample("k", dist.Categorical(probs=jnp.ones(3) / 3))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(k, 1), obs=y)


def uniform_lik(y):
    a = numpyro.sample("a", dist.HalfNormal(5.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Uniform(-a, a), obs=y)


@pytest.mark.parametrize("model,match", [(no_plate, "plate"), (no_obs, "observed"),
                                         (two_plates, "data_plate"), (discrete, "RacingGibbs")])
@pytest.mark.smoke
def test_bad_models(model, match):
    with pytest.raises(ValueError, match=match):
        MCMC(RacingMH(model), num_warmup=1, num_samples=1, progress_bar=False).run(jax.random.PRNGKey(0), Y[:100])


def test_data_plate_argument_picks_one():
    mcmc = MCMC(RacingMH(two_plates, data_plate="a"), num_warmup=20, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), Y[:500])
    with pytest.raises(ValueError, match="not a plate"):
        MCMC(RacingMH(two_plates, data_plate="c"), num_warmup=1, num_samples=1,
             progress_bar=False).run(jax.random.PRNGKey(0), Y[:500])


def test_data_shorter_than_first_batch():
    with pytest.raises(ValueError, match="first_batch"):
        MCMC(RacingMH(normal_model, first_batch=64), num_warmup=1, num_samples=1,
             progress_bar=False).run(jax.random.PRNGKey(0), Y[:32])


def test_nonfinite_loglik_at_initial_point_names_the_site():
    y = jnp.array([0.5, -3.0, 1.0] * 40)
    with pytest.raises(ValueError, match="'y'.*not finite"):
        MCMC(RacingMH(uniform_lik, first_batch=10), num_warmup=1, num_samples=1,
             progress_bar=False).run(jax.random.PRNGKey(0), y, init_params={"a": jnp.log(jnp.expm1(1.0))})


@pytest.mark.parametrize("kwargs,match", [(dict(delta=0.7), "delta"), (dict(proposal="hmc"), "proposal"),
                                          (dict(method="x"), "method"), (dict(step_size=-1.0), "step_size"),
                                          (dict(control_variate="data"), "control_variate")])
def test_bad_kernel_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RacingMH(normal_model, **kwargs)


def test_data_space_control_variate_in_racing_mh():
    from subsample_mcmc.numpyro import DataSpaceControlVariate

    mean, sd = _posterior()
    cv = DataSpaceControlVariate(lambda v, y: dist.Normal(v["mu"], 2.0).log_prob(y[0]), Y, num_bins=20)
    mcmc = MCMC(RacingMH(normal_model, proposal="random_walk", control_variate=cv), num_warmup=300,
                num_samples=1000, num_chains=2, chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(2), Y, extra_fields=("num_likelihood_evals",))
    idata = az.from_numpyro(mcmc)
    mcse = float(az.mcse(idata, var_names=["mu"])["mu"])
    assert abs(float(idata.posterior["mu"].mean()) - mean) < 4 * mcse
    assert abs(float(idata.posterior["mu"].std()) / sd - 1) < 0.15
    # a Gaussian likelihood is quadratic in the data: the residual rewards are constant up to
    # float32 rounding, so races stop after the first 50 points (the heavy-tail guard may hold a
    # rare race one stage when the rounding noise looks skewed, and the tail-index width, whose Hill
    # fit at T = 50 uses k = 6 order statistics of that noise, a few more: 101.75 on average here)
    evals = np.asarray(idata.sample_stats["num_likelihood_evals"])
    assert np.median(evals) == 2 * 50
    assert evals.mean() <= 2 * 50 * 1.03




@pytest.mark.parametrize("option", ["dense_mass", "adapt_mass_matrix"])
def test_mass_options_must_be_booleans(option):
    with pytest.raises(TypeError, match=option):
        RacingMH(normal_model, **{option: "yes"})


def _hierarchical_normal():
    """8 groups of 1000 points, y ~ N(a_g, 1), a_g ~ N(mu, tau) centred as users write it,
    mu ~ N(0, 1), tau ~ HalfNormal(1): NumPy float64 data; the exact posterior of (mu, tau)
    from ybar_g ~ N(mu, tau^2 + 1/1000) on a grid: the 1% and 99% quantiles of tau and mu."""
    from scipy import stats

    groups, per_group = 8, 1000
    rng = np.random.default_rng(3)
    g = np.repeat(np.arange(groups), per_group)
    y = rng.normal(rng.normal(0.0, 0.3, groups)[g], 1.0)

    def model(g, y):
        mu = numpyro.sample("mu", dist.Normal(0, 1))
        tau = numpyro.sample("tau", dist.HalfNormal(1.0))
        with numpyro.plate("groups", groups):
            a = numpyro.sample("a", dist.Normal(mu, tau))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(a[g], 1.0), obs=y)

    ybar = np.array([y[g == k].mean() for k in range(groups)])
    tau = np.linspace(1e-4, 3.0, 3001)[:, None]
    mu = np.linspace(-3.0, 3.0, 3001)[None, :]
    v = tau**2 + 1.0 / per_group
    log_post = stats.halfnorm.logpdf(tau) + stats.norm.logpdf(mu) - 0.5 * groups * np.log(v)
    log_post = log_post - 0.5 * sum((yb - mu) ** 2 for yb in ybar) / v
    post = np.exp(log_post - log_post.max())

    def quantiles(marginal, grid):
        cdf = np.cumsum(marginal)
        return grid[np.searchsorted(cdf / cdf[-1], [0.01, 0.99])]

    return model, (g, y), {"tau": quantiles(post.sum(1), tau[:, 0]), "mu": quantiles(post.sum(0), mu[0])}


# full size only (make test-full): two runs of 4 x 4,000 steps; the proposal rule's random-walk branch is
# checked at the CI size by test_default_block_of_a_gibbs_kernel_is_the_random_walk and the zoo
@pytest.mark.full_only
def test_default_covers_the_tails_of_a_hierarchical_model():
    """RacingMH(model) with its defaults, and with the opt-in Student-t Crank-Nicolson, on a
    centred hierarchical model: the chains put about 1% of their draws beyond each exact 1%
    tail quantile of tau (a heavier upper tail than its Laplace approximation) and of mu (a
    funnel: mu's spread grows with tau).  The Gaussian Crank-Nicolson independence sampler put
    0% beyond tau's upper one on this seed, with R-hat and ESS fine.  The default chooses the
    random walk here: the prior's funnel makes target / Laplace t unbounded (Pareto k > 0)."""
    model, args, tails = _hierarchical_normal()
    for proposal in (None, "crank_nicolson"):
        mcmc = MCMC(RacingMH(model, proposal=proposal), num_warmup=1000, num_samples=3000, num_chains=4,
                    chain_method="vectorized", progress_bar=False)
        mcmc.run(jax.random.PRNGKey(1), *args)
        if proposal is None:
            assert not np.any(np.asarray(mcmc.last_state.crank_nicolson))
            assert np.all(np.asarray(mcmc.last_state.laplace_k_hat) > 0)
        for site, (q01, q99) in tails.items():
            draws = np.asarray(mcmc.get_samples()[site])
            assert 0.004 < np.mean(draws < q01) < 0.03, (proposal, site, np.mean(draws < q01))
            assert 0.004 < np.mean(draws > q99) < 0.03, (proposal, site, np.mean(draws > q99))


# full size only (make test-full): the default Crank-Nicolson-t move of a GLM runs at the CI size in the zoo's
# regressions (RacingMH(model), defaults)
@pytest.mark.full_only
def test_default_moves_a_glm_by_crank_nicolson_t():
    """On a logistic regression with an intercept and correlated 0/1 dummies (NumPy float64
    data, as from pandas), target / Laplace t is bounded (Pareto k < 0): the default moves by
    Crank-Nicolson-t, and its draws agree with NUTS's (means within 4 combined MCSE, sds
    within 10%).  Without the Taylor proxy (no cheap check) it keeps the random walk."""
    rng = np.random.default_rng(7)
    n = 20_000
    a = rng.random(n) < 0.4
    b = (rng.random(n) < np.where(a, 0.7, 0.2))
    x = np.column_stack([a, b, rng.normal(35.0, 8.0, n)]).astype(np.float64)
    y = (rng.random(n) < 1 / (1 + np.exp(-(-1.0 + 0.5 * a - 0.8 * b + 0.02 * x[:, 2])))).astype(np.float64)

    def model(x, y=None):
        b0 = numpyro.sample("b0", dist.Normal(0.0, 5.0))
        beta = numpyro.sample("beta", dist.Normal(0.0, 5.0).expand([x.shape[1]]))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Bernoulli(logits=b0 + x @ beta), obs=y)

    mcmc = MCMC(RacingMH(model), num_warmup=500, num_samples=2000, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), x, y=y)
    assert np.all(np.asarray(mcmc.last_state.crank_nicolson))
    assert np.all(np.asarray(mcmc.last_state.laplace_k_hat) < 0)
    ref = MCMC(NUTS(model, dense_mass=True), num_warmup=500, num_samples=1000, num_chains=2,
               chain_method="vectorized", progress_bar=False)
    ref.run(jax.random.PRNGKey(1), x, y=y)
    s_r = az.summary(az.from_numpyro(mcmc, log_likelihood=False), round_to="none")
    s_n = az.summary(az.from_numpyro(ref, log_likelihood=False), round_to="none")
    z = (s_r["mean"] - s_n["mean"]) / np.sqrt(s_r["mcse_mean"] ** 2 + s_n["mcse_mean"] ** 2)
    assert np.all(np.abs(z) < 4), z
    assert np.all(np.abs(s_r["sd"] / s_n["sd"] - 1) < 0.1), s_r["sd"] / s_n["sd"]
    kernel = RacingMH(model, control_variate=None)
    state = kernel.init(jax.random.PRNGKey(0), 10, None, (x,), {"y": y})
    assert not bool(state.crank_nicolson) and np.isnan(float(state.laplace_k_hat))


def test_default_block_of_a_gibbs_kernel_is_the_random_walk():
    """A RacingMH block of a Gibbs kernel (wrap_model) keeps the random walk by default; an
    explicit centred proposal, whose centre would stay at the conditional met at init, warns."""
    kernel = RacingMH(normal_model)
    assert kernel.proposal == "automatic"
    block = kernel.wrap_model(lambda m: m)
    assert block.proposal == "random_walk" and not block._automatic_proposal
    with pytest.warns(UserWarning, match="block of a Gibbs kernel"):
        RacingMH(normal_model, proposal="crank_nicolson").wrap_model(lambda m: m)


def _rare_stratum_logistic(rare_fraction, n=20_000, seed=6):
    """A rare-event logistic regression (about 0.5% events) with a binary stratum indicator, NumPy
    float64 design: with ``rare_fraction`` 0.003 the stratum has ~80 rows and one event, and the
    Taylor residuals' spread sits on those rows."""
    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=n)
    stratum = (rng.random(n) < rare_fraction).astype(np.float64)
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(-5.4 + 0.5 * x1 + 1.0 * stratum))))
    return np.column_stack([np.ones(n), x1, stratum]), y


def _logistic_beta(X, y=None):
    beta = numpyro.sample("beta", dist.Normal(0, 3).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=X @ beta), obs=y)


def test_rare_influential_data_send_the_chain_to_the_exact_step_with_a_warning():
    """A first batch of 50 never sees the rare stratum that carries the residuals' spread: a race
    would decide on a width ~16x too narrow (a fresh user's trial: the stratum's coefficient came back
    shifted by 9 MCSE with R-hat and ESS fine).  The check at init sends every chain to the exact step
    and says so; the same model with a common stratum (the spread seen by any batch) keeps racing."""
    X, y = _rare_stratum_logistic(0.003)
    mcmc = MCMC(RacingMH(_logistic_beta), num_warmup=20, num_samples=20, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    with pytest.warns(UserWarning, match="exact MH step.*few data carry most"):
        mcmc.run(jax.random.PRNGKey(0), X, y, extra_fields=("num_likelihood_evals", "exact_mode"))
    st = mcmc.last_state
    assert np.all(np.asarray(st.exact_mode)) and np.all(np.asarray(st.residual_spread_ratio) > 5.0)
    assert np.all(np.asarray(mcmc.get_extra_fields()["exact_mode"]))

    X, y = _rare_stratum_logistic(0.3)
    mcmc = MCMC(RacingMH(_logistic_beta), num_warmup=20, num_samples=20, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*few data carry most.*")
        mcmc.run(jax.random.PRNGKey(0), X, y)
    st = mcmc.last_state
    assert not np.any(np.asarray(st.exact_mode)) and np.all(np.asarray(st.residual_spread_ratio) < 5.0)


def _poisson_beta(X, y=None):
    beta = numpyro.sample("beta", dist.Normal(0, 3).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(X @ beta)), obs=y)


def test_third_order_proxy_keeps_the_posterior():
    """``taylor_order=3``: the proxy carries the third-derivative sum ``T`` ``[p, p, p]`` and the
    chain samples the same posterior as the second-order default (means within Monte Carlo
    error; NumPy float64 data, a Poisson regression the kernels were not tuned on)."""
    rng = np.random.default_rng(11)
    n = 200_000
    X = np.column_stack([np.ones(n), rng.normal(size=n), (rng.random(n) < 0.1).astype(np.float64)])
    y = rng.poisson(np.exp(X @ np.array([-1.0, 0.4, 0.8])))
    runs = {}
    for order in (2, 3):
        mcmc = MCMC(RacingMH(_poisson_beta, taylor_order=order), num_warmup=300, num_samples=3000,
                    progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), X, y=y)
        runs[order] = mcmc
    assert runs[2].last_state.proxy.third_sum is None
    assert runs[3].last_state.proxy.third_sum.shape == (3, 3, 3)
    a, b = (az.from_numpyro(runs[o]) for o in (2, 3))
    diff = np.asarray(a.posterior["beta"].mean(("chain", "draw")) - b.posterior["beta"].mean(("chain", "draw")))
    se = np.hypot(np.asarray(az.mcse(a)["beta"]), np.asarray(az.mcse(b)["beta"]))
    assert np.all(np.abs(diff) < 4.0 * se), (diff, se)
    with pytest.raises(ValueError, match=r"taylor_order must be None \(automatic\), 2 or 3"):
        RacingMH(_poisson_beta, taylor_order=4)


def _dummies_logistic(n, seed=0):
    """A logistic regression on rare binary covariates (as openintro military's dummies), NumPy float64:
    the Taylor residuals' third-order part is large, so second-order races often run to late stages."""
    rng = np.random.default_rng(seed)
    d = (rng.random((n, 5)) < np.array([0.3, 0.15, 0.05, 0.02, 0.01])).astype(np.float64)
    X = np.column_stack([np.ones(n), d])
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(X @ np.array([-1.7, 0.8, -0.5, 1.2, 0.6, -1.0])))))
    return X, y


def _race_reads_per_step(mcmc):
    """Data a race reads per step (both arms), over the chains that race (not in exact mode)."""
    evals = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_likelihood_evals"])
    racing = ~np.asarray(mcmc.last_state.exact_mode).reshape(-1)
    assert racing.any()
    return float(np.mean(evals[racing])) / mcmc.sampler._cost("point")


# full size only (make test-full): the third-order proxy is checked at the CI size by
# test_third_order_proxy_keeps_the_posterior
@pytest.mark.full_only
@pytest.mark.filterwarnings("ignore:RacingMH. 1 of 2 chains sample by the exact MH step:UserWarning")
def test_automatic_taylor_order_takes_the_cheaper_race():
    """``taylor_order=None`` (the default) adds the third-order term where the second-order race's
    near-tie tail is predicted to cost at least twice the third-order one, and keeps order 2 elsewhere;
    one choice for all chains.  On rare dummies the automatic kernel reads several times fewer data per
    step than ``taylor_order=2`` and samples the same posterior; on a design with common covariates it
    keeps order 2 (NumPy float64 data, models the kernels were not tuned on)."""
    X, y = _dummies_logistic(50_000)
    runs = {}
    for order in (None, 2):
        mcmc = MCMC(RacingMH(_logistic_beta, taylor_order=order), num_warmup=500,
                    num_samples=3000, num_chains=2, chain_method="vectorized", progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), X, y=y, extra_fields=("num_likelihood_evals",))
        runs[order] = mcmc
    auto = runs[None]
    assert auto.sampler.proxy_order == 3 and auto.sampler.taylor_order is None
    assert auto.last_state.proxy.third_sum.shape == (2, 6, 6, 6)  # both chains
    assert runs[2].sampler.proxy_order == 2 and runs[2].last_state.proxy.third_sum is None
    reads = {o: _race_reads_per_step(runs[o]) for o in runs}
    assert reads[2] > 3.0 * reads[None], reads
    a, b = (az.from_numpyro(runs[o]) for o in (None, 2))
    diff = np.asarray(a.posterior["beta"].mean(("chain", "draw")) - b.posterior["beta"].mean(("chain", "draw")))
    se = np.hypot(np.asarray(az.mcse(a)["beta"]), np.asarray(az.mcse(b)["beta"]))
    assert np.all(np.abs(diff) < 4.0 * se), (diff, se)

    rng = np.random.default_rng(2)
    n = 50_000
    X = np.column_stack([np.ones(n), rng.random(n) < 0.5, rng.random(n) < 0.5, rng.normal(size=n)]).astype(np.float64)
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(X @ np.array([-0.5, 0.1, 0.1, 0.05])))))
    kernel = RacingMH(_logistic_beta)
    MCMC(kernel, num_warmup=50, num_samples=50, progress_bar=False).run(jax.random.PRNGKey(0), X, y=y)
    assert kernel.proxy_order == 2


# full size only (make test-full): the third-order proxy is checked at the CI size by
# test_third_order_proxy_keeps_the_posterior, x64 by the zoo's x64 entries
@pytest.mark.full_only
def test_automatic_taylor_order_under_x64_weighs_the_residuals_tails():
    """Under ``jax_enable_x64`` the residuals' own heavy tails (``(x' D)^4`` of a Gaussian covariate,
    the rare dummies), hidden by rounding in float32, make the race's heavy-tail guard read thousands
    of points per step, more at order 3 than at order 2: the automatic order keeps 2 there, and a forced
    order 3 costs more per step (NumPy float64 data)."""
    n = 200_000
    rng = np.random.default_rng(3)
    X, _ = _dummies_logistic(n)
    X = np.column_stack([X, rng.normal(size=n)])
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(X @ np.array([-1.7, 0.8, -0.5, 1.2, 0.6, -1.0, 0.5])))))
    evals = {}
    with jax.enable_x64(True):
        for order in (None, 3):
            mcmc = MCMC(RacingMH(_logistic_beta, taylor_order=order), num_warmup=200, num_samples=300,
                        progress_bar=False)
            mcmc.run(jax.random.PRNGKey(0), X, y=y, extra_fields=("num_likelihood_evals",))
            assert not bool(mcmc.last_state.exact_mode)
            evals[order] = float(np.mean(mcmc.get_extra_fields()["num_likelihood_evals"]))
            if order is None:
                assert mcmc.sampler.proxy_order == 2
    assert evals[3] > 1.5 * evals[None], evals


def test_taylor_order_and_first_batch_are_checked_when_the_kernel_is_built():
    """``taylor_order`` without a Taylor proxy, and a ``first_batch`` below 2, are refused by the
    constructor with the argument named (before: ``proxy_order`` reported an order for a kernel with no
    proxy, and ``first_batch=1`` passed the constructor, warned at init and failed in the race)."""
    with pytest.raises(ValueError, match="taylor_order=3 sets the order of the Taylor proxy"):
        RacingMH(_poisson_beta, control_variate=None, taylor_order=3)
    with pytest.raises(ValueError, match="first_batch must be an integer >= 2"):
        RacingMH(_poisson_beta, first_batch=1)
    with pytest.raises(ValueError, match=r"taylor_order must be None \(automatic\), 2 or 3 \(an int\)"):
        RacingMH(_poisson_beta, taylor_order="3")
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(2000), rng.normal(size=2000)])
    y = rng.poisson(np.exp(X @ np.array([0.5, 0.3])))
    kernel = RacingMH(_poisson_beta, control_variate=None)
    MCMC(kernel, num_warmup=20, num_samples=20, progress_bar=False).run(jax.random.PRNGKey(0), X, y=y)
    assert kernel.proxy_order is None


# full size only (make test-full): the default tie band runs in every RacingMH test at the CI size; this is its
# comparison with tie_share=0 on N = 60,000
@pytest.mark.full_only
def test_tie_share_default_agrees_with_races_right_for_every_u_and_never_reads_all_n():
    """The default tie band (``tie_share=0.8``) against ``tie_share=0`` on a logistic regression with NumPy
    float64 data (N = 60,000, correlated covariates, 2 vectorized chains each): posterior means agree
    within 4 combined MCSE and sds within 10%; no default step reads all N (both arms at every point
    would cost 2 N point-costs), and its mean cost per step is not above the other's."""
    rng = np.random.default_rng(11)
    n = 60_000
    z = rng.normal(size=(n, 3))
    X = np.column_stack([np.ones(n), z[:, 0], 0.8 * z[:, 0] + 0.6 * z[:, 1], z[:, 2]])
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(X @ np.array([-0.5, 0.4, -0.3, 0.2])))))
    with pytest.raises(ValueError, match=r"tie_share must lie in \[0, 1\)"):
        RacingMH(_logistic_beta, tie_share=1.0)
    runs = {}
    for share in (None, 0.0):
        kernel = RacingMH(_logistic_beta, **({} if share is None else {"tie_share": share}))
        mcmc = MCMC(kernel, num_warmup=500, num_samples=1500, num_chains=2, chain_method="vectorized",
                    progress_bar=False)
        mcmc.run(jax.random.PRNGKey(4), X, y=y, extra_fields=("num_likelihood_evals",))
        evals = np.asarray(mcmc.get_extra_fields()["num_likelihood_evals"])
        runs[share] = (az.from_numpyro(mcmc), evals, kernel._cost("point"))
    (idata, evals, cost), (idata0, evals0, _) = runs[None], runs[0.0]
    post, post0 = idata.posterior["beta"], idata0.posterior["beta"]
    se = np.sqrt(az.mcse(idata, var_names=["beta"])["beta"].values ** 2
                 + az.mcse(idata0, var_names=["beta"])["beta"].values ** 2)
    diff = np.abs(post.mean(("chain", "draw")).values - post0.mean(("chain", "draw")).values)
    assert np.all(diff < 4 * se), (diff, se)
    ratio = post.std(("chain", "draw")).values / post0.std(("chain", "draw")).values
    assert np.all(np.abs(ratio - 1) < 0.1), ratio
    assert evals.max() < 2 * n * cost - 0.5
    assert evals.mean() <= evals0.mean()


def _l1_regression(X, y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 5.0).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Laplace(mu + X @ beta, 1.5), obs=y)


def _shifted_exponential_factor(y=None):
    loc = numpyro.sample("loc", dist.Normal(0.0, 10.0))
    rate = numpyro.sample("rate", dist.Gamma(2.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.factor("ll", jnp.where(y > loc, jnp.log(rate) - rate * (y - loc), -jnp.inf))


def test_a_likelihood_whose_support_moves_with_the_parameters_is_sampled_by_the_exact_step():
    """A shifted exponential written as a ``numpyro.factor`` that is -inf for y < loc (no distribution
    support to detect): a proposal with loc past min(y) is impossible only through the data below it, which
    a race does not read.  A fresh user's run (N = 20,000) drew every loc above min(y), 476 data outside
    the support, with no warning.  The init's mode search ends on the edge of the support: the chains
    sample by the exact step, with a warning, and no draw leaves the support (NumPy float64, keyword
    data)."""
    rng = np.random.default_rng(1)
    y = 3.0 + rng.exponential(0.5, 5_000)
    mcmc = MCMC(RacingMH(_shifted_exponential_factor), num_warmup=200, num_samples=300, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    with pytest.warns(UserWarning, match="edge of its support"):
        mcmc.run(jax.random.PRNGKey(0), y=y)
    state = mcmc.last_state
    assert np.all(np.asarray(state.support_boundary)) and np.all(np.asarray(state.exact_mode))
    loc = np.asarray(mcmc.get_samples()["loc"])
    assert np.all(loc <= y.min()), (loc.max(), y.min())
    # the posterior of loc sits within a few 1 / (N rate) of min(y)
    assert np.all(loc > y.min() - 40.0 / (y.size * 2.0)), loc.min()
    # rate given loc = min(y) is Gamma(2 + N, 1 + sum(y - min(y))).  The mode search goes on along the edge
    # (before, Newton stopped where its first step met it: log rate 0.2-0.3 below the mode, and the mass
    # matrix, floored at g^2 for every coordinate, scaled log rate 1000x too small: R-hat 2.3 at N = 20,000)
    a, b = 2.0 + y.size, 1.0 + np.sum(y - y.min())
    log_rate = np.asarray(state.center)[:, 1]
    assert np.all(np.abs(log_rate - np.log(a / b)) < 0.1 / np.sqrt(a)), (log_rate, np.log(a / b))
    var = np.asarray(state.inverse_mass_matrix)[:, 1, 1]
    assert np.all((var * a > 0.5) & (var * a < 2.0)), var * a
    rate = np.asarray(mcmc.get_samples()["rate"])
    assert abs(rate.mean() - a / b) < 0.5 * np.sqrt(a) / b, (rate.mean(), a / b, np.sqrt(a) / b)


def _one_sided_regression(x, y=None):
    a = numpyro.sample("a", dist.Normal(0.0, 10.0))
    b = numpyro.sample("b", dist.Normal(0.0, 10.0))
    rate = numpyro.sample("rate", dist.Gamma(2.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        r = y - (a + b * x)
        numpyro.factor("ll", jnp.where(r > 0, jnp.log(rate) - rate * r, -jnp.inf))


def test_a_slanted_support_edge_is_named_at_the_start():
    """y = a + b x + Exponential noise, written as a factor: the edge y > a + b x (for all data) is along
    neither a nor b. The mode search holds both at the edge and cannot slide along it, and the exact walk
    from there stays near its start (a trial at N = 20,000: chains at b = 1.65 and 1.98, R-hat 40). The
    start warns, naming the held parameters and R-hat, beside the exact-step warning (NumPy float64)."""
    rng = np.random.default_rng(1)
    x = rng.uniform(0.0, 1.0, 3_000)
    y = 1.0 + 2.0 * x + rng.exponential(0.5, x.size)
    kernel = RacingMH(_one_sided_regression)
    with pytest.warns(UserWarning, match=r"holds 2 parameters at once.*R-hat"):
        state = kernel.init(jax.random.PRNGKey(0), 10, None, (x,), {"y": y})
    assert bool(state.support_boundary) and bool(state.exact_mode)


def _shifted_weibull(y=None):
    loc = numpyro.sample("loc", dist.Normal(0.0, 5.0))
    scale = numpyro.sample("scale", dist.LogNormal(0.0, 1.0))
    k = numpyro.sample("k", dist.LogNormal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Weibull(scale, k), obs=y - loc)


def _shifted_normal(y=None):
    loc = numpyro.sample("loc", dist.Normal(0.0, 5.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(0.0, 1.0), obs=y - loc)


def test_an_observed_value_that_moves_under_a_bounded_support_is_sampled_by_the_exact_step():
    """A three-parameter Weibull written as ``obs=y - loc``: the Weibull's support (positive) does not move,
    the observed value does, so the likelihood is 0 for loc > min(y). Its mode is inside (shape 1.8), so
    the mode search does not meet the edge; a fresh user's racing chain drew loc above min(y) in 69 of 500
    warmup draws and in its first posterior draw, without a warning. The set-up sees the observed value
    move under a bounded support: every chain samples by the exact step, with a warning naming the site.
    The same ``obs=y - loc`` under a Normal (support real) is left to race (NumPy float64, keyword data)."""
    rng = np.random.default_rng(21)
    y = 3.0 + 1.5 * rng.weibull(1.8, size=3_000)
    with pytest.warns(UserWarning, match=r"observed value of site 'y' changes with the latent sites.*Positive"):
        state = RacingMH(_shifted_weibull).init(jax.random.PRNGKey(0), 10, None, (), {"y": y})
    assert bool(state.support_boundary) and bool(state.exact_mode)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="RacingMH: .* exact MH step")
        state = RacingMH(_shifted_normal).init(jax.random.PRNGKey(0), 10, None, (), {"y": y})
    assert not bool(state.support_boundary) and not bool(state.exact_mode)


def test_a_kinked_likelihood_is_sampled_by_the_exact_step():
    """A Laplace (L1) regression: automatic differentiation gives every datum a Hessian of 0, so the Taylor
    proxy is linear and its residuals sit on the few data near the kink; a fresh user's run returned
    posterior sds 5x NUTS's with R-hat below 1.05.  The init's curvature check (second differences
    against the proxy's Hessian) sends the chain to the exact MH step with a warning naming the kink, and
    the sds are those of the L1 posterior, about b / sqrt(N) (NumPy float64, keyword data)."""
    rng = np.random.default_rng(0)
    n = 10_000
    X = rng.normal(size=(n, 2))
    y = 0.7 + X @ np.array([0.5, -0.5]) + 1.5 * rng.laplace(size=n)
    mcmc = MCMC(RacingMH(_l1_regression), num_warmup=300, num_samples=2000, progress_bar=False)
    with pytest.warns(UserWarning, match="not twice differentiable") as caught:
        mcmc.run(jax.random.PRNGKey(0), X, y=y)
    assert bool(mcmc.last_state.exact_mode) and np.isinf(float(mcmc.last_state.residual_spread_ratio))
    # the start check's Newton measure never settles at a kink: its warning says so instead of advising more
    # Newton steps (the advice two fresh users followed in vain)
    start = [str(w.message) for w in caught if "not a mode" in str(w.message)]
    assert start and all("also found kinked" in m and "Raise map_steps or newton_steps" not in m for m in start), start
    s = mcmc.get_samples()
    sds = np.r_[np.std(s["mu"]), np.std(s["beta"], 0)]
    assert np.all(np.abs(sds / (1.5 / np.sqrt(n)) - 1.0) < 0.3), sds
