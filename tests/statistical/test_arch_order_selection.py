"""ARCH order selection (Sec. 5.2, App. C.2): the product-space sampler finds the true order."""

import jax
import numpy as np
import pytest
from scipy import stats

from subsample_mcmc.models.arch import arch_models, prepare, simulate_arch


@pytest.fixture(scope="module")
def small_problem():
    r, theta = simulate_arch(6000, order=2, alpha0=0.2, alpha_sum=0.6, nu=6.0, seed=3)
    data = prepare(r, orders=(1, 2, 4))
    return r, theta, data


def test_model_selection_finds_the_true_order_with_decisions_within_delta(small_problem):
    """ModelSelection over the ARCH(q) NumPyro models (Student-t likelihood: heavy-tailed per-datum
    log-likelihoods, the case that breaks a race's Gaussian error bound) at N = 6000 from an ARCH(2):
    the posterior puts its mass on q = 2, and the raced model draws differ from the exact draw with
    the same Gumbel noise at a rate within delta (one-sided binomial test at level 1e-3)."""
    from numpyro.infer import MCMC

    from subsample_mcmc import ModelSelection, model_posterior

    _, _, data = small_problem
    y = np.asarray(data.y, np.float64)  # NumPy float64, as a user passes it
    kernel = ModelSelection(arch_models(data.orders), delta=0.1, check_decisions=True)
    mcmc = MCMC(kernel, num_warmup=200, num_samples=400, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y, extra_fields=("model_draw_checked", "model_draw_disagrees"))
    post = model_posterior(mcmc)
    assert post.names[int(np.argmax(post.probabilities))] == "arch2", post
    ef = mcmc.get_extra_fields()
    checked = np.asarray(ef["model_draw_checked"])
    errors = int(np.asarray(ef["model_draw_disagrees"]).sum())
    if checked.sum():  # the race ran (it may fall back to the exact draw when it costs more)
        assert stats.binom.sf(errors - 1, int(checked.sum()), 0.1) > 1e-3, (errors, checked.sum())
