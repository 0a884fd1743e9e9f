"""What users pass to the NumPyro kernels: array types, containers, x64, enumerated and
unsupported sites, data the kernels cannot index, deterministic sites, ArviZ.

Each test is a regression test for a user-reported failure; MCMC runs are shared through
module-scoped fixtures to keep the file fast (compilation dominates).
"""


import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pandas as pd
import pytest
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC, Predictive
from numpyro.infer.util import constrain_fn

from subsample_mcmc import ModelSelection, RacingGibbs, RacingMH
from subsample_mcmc.numpyro import ModelSubsampler

N, P = 2000, 2
PRIOR_SD = 5.0
_rng = np.random.default_rng(0)
X64 = _rng.normal(size=(N, P))
Y64 = X64 @ np.array([0.5, -1.0]) + _rng.normal(size=N)
X32, Y32 = X64.astype(np.float32), Y64.astype(np.float32)


def _analytic_posterior(x, y, noise=1.0):
    """Conjugate posterior of w in y ~ N(x w, noise^2), w ~ N(0, PRIOR_SD^2 I)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    prec = x.T @ x / noise**2 + np.eye(x.shape[1]) / PRIOR_SD**2
    cov = np.linalg.inv(prec)
    return cov @ x.T @ y / noise**2, np.sqrt(np.diag(cov))


def _assert_posterior_mean(mcmc, site, mean, sd, z_max=5.0):
    """Posterior mean within z_max Monte Carlo standard errors (ESS-based) of `mean`."""
    draws = np.asarray(mcmc.get_samples(group_by_chain=True)[site], np.float64)
    ess = np.maximum(np.asarray(effective_sample_size(draws)), 1.0)
    mcse = draws.std(axis=(0, 1)) / np.sqrt(ess)
    z = np.abs(draws.mean(axis=(0, 1)) - mean) / mcse
    assert np.all(z < z_max), (z, draws.mean(axis=(0, 1)), mean)
    # the sd's relative Monte Carlo error is about 1/sqrt(2 ESS) (Gaussian draws)
    tol = np.maximum(0.15, z_max / np.sqrt(2.0 * ess))
    assert np.all(np.abs(draws.std(axis=(0, 1)) / sd - 1) < tol), (draws.std(axis=(0, 1)), sd, ess)


# --------------------------------------------------------------------------- models
def linreg(x, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, PRIOR_SD).expand([x.shape[1]]).to_event(1))
    numpyro.deterministic("w_sum", w.sum())  # outside the data plate
    with numpyro.plate("data", x.shape[0]):
        mu = numpyro.deterministic("mu", x @ w)  # inside the data plate: [N] per draw
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def list_model(x, y=None):
    x = jnp.asarray(x)
    w = numpyro.sample("w", dist.Normal(0.0, PRIOR_SD).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w, 1.0), obs=None if y is None else jnp.asarray(y))


def dict_model(data):
    x = data["x"]
    w = numpyro.sample("w", dist.Normal(0.0, PRIOR_SD).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w, 1.0), obs=data.get("y"))


def nested_model(*, data, noise):
    x = data["covariates"]["x"]
    w = numpyro.sample("w", dist.Normal(0.0, PRIOR_SD).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w, noise), obs=data["y"])


def plate_indexed_model(x, y=None):
    """Indexes its data with the plate's indices itself (runs unchanged with NUTS/HMCECS)."""
    w = numpyro.sample("w", dist.Normal(0.0, PRIOR_SD).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("data", x.shape[0]) as idx:
        numpyro.sample("y", dist.Normal(x[idx] @ w, 1.0), obs=None if y is None else y[idx])


# ---------------------------------------------------------------- 1. input types
INPUTS = {
    "numpy_float64": (linreg, (X64, Y64), {}),
    "numpy_float32": (linreg, (X32, Y32), {}),
    "pandas_values": (linreg, (pd.DataFrame(X64).values, pd.Series(Y64).values), {}),
    "keywords_numpy": (linreg, (), {"x": X64, "y": Y64}),
    "python_lists": (list_model, (X64.tolist(), Y64.tolist()), {}),
    "dict_positional": (dict_model, ({"x": X32, "y": jnp.asarray(Y64)},), {}),
    "nested_dict_keyword_and_scalar": (
        nested_model, (), {"data": {"covariates": {"x": jnp.asarray(X64)}, "y": Y64}, "noise": 1.0}),
    # indexed twice before (arguments by the kernels, then by the model): silently wrong data
    "model_indexes_with_plate_indices": (plate_indexed_model, (jnp.asarray(X64), jnp.asarray(Y64)), {}),
    "model_indexes_with_plate_indices_numpy": (plate_indexed_model, (X64, Y64), {}),
}


@pytest.mark.parametrize("case", list(INPUTS))
def test_per_datum_arguments_are_indexed_under_jit(case):
    """Per-datum arrays of every supported kind are indexed at traced indices: the jitted
    per-datum log-likelihood equals the closed form at those indices, the prior is untouched."""
    model, args, kwargs = INPUTS[case]
    ms = ModelSubsampler(model, args, kwargs)
    w = jnp.array([0.3, -0.7])
    idx = jnp.array([5, 17, N - 1, 3, 5])
    ll = jax.jit(lambda w, idx: ms.log_likelihood({"w": w}, idx, args, kwargs))(w, idx)
    resid = Y64[np.asarray(idx)] - X64[np.asarray(idx)] @ np.asarray(w, np.float64)
    np.testing.assert_allclose(np.asarray(ll), -0.5 * resid**2 - 0.5 * np.log(2 * np.pi), rtol=1e-4)
    lp = jax.jit(lambda w: ms.log_prior({"w": w}, args, kwargs))(w)
    np.testing.assert_allclose(float(lp), float(dist.Normal(0.0, PRIOR_SD).log_prob(w).sum()), rtol=1e-5)


def test_pandas_objects_are_refused_with_a_hint():
    with pytest.raises(ValueError, match=r"argument 'x'.*pandas.*to_numpy"):
        MCMC(RacingMH(linreg), num_warmup=1, num_samples=1, progress_bar=False).run(
            jax.random.PRNGKey(0), x=pd.DataFrame(X64), y=Y64)
    # a whole table passed as one argument: the message names the columns route
    with pytest.raises(ValueError, match=r"argument 'x'.*DataFrame.*columns the model reads.*x\['x'\]"):
        MCMC(RacingMH(linreg), num_warmup=1, num_samples=1, progress_bar=False).run(
            jax.random.PRNGKey(0), pd.DataFrame(X64), Y64)
    with pytest.raises(ValueError, match=r"argument 'y'.*Series.*to_numpy\(\) \(or .values\) instead;"):
        MCMC(RacingMH(linreg), num_warmup=1, num_samples=1, progress_bar=False).run(
            jax.random.PRNGKey(0), X64, pd.Series(Y64))


def test_tables_jax_cannot_read_are_named_when_the_model_fails_on_them():
    """A fresh user's pandas inputs that broke the model's first run with raw JAX or pandas errors (NUTS
    raises the same): DataFrame.values of float and bool columns (dtype object), a DataFrame the model
    slices, and the .values of a nullable Int64 column (a pandas IntegerArray, whose hint was '.values')."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.normal(size=300), "flag": rng.random(300) < 0.5})
    yy = rng.normal(size=300)

    def sliced(x, y=None):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(x[:, 0] * w[0] + x[:, 1] * w[1], 1.0), obs=y)

    def run(model, *args, **kwargs):
        MCMC(RacingMH(model), num_warmup=1, num_samples=1, progress_bar=False).run(jax.random.PRNGKey(0), *args,
                                                                                   **kwargs)

    with pytest.raises(ValueError, match=r"fails on its data.*argument 'x' is a NumPy array of dtype object.*"
                                         r"to_numpy\(dtype=float\)"):
        run(linreg, df.values, y=yy)
    with pytest.raises(ValueError, match=r"fails on its data.*argument 'x' is a pandas DataFrame.*to_numpy"):
        run(sliced, df.astype(float), y=yy)

    def counts(c):
        lam = numpyro.sample("lam", dist.Gamma(2.0, 1.0))
        with numpyro.plate("data", c.shape[0]):
            numpyro.sample("c", dist.Poisson(lam), obs=c)

    with pytest.raises(ValueError, match=r"argument 'c' is a pandas IntegerArray.*to_numpy\(dtype='int64'\)"):
        run(counts, pd.array(rng.poisson(3.0, size=300), dtype="Int64"))


@pytest.fixture(scope="module")
def mh_numpy():
    """The reported failure: NumPy float64 arrays, positional, default settings."""
    mcmc = MCMC(RacingMH(linreg), num_warmup=200, num_samples=400, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), X64, Y64)
    return mcmc


def test_numpy_inputs_racing_mh_matches_analytic_posterior(mh_numpy):
    mean, sd = _analytic_posterior(X64, Y64)
    _assert_posterior_mean(mh_numpy, "w", mean, sd)
    # posterior predictive with y=None on NumPy inputs
    s = mh_numpy.get_samples()
    pred = Predictive(linreg, s)(jax.random.PRNGKey(2), X64)
    assert pred["y"].shape == (400, N)
    # 6. deterministic sites: inside the data plate with the full plate shape, as NUTS
    assert s["mu"].shape == (400, N) and s["w_sum"].shape == (400,)
    np.testing.assert_allclose(np.asarray(s["mu"]), np.asarray(s["w"]) @ X64.T.astype(np.float32),
                               rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def mh_dict_kwargs_sequential():
    """Per-datum float32 NumPy arrays in a nested dict keyword argument, a python scalar,
    two sequential chains (started from init_params to skip the mode search's compilation:
    the proxy of this Gaussian likelihood is exact wherever it is expanded)."""
    mcmc = MCMC(RacingMH(nested_model), num_warmup=200, num_samples=300, num_chains=2,
                chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(3), data={"covariates": {"x": X32}, "y": Y32}, noise=1.0,
             init_params={"w": jnp.array([[0.0, 0.0], [1.0, -2.0]])})
    return mcmc


def test_dict_keyword_inputs_racing_mh_matches_analytic_posterior(mh_dict_kwargs_sequential):
    mean, sd = _analytic_posterior(X32, Y32)
    _assert_posterior_mean(mh_dict_kwargs_sequential, "w", mean, sd)


LOCS = jnp.array([0.0, 0.1, 0.2])


def gibbs_model(y):
    k = numpyro.sample("k", dist.Categorical(probs=jnp.ones(3) / 3))
    with numpyro.plate("data", y.shape[0]):
        loc = numpyro.deterministic("loc", LOCS[k] + jnp.zeros(y.shape[0]))
        numpyro.sample("y", dist.Normal(loc, 1.0), obs=y)


Y_GIBBS = np.asarray(jax.random.normal(jax.random.PRNGKey(5), (N,)), np.float64) + 0.1


@pytest.fixture(scope="module")
def gibbs_numpy():
    """NumPy float64 data, two vectorized chains."""
    mcmc = MCMC(RacingGibbs(gibbs_model), num_warmup=0, num_samples=200, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(4), Y_GIBBS)
    return mcmc


def test_numpy_inputs_racing_gibbs_follow_the_exact_posterior(gibbs_numpy):
    lp = np.array([-0.5 * np.sum((Y_GIBBS - float(m)) ** 2) for m in LOCS])
    p = np.exp(lp - lp.max())
    p /= p.sum()
    k = np.asarray(gibbs_numpy.get_samples()["k"])
    freq = np.bincount(k, minlength=3) / k.size
    assert 0.5 * np.abs(freq - p).sum() < 0.05 + 0.1  # delta + Monte Carlo noise of 400 draws
    assert gibbs_numpy.get_samples(group_by_chain=True)["k"].shape == (2, 200)
    # 6. a deterministic site inside the data plate, without an inner kernel
    g = gibbs_numpy.get_samples()
    assert g["loc"].shape == (400, N)
    np.testing.assert_allclose(np.asarray(g["loc"][:, 0]), np.asarray(LOCS[g["k"]]))


# ---------------------------------------------------------- 1. and 2.: x64, parallel


# ------------------------------------------------------- 3. enumerated / local sites
def enumerated_mixture(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0).expand([2]).to_event(1))
    with numpyro.plate("data", y.shape[0]):
        z = numpyro.sample("z", dist.Categorical(jnp.array([0.5, 0.5])), infer={"enumerate": "parallel"})
        numpyro.sample("y", dist.Normal(mu[z], 1.0), obs=y)


def local_latent(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    with numpyro.plate("data", y.shape[0]):
        u = numpyro.sample("u", dist.Normal(mu, 1.0))
        numpyro.sample("y", dist.Normal(u, 1.0), obs=y)


@pytest.mark.parametrize("make_kernel", [
    lambda m: RacingMH(m),
    lambda m: RacingGibbs(m, inner_kernel=RacingMH(m)),
], ids=["RacingMH", "RacingGibbs"])
def test_enumerated_local_site_is_refused_by_name(make_kernel):
    """Silently wrong before: the enumerated site was dropped and the likelihood evaluated
    at one random assignment."""
    with pytest.raises(ValueError, match=r"(?s)'z'.*enumerat.*MixtureSameFamily.*NUTS"):
        MCMC(make_kernel(enumerated_mixture), num_warmup=1, num_samples=1, progress_bar=False).run(
            jax.random.PRNGKey(0), jnp.asarray(Y64))


def test_local_latent_site_error_names_site_and_alternative():
    with pytest.raises(ValueError, match=r"(?s)'u'.*data plate.*NUTS"):
        MCMC(RacingMH(local_latent), num_warmup=1, num_samples=1, progress_bar=False).run(
            jax.random.PRNGKey(0), jnp.asarray(Y64))


def test_obs_mask_imputation_is_refused_with_the_direct_fixes():
    """obs_mask= imputes the masked observations as a latent site inside the plate: refused, naming
    the fixes that keep the model (drop the rows, or handlers.mask), not only the local-latent ones."""

    def masked(y, mask):
        mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SD))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y, obs_mask=mask)

    mask = np.ones(N, bool)
    mask[3] = False
    with pytest.raises(ValueError, match=r"sites \['y_unobserved'\] are the missing observations that obs_mask= "
                                         r"imputes.*Drop the rows.*numpyro.handlers.mask"):
        RacingMH(masked).init(jax.random.PRNGKey(0), 10, None, (Y64, mask), {})


# ------------------------------------------------- 4. data the kernels cannot index
Y_GLOBAL = jnp.asarray(Y64)


def closed_over(x):
    w = numpyro.sample("w", dist.Normal(0.0, PRIOR_SD).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w, 1.0), obs=Y_GLOBAL)


def all_closed_over():
    mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SD))
    with numpyro.plate("data", N):
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=Y_GLOBAL)


class Data:
    """Not a pytree: the kernels cannot see the arrays inside."""

    def __init__(self, x, y):
        self.x, self.y = x, y


def object_model(d):
    w = numpyro.sample("w", dist.Normal(0.0, PRIOR_SD).expand([d.x.shape[1]]).to_event(1))
    with numpyro.plate("data", d.x.shape[0]):
        numpyro.sample("y", dist.Normal(d.x @ w, 1.0), obs=d.y)


@pytest.mark.parametrize("model,args", [
    (closed_over, (X64,)), (all_closed_over, ()), (object_model, (Data(X64, Y64),)),
], ids=["closed_over_y", "all_closed_over", "inside_an_object"])
def test_unindexable_data_is_detected_at_setup(model, args):
    with pytest.raises(ValueError, match=r"(?s)'y'.*argument.*leading dimension.*numpyro.subsample"):
        MCMC(RacingMH(model), num_warmup=1, num_samples=1, progress_bar=False).run(jax.random.PRNGKey(0), *args)


def two_plates(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SD))
    with numpyro.plate("a", y.shape[0]):
        numpyro.sample("ya", dist.Normal(mu, 1.0), obs=y)
    with numpyro.plate("b", y.shape[0]):
        numpyro.sample("yb", dist.Normal(mu, 2.0), obs=y)


def test_observed_sites_of_another_plate_are_read_on_all_data():
    """data_plate='a': plate 'b' is not subsampled, yet it reads the argument the kernels
    index for 'a'.  Before, its term was silently evaluated on one datum."""
    y = jnp.asarray(Y64)
    ms = ModelSubsampler(two_plates, (y,), {}, data_plate="a")
    lp = jax.jit(lambda mu: ms.log_prior({"mu": mu}, (y,), {}))(0.3)
    ref = dist.Normal(0.0, PRIOR_SD).log_prob(0.3) + dist.Normal(0.3, 2.0).log_prob(y).sum()
    np.testing.assert_allclose(float(lp), float(ref), rtol=1e-5)


# --------------------------------------------- 5. whole-data statistics in the model
def standardising(x, y):
    x = (x - x.mean(0)) / x.std(0)
    w = numpyro.sample("w", dist.Normal(0.0, PRIOR_SD).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w, 1.0), obs=y)


def empirical_prior(x, y):
    sigma = numpyro.sample("sigma", dist.HalfNormal(jnp.std(y)))  # prior scale from the data
    w = numpyro.sample("w", dist.Normal(0.0, PRIOR_SD).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w, sigma), obs=y)


@pytest.mark.parametrize("model,match", [
    (standardising, r"(?s)'y'.*other data points.*outside the model"),
    (empirical_prior, r"(?s)\['sigma'.*depends on the data.*outside the model"),
])
@pytest.mark.parametrize("kernel", ["RacingMH", "RacingGibbs"])
def test_whole_data_statistics_in_the_model_are_detected(model, match, kernel):
    k = RacingMH(model) if kernel == "RacingMH" else RacingGibbs(model, inner_kernel=RacingMH(model))
    with pytest.raises(ValueError, match=match):
        MCMC(k, num_warmup=1, num_samples=1, progress_bar=False).run(
            jax.random.PRNGKey(0), jnp.asarray(X64), jnp.asarray(Y64))


# ------------------------------------------------- 6. deterministic sites in the plate
def test_deterministic_sites_as_nuts_returns_them():
    """postprocess_fn returns the same sites, shapes and values as NUTS's (constrain_fn with
    return_deterministic=True runs the model on all data)."""
    args = (jnp.asarray(X64), jnp.asarray(Y64))
    kernel = RacingMH(linreg)
    w = jnp.array([0.3, -0.7])
    ours = kernel.postprocess_fn(args, {})({"w": w})
    ref = constrain_fn(linreg, args, {}, {"w": w}, return_deterministic=True)
    assert set(ours) == set(ref) == {"w", "w_sum", "mu"}
    for k in ref:
        assert ours[k].shape == ref[k].shape
        np.testing.assert_allclose(np.asarray(ours[k]), np.asarray(ref[k]), rtol=1e-6)


# ------------------------------------------------------------- 7. ArviZ, HMCECS-style
def ecs_model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SD))
    with numpyro.plate("data", y.shape[0], subsample_size=100):
        batch = numpyro.subsample(y, event_dim=0)
        numpyro.sample("y", dist.Normal(mu, 2.0), obs=batch)


def test_arviz_pointwise_log_likelihood_of_hmcecs_style_models():
    y = np.asarray(Y64)  # NumPy data through numpyro.subsample
    mcmc = MCMC(RacingMH(ecs_model), num_warmup=50, num_samples=50, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(6), y, init_params={"mu": jnp.array(0.0)})
    idata = az.from_numpyro(mcmc)  # default log_likelihood=True
    ll = idata.log_likelihood["y"]
    assert ll.shape == (1, 50, N)
    mu = np.asarray(idata.posterior["mu"])[0, :, None]
    ref = -0.5 * ((y[None] - mu) / 2.0) ** 2 - np.log(2.0) - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(np.asarray(ll)[0], ref, rtol=1e-4, atol=1e-4)
    assert idata.observed_data["y"].shape == (N,)
    full = numpyro.infer.log_likelihood(mcmc.sampler.model, mcmc.get_samples(), y)["y"]
    assert full.shape == (50, N)


def _nan_model(x, y=None):
    a = numpyro.sample("a", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 5.0))
    with numpyro.plate("obs", x.shape[0]):
        numpyro.sample("y", dist.Normal(a + b * x, 1.0), obs=y)


def test_missing_data_are_named_with_argument_and_index():
    """A NaN in a covariate (NumPyro's validation on: its own error has no site or index)
    or in the observations: the error names the argument and the first NaN row."""
    x, y = X64[:, 0].copy(), Y64.copy()
    x[321] = np.nan
    with numpyro.validation_enabled(True), pytest.raises(ValueError, match=r"'x' at index 321"):
        MCMC(RacingMH(_nan_model), num_warmup=5, num_samples=5, progress_bar=False).run(
            jax.random.PRNGKey(0), x, y)
    x, y = X64[:, 0].copy(), Y64.copy()
    y[77] = np.nan
    with pytest.raises(ValueError, match=r"'y' is NaN at index 77"):
        MCMC(RacingMH(_nan_model, control_variate=None), num_warmup=5, num_samples=5, progress_bar=False).run(
            jax.random.PRNGKey(0), x, y, init_params={"a": jnp.zeros(()), "b": jnp.zeros(())})


def test_data_of_different_lengths_are_named_before_sampling():
    """``x`` with N rows and ``y`` with fewer (a filtered column): NumPyro's own failure is a
    broadcasting error inside the likelihood naming neither; the kernels name the observed site,
    the plate and each argument's length, for RacingMH, RacingGibbs and ModelSelection."""
    x, y = X64[:, 0], Y64[:-5]
    match = r"observed site 'y' holds %d values along the data plate 'obs', whose size is %d.*'y': %d.*'x': %d" % (
        y.shape[0], x.shape[0], y.shape[0], x.shape[0])
    for kernel in (RacingMH(_nan_model), RacingGibbs(_nan_model, inner_kernel=RacingMH(_nan_model)),
                   ModelSelection([_nan_model, _nan_model])):
        with pytest.raises(ValueError, match=match):
            MCMC(kernel, num_warmup=5, num_samples=5, progress_bar=False).run(jax.random.PRNGKey(0), x, y)


def test_column_vector_observations_are_named_with_their_shapes():
    """``y`` of shape (N, 1) against a distribution of batch shape (N,): its log-density broadcasts to
    (N, N) and each datum's term sums over all of them.  The kernels say so, with the shapes and the fix
    (``y.ravel()``), instead of blaming whole-data statistics in the model; ``y.ravel()`` then runs."""
    x, y = X64[:, 0], Y64
    for kernel in (RacingMH(_nan_model), RacingGibbs(_nan_model, inner_kernel=RacingMH(_nan_model))):
        with pytest.raises(ValueError, match=r"observed site 'y'.*shape \(\d+, 1\).*batch shape \(\d+,\).*y\.ravel\(\)"):
            MCMC(kernel, num_warmup=5, num_samples=5, progress_bar=False).run(jax.random.PRNGKey(0), x, y[:, None])
    mcmc = MCMC(RacingMH(_nan_model), num_warmup=5, num_samples=5, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), x, y[:, None].ravel())
    assert np.all(np.isfinite(mcmc.get_samples()["a"]))


def test_options_that_would_fail_late_are_refused_when_the_kernel_is_built():
    """A race whose bound needs the rewards' range (``ebs``, ``lil_ucb``) without ``reward_range`` failed
    only inside ``run`` (RacingGibbs and ModelSelection take no range at all); a non-bool flag such as
    ``exact_when_cheaper="no"`` read as true.  Both are refused at construction, naming the option."""
    for method in ("ebs", "lil_ucb"):
        with pytest.raises(ValueError, match=rf"method='{method}' needs the range.*RacingMH\(\.\.\., method='{method}', "
                                             r"reward_range=C\)"):
            RacingMH(_nan_model, method=method)
        RacingMH(_nan_model, method=method, reward_range=1.0)  # with a range it is built
        for build in (lambda: RacingGibbs(_nan_model, method=method),
                      lambda: ModelSelection([_nan_model, _nan_model], method=method)):
            with pytest.raises(ValueError, match=rf"method='{method}' needs the range.*takes no reward_range"):
                build()
    for flag in ("exact_when_cheaper", "adapt_step_size"):
        with pytest.raises(TypeError, match=rf"{flag} must be True or False, got 'no'"):
            RacingMH(_nan_model, **{flag: "no"})
        RacingMH(_nan_model, **{flag: np.bool_(False)})


@pytest.mark.parametrize("build", [
    lambda **kw: RacingMH(_nan_model, **kw), lambda **kw: RacingGibbs(_nan_model, **kw),
    lambda **kw: ModelSelection([_nan_model, _nan_model], **kw),
], ids=["RacingMH", "RacingGibbs", "ModelSelection"])
def test_race_options_are_checked_when_each_kernel_is_built(build):
    """What a fresh user found: ``ModelSelection(first_batch=2.5)`` ran (truncated to 2) and
    ``variance="bogus"`` was taken by the constructor.  Every kernel refuses them there, naming the
    argument; NumPy integers and integral floats are taken as the integer."""
    for bad in (2.5, 1, 0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"first_batch must be an integer >= 2.*e\.g\. first_batch=50"):
            build(first_batch=bad)
    for bad in ("50", True, np.ones(2)):
        with pytest.raises(TypeError, match="first_batch must be an integer >= 2"):
            build(first_batch=bad)
    with pytest.raises(ValueError, match=r"variance must be one of \('pairwise', 'marginal'\), got 'bogus'"):
        build(variance="bogus")
    for ok in (np.int64(40), 40.0):
        options = build(first_batch=ok).race_options
        assert options["first_batch"] == 40 and type(options["first_batch"]) is int
    assert build(variance="marginal").race_options["variance"] == "marginal"


def lagged_inside(y):
    """An autoregression that slices its series inside the model: a plate of N - 1 points."""
    mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SD))
    rho = numpyro.sample("rho", dist.Normal(0.0, 0.5))
    with numpyro.plate("data", y.shape[0] - 1):
        numpyro.sample("y", dist.Normal(mu + rho * y[:-1], 1.0), obs=y[1:])


def test_lags_sliced_inside_the_model_are_named_with_the_fix():
    """A fresh user's AR model (``obs=y[1:]`` against ``y[:-1]``) was refused with a message about
    global variables only: the message names in-model slicing and how to pass the lags instead."""
    with pytest.raises(ValueError, match=r"(?s)sliced inside the model.*y_lag=y\[:-1\], y_next=y\[1:\]"):
        MCMC(RacingMH(lagged_inside), num_warmup=1, num_samples=1, progress_bar=False).run(
            jax.random.PRNGKey(0), Y64)


def test_compiled_programs_take_the_data_as_arguments_not_constants():
    """``jit_with_data`` passes the array leaves of the model's arguments to the compiled
    program (a closure would embed them as constants: seconds of tracing and compilation
    at N ~ 1e5); Python numbers and strings stay static (usable as shapes)."""
    from subsample_mcmc.numpyro.model import jit_with_data

    def fn(scale, args, kwargs):
        x, k = args
        assert isinstance(k, int) and kwargs["tag"] == "a"  # static leaves reach fn as they are
        return scale * jnp.sum(x[:, :k]) + kwargs["w"].sum()

    sizes = []
    for n in (1_000, 200_000):
        x = np.random.default_rng(0).normal(size=(n, 3))
        g = jit_with_data(fn, (x, 2), {"tag": "a", "w": np.ones(n)})
        np.testing.assert_allclose(float(g(2.0)), 2 * x[:, :2].sum() + n, rtol=1e-4)
        sizes.append(len(g.lower(2.0).as_text()))
    assert sizes[1] < 1.2 * sizes[0]  # the program does not grow with the data


def weighted_location(y, w):
    """y_n ~ N(mu, 1) with per-datum weights w_n on the log-likelihood (``handlers.scale``)."""
    mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SD))
    with numpyro.plate("data", y.shape[0]), numpyro.handlers.scale(scale=w):
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def test_per_datum_weights_from_handlers_scale_weight_the_likelihood():
    """``handlers.scale`` inside the data plate (a weighted likelihood, sum_n w_n log p(y_n | mu)):
    RacingMH dropped the weights and sampled the unweighted posterior, silently (a fresh user's
    weighted Poisson regression: the intercept's mean 46 MCSE off NUTS's on the weighted model,
    in agreement with the unweighted one).  The per-datum log-likelihoods carry the weights, and
    the chain follows the closed-form weighted posterior, on NumPy inputs."""
    from scipy import stats

    rng = np.random.default_rng(5)
    y = rng.normal(0.3, 1.0, size=N)
    w = np.where(y > 0.3, 2.0, 0.5)  # weights that move the posterior
    def subsampled(y, w):  # the plate's own subsample_size, its data and weights through numpyro.subsample
        mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SD))
        with numpyro.plate("data", y.shape[0], subsample_size=100):
            with numpyro.handlers.scale(scale=numpyro.subsample(w, event_dim=0)):
                numpyro.sample("y", dist.Normal(mu, 1.0), obs=numpyro.subsample(y, event_dim=0))

    def constant(y, w):  # one weight, a plate of a constant size (numpyro scales it by N / m on a subset)
        mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SD))
        with numpyro.plate("data", N), numpyro.handlers.scale(scale=2.0):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    idx = [0, 7, N - 1]
    for model, weights in ((weighted_location, w[idx]), (subsampled, w[idx]), (constant, 2.0)):
        ll = ModelSubsampler(model, (y, w)).log_likelihood({"mu": jnp.asarray(0.1)}, jnp.asarray(idx), (y, w))
        np.testing.assert_allclose(np.asarray(ll), weights * stats.norm.logpdf(y[idx], 0.1, 1.0), rtol=1e-5)
    prec = 1.0 / PRIOR_SD**2 + w.sum()
    mean, sd = (w * y).sum() / prec, prec**-0.5
    assert abs(mean - y.sum() / (1.0 / PRIOR_SD**2 + N)) > 20 * sd  # the unweighted posterior is far off
    mcmc = MCMC(RacingMH(weighted_location), num_warmup=300, num_samples=1000, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y, w)
    _assert_posterior_mean(mcmc, "mu", mean, sd)


def test_improper_priors_are_refused_by_site_name():
    """An ImproperUniform prior (flat on the real line, as NUTS users write it) raised a bare
    NotImplementedError from NumPyro's sampler inside the kernel's set-up; it is refused naming the
    sites (plain and expanded) and the fix."""

    def flat(x, y):
        a = numpyro.sample("a", dist.ImproperUniform(dist.constraints.real, (), ()))
        b = numpyro.sample("b", dist.ImproperUniform(dist.constraints.positive, (), ()).expand([2]).to_event(1))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(a + b[0] * x, b[1]), obs=y)

    def proper(x, y):
        a = numpyro.sample("a", dist.Normal(0.0, 10.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(a, 1.0), obs=y)

    for kernel in (RacingMH(flat), ModelSelection([proper, flat])):
        with pytest.raises(ValueError, match=r"sites \['a', 'b'\] have improper priors.*dist.Normal\(0, 10\)"):
            kernel.init(jax.random.PRNGKey(0), 10, None, (X64[:, 0], Y64), {})


def test_latent_delta_sites_are_refused_as_nuts_refuses_them():
    """A latent ``dist.Delta`` site (a point mass): RacingMH's chain froze at its start, every draw
    equal, with no error (a fresh user's trial: a = b = c = 0 in 1,000 draws of a regression whose
    posterior has a = 0.49, b = 1.51), and a constant Delta gave zero-variance draws at the mode
    with a warning about Newton steps.  Refused at set-up, naming numpyro.deterministic."""

    def model(x, y, tied=True):
        a = numpyro.sample("a", dist.Normal(0.0, PRIOR_SD))
        b = numpyro.sample("b", dist.Normal(0.0, PRIOR_SD))
        c = numpyro.sample("c", dist.Delta(2.0 * b) if tied else dist.Delta(3.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(a + 0.5 * c * x, 1.0), obs=y)

    for tied in (True, False):
        with pytest.raises(ValueError, match=r"latent sites \['c'\] have a Delta distribution.*numpyro.deterministic"):
            RacingMH(model).init(jax.random.PRNGKey(0), 10, None, (X64[:, 0], Y64), {"tied": tied})


def test_log_density_matches_numpyro_potential_with_scaled_latent_sites():
    """The kernels' unconstrained log density (prior, log-Jacobian, full-data likelihood) equals
    NumPyro's HMC potential, also with ``handlers.scale`` around latent sites: NumPyro scales a site's
    log-Jacobian with its log-density.  Left unscaled, RacingMH (and ``method="exact"``) sampled
    another target than NUTS (a fresh user's whole-model ``scale(0.01)`` regression: s 4-5 MCSE
    above NUTS's on every seed)."""
    from numpyro.infer.util import potential_energy

    def tempered(x, y):
        with numpyro.handlers.scale(scale=0.01):
            a = numpyro.sample("a", dist.Normal(0.0, PRIOR_SD))
            s = numpyro.sample("s", dist.HalfNormal(3.0))
            with numpyro.plate("data", x.shape[0]):
                numpyro.sample("y", dist.Normal(a * x, s), obs=y)

    x, y = X64[:, 0], Y64
    ms = ModelSubsampler(tempered, (x, y))
    z = {"a": jnp.asarray(0.3), "s": jnp.asarray(0.2)}  # unconstrained: s = exp(0.2)
    ours = (ms.log_prior(ms.constrain(z), (x, y)) + ms.log_abs_det_jacobian(z)
            + jnp.sum(ms.log_likelihood(ms.constrain(z), jnp.arange(N), (x, y))))
    np.testing.assert_allclose(float(ours), -float(potential_energy(tempered, (x, y), {}, z)), rtol=1e-5)
