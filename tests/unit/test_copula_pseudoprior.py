"""The copula pseudoprior (Yeo-Johnson marginals, Gaussian copula): the transform against SciPy, draws
and density consistent (an importance estimate of a known normalising constant), and a better fit than
the Gaussian on a skewed posterior."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from subsample_mcmc.kernels.product_space import (
    copula_pseudoprior, pseudoprior, pseudoprior_draw, pseudoprior_log_density, yeo_johnson, yeo_johnson_inverse,
)


@pytest.mark.parametrize("lam", [0.0, 0.4, 1.0, 1.7, 2.0])
def test_yeo_johnson_matches_scipy_inverts_and_differentiates(lam):
    z = np.linspace(-6, 6, 121)
    v, log_d = yeo_johnson(jnp.asarray(z), jnp.asarray(lam))
    np.testing.assert_allclose(np.asarray(v), stats.yeojohnson(z, lam), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(yeo_johnson_inverse(v, jnp.asarray(lam))), z, rtol=1e-4, atol=1e-5)
    grad = jax.vmap(jax.grad(lambda t: yeo_johnson(t, jnp.asarray(lam))[0]))(jnp.asarray(z))
    np.testing.assert_allclose(np.asarray(log_d), np.log(np.asarray(grad)), rtol=1e-4, atol=1e-5)


def _log_gamma_draws(n, seed):
    """theta_i = log X_i, X_i ~ Gamma(shape_i) independent: left-skewed log-Gamma marginals with a
    known density."""
    rng = np.random.default_rng(seed)
    shapes = np.array([0.7, 2.0, 5.0])
    return np.log(rng.gamma(shapes, size=(n, 3))), shapes


def _log_gamma_logpdf(theta, shapes):
    return jnp.sum(shapes * theta - jnp.exp(theta) - jax.scipy.special.gammaln(shapes), -1)


def test_copula_draws_and_density_agree_and_fit_a_skewed_posterior():
    draws, shapes = _log_gamma_draws(2000, 0)
    g = copula_pseudoprior(jnp.asarray(draws))
    assert np.all((np.asarray(g.lam) >= 0) & (np.asarray(g.lam) <= 2))
    key = jax.random.PRNGKey(0)
    theta = jax.vmap(lambda k: pseudoprior_draw(k, g))(jax.random.split(key, 20_000))
    log_w = _log_gamma_logpdf(theta, shapes) - jax.vmap(lambda t: pseudoprior_log_density(t, g))(theta)
    # E_g[p / g] = 1 for the normalised target: draws and density describe the same distribution
    w = np.exp(np.asarray(log_w, np.float64))
    assert abs(w.mean() - 1) < 4 * w.std() / np.sqrt(len(w)) + 0.01, (w.mean(), w.std())
    # a Gaussian with the draws' mean and covariance fits the skewed marginals far worse
    gauss = pseudoprior(jnp.asarray(draws.mean(0)), jnp.asarray(np.cov(draws.T)))
    theta_g = jax.vmap(lambda k: pseudoprior_draw(k, gauss))(jax.random.split(key, 20_000))
    log_w_g = _log_gamma_logpdf(theta_g, shapes) - jax.vmap(lambda t: pseudoprior_log_density(t, gauss))(theta_g)
    assert float(jnp.std(log_w)) < 0.5 * float(jnp.std(log_w_g)), (jnp.std(log_w), jnp.std(log_w_g))




def test_a_pilot_nuts_cannot_fit_is_bounded_and_named():
    """A pilot on a ridge (y ~ Normal(a + b, 1): a + b pinned by the data, a - b only by the Normal(0, 30)
    priors, 2,000 times wider at N = 200) needs NUTS trees far deeper than its bound: the pilot stops at
    depth _PILOT_TREE_DEPTH (a float32 NegativeBinomial2 pilot once ran over ten minutes unbounded) and the
    warning names the trees at the bound and, in float32, x64 (NumPy float64 data, keyword arguments)."""
    import numpyro
    import numpyro.distributions as dist

    from subsample_mcmc import ModelSelection
    from subsample_mcmc.numpyro.selection import _PILOT_TREE_DEPTH

    def one(y=None):
        m = numpyro.sample("m", dist.Normal(0.0, 30.0))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(m, 1.0), obs=y)

    def ridge(y=None):
        a = numpyro.sample("a", dist.Normal(0.0, 30.0))
        b = numpyro.sample("b", dist.Normal(0.0, 30.0))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(a + b, 1.0), obs=y)

    y = np.random.default_rng(0).normal(1.0, 1.0, 200)
    kernel = ModelSelection([one, ridge], first_batch=10, pseudoprior="copula", pilot_draws=100)
    with pytest.warns(UserWarning, match=rf"pilot of model 'ridge' .* [1-9][0-9]* trees at its depth bound "
                                         rf"\({_PILOT_TREE_DEPTH}\).*jax_enable_x64"):
        state = kernel.init(jax.random.PRNGKey(0), 10, None, (), {"y": y})
    keys = jax.random.split(jax.random.PRNGKey(1), 2000)
    ridge_draws = jax.vmap(lambda k: pseudoprior_draw(k, state.pseudopriors[1]))(keys)
    assert np.all(np.isfinite(np.asarray(ridge_draws)))
