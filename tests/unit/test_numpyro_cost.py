"""How the kernels count cost (``num_likelihood_evals``), and composed kernels costing
O(points read): a Gibbs block's Taylor proxy is rebuilt only when its conditioning changes.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from subsample_mcmc import RacingGibbs, RacingMH

N = 4000
RNG = np.random.default_rng(11)
Y = RNG.normal(0.7, 1.0, N)  # a float64 NumPy array, as users pass
SCALES = np.array([0.5, 1.0, 2.0])


def normal_model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def scale_model(y):
    k = numpyro.sample("k", dist.Categorical(probs=jnp.ones(3) / 3))
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, jnp.asarray(SCALES)[k]), obs=y)


def _evals(kernel, model_args, steps=30):
    mcmc = MCMC(kernel, num_warmup=0, num_samples=steps, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), *model_args, extra_fields=("num_likelihood_evals",))
    return np.asarray(mcmc.get_extra_fields()["num_likelihood_evals"])


@pytest.mark.parametrize("control_variate", [None, "taylor"])
def test_exact_mh_reads_every_datum_once_per_step(control_variate):
    """``method="exact"`` is the exact MH step: both points at every datum on the first
    step, then one pass per step (the current sum cached); the proxy is not read."""
    kernel = RacingMH(normal_model, method="exact", control_variate=control_variate)
    evals = _evals(kernel, (Y,))
    assert evals[0] == 2 * N and np.all(evals[1:] == N)


def test_proxy_residuals_count_more_than_one_evaluation():
    """A Taylor residual l - h needs nested jvps: a race over residuals forced to read
    everything costs more than 2 N likelihood evaluations, and what it costs is
    calibrated, not guessed."""
    kernel = RacingMH(normal_model, first_batch=N, exact_when_cheaper=False)
    evals = _evals(kernel, (Y,))
    point = kernel._cost("point")
    assert point > 1.0
    assert np.all(evals == int(round(2 * N * point)))


@pytest.fixture(scope="module")
def gibbs_run():
    kernel = RacingGibbs(scale_model, inner_kernel=RacingMH(scale_model))
    mcmc = MCMC(kernel, num_warmup=150, num_samples=300, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(3), Y, extra_fields=("num_likelihood_evals",))
    return kernel, mcmc


def test_gibbs_with_racing_mh_posterior(gibbs_run):
    _, mcmc = gibbs_run
    s = mcmc.get_samples()
    assert np.mean(np.asarray(s["k"]) == 1) > 0.99  # scale 1 is the truth, N = 4000
    sd = 1.0 / np.sqrt(N)
    assert abs(float(np.mean(s["mu"])) - Y.mean()) < 5 * sd


def test_gibbs_refreshes_the_proxy_only_when_the_discrete_value_changes(gibbs_run):
    """Before: ``refresh`` rebuilt the proxy (a gradient and Hessian at all N data) every
    iteration, 1.7 N per step.  Now a step whose discrete draw is unchanged reads O(points
    read); a proxy is built once per discrete configuration, and each build is counted."""
    kernel, mcmc = gibbs_run
    evals = np.asarray(mcmc.get_extra_fields()["num_likelihood_evals"])
    k = np.asarray(mcmc.get_samples()["k"])
    refresh = kernel.inner_kernel.refresh_likelihood_evals
    assert refresh >= N  # a gradient and a Hessian per datum
    unchanged = np.concatenate([[True], k[1:] == k[:-1]])
    assert np.median(evals[unchanged]) < 0.5 * N
    assert np.sum(evals >= refresh) <= len(SCALES)


# -- a spread-out discrete posterior: the proxy cache and the mode switch -----------------
CLOSE_SCALES = np.array([0.995, 1.0, 1.005])


def close_scale_model(y):
    k = numpyro.sample("k", dist.Categorical(probs=jnp.ones(3) / 3))
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, jnp.asarray(CLOSE_SCALES)[k]), obs=y)


def _gibbs(monkeypatch=None, steps=200):
    kernel = RacingGibbs(close_scale_model, inner_kernel=RacingMH(close_scale_model))
    mcmc = MCMC(kernel, num_warmup=100, num_samples=steps, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(5), Y, extra_fields=("num_likelihood_evals",))
    return kernel, mcmc, mcmc.last_state


def test_gibbs_caches_one_proxy_per_configuration_and_draws_the_same_chain(monkeypatch):
    """The discrete posterior is spread over three scales, so k changes often.  Rebuilding
    the proxy at every change (the cache off) and reusing the proxy built at the first visit
    give the same chain (the proxy of a configuration is a function of it alone), and the
    cached run pays at most one full-data pass per configuration."""
    kernel, mcmc, last = _gibbs()
    k = np.asarray(mcmc.get_samples()["k"])
    assert np.sum(k[1:] != k[:-1]) >= 20  # the cache is exercised
    assert int(np.sum(last.proxy_cached)) == len(np.unique(k)) == 3
    evals = np.asarray(mcmc.get_extra_fields()["num_likelihood_evals"])
    refresh = kernel.inner_kernel.refresh_likelihood_evals
    # every configuration was first seen during warmup: no step pays a rebuild (the race
    # for k may read all 3 arms at every datum, never more)
    assert np.all(evals < 3 * N + refresh)
    import subsample_mcmc.numpyro.gibbs as gibbs_module

    monkeypatch.setattr(gibbs_module, "_MAX_CACHED_CONFIGURATIONS", 0)
    _, mcmc_off, last_off = _gibbs()
    assert last_off.proxy_cache is None
    np.testing.assert_array_equal(k, np.asarray(mcmc_off.get_samples()["k"]))
    np.testing.assert_allclose(np.asarray(mcmc.get_samples()["mu"]), np.asarray(mcmc_off.get_samples()["mu"]),
                               rtol=1e-5, atol=1e-6)
    evals_off = np.asarray(mcmc_off.get_extra_fields()["num_likelihood_evals"])
    changes = np.concatenate([[False], k[1:] != k[:-1]])
    assert np.all(evals_off[changes] >= refresh) and evals.sum() < evals_off.sum()


def test_racing_mh_samples_by_the_exact_step_when_the_race_costs_more():
    """Without a control variate a race between nearby random-walk points cannot decide
    and reads both arms (up to 2 N per step); the exact step with the current point's
    log-likelihood sum cached costs N.  The kernel measures the race over the second half
    of warmup and samples with the cheaper step."""
    kernel = RacingMH(normal_model, control_variate=None)
    mcmc = MCMC(kernel, num_warmup=200, num_samples=400, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(2), Y, extra_fields=("num_likelihood_evals", "exact_mode"))
    fields = mcmc.get_extra_fields()
    assert np.all(np.asarray(fields["exact_mode"]))
    evals = np.asarray(fields["num_likelihood_evals"])
    assert evals[0] == 2 * N and np.all(evals[1:] == N)  # one pass per step once the sum is cached
    mu = np.asarray(mcmc.get_samples()["mu"])
    assert abs(mu.mean() - Y.mean()) < 5 * (1.0 / np.sqrt(N)) / np.sqrt(400 / 20)
    assert 0.5 < mu.std() * np.sqrt(N) < 1.5
    # with the Taylor proxy the race reads a few points: it stays
    mcmc = MCMC(RacingMH(normal_model), num_warmup=200, num_samples=100, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(2), Y, extra_fields=("num_likelihood_evals", "exact_mode"))
    assert not np.any(np.asarray(mcmc.get_extra_fields()["exact_mode"]))
    assert np.mean(mcmc.get_extra_fields()["num_likelihood_evals"]) < 0.5 * N


def test_gibbs_exact_counts_every_arm():
    kernel = RacingGibbs(scale_model, inner_kernel=RacingMH(scale_model, method="exact", control_variate=None),
                         method="exact")
    mcmc = MCMC(kernel, num_warmup=0, num_samples=10, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), Y, extra_fields=("num_likelihood_evals",))
    evals = np.asarray(mcmc.get_extra_fields()["num_likelihood_evals"])
    k = np.asarray(mcmc.get_samples()["k"])
    # 3 arms x N for k; the exact MH step on mu reads N with the current sum cached, 2 N
    # when k changed (the cached sum is then dropped) and at the first step
    changed = np.r_[True, k[1:] != k[:-1]]
    assert np.all(evals == 3 * N + np.where(changed, 2 * N, N))
