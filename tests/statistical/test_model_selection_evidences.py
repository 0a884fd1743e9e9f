"""ModelSelection's posterior model probabilities against closed-form evidences and against
Laplace evidences of a model the kernel was not tuned on (within 3 Monte Carlo standard errors),
and its raced model draws against the exact draw (error rate within delta)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from subsample_mcmc import LinearFeatureControlVariate, ModelSelection, conditional_samples, model_posterior
from subsample_mcmc.kernels.laplace import fit_laplace
from problems import DEGREES, assert_within_3_se, balanced_polynomial
from problems import polynomial_control_variates as _polynomial_control_variates
from subsample_mcmc.models import polynomial as pm


def test_closed_form_model_probabilities_within_three_standard_errors():
    """Polynomial degree 1-3 with conjugate priors and known noise, NumPy float64 data,
    ModelSelection's defaults: p(d | y) within 3 MCSE of the closed form, every model's draw
    cheaper than the exact one."""
    n = 20_000
    x, y = balanced_polynomial(n, seed=3)
    exact = pm.model_probabilities(x, y, DEGREES)
    assert 0.3 < exact[1] < 0.7 and exact[0] < 1e-6
    kernel = ModelSelection(pm.polynomial_models(DEGREES))
    mcmc = MCMC(kernel, num_warmup=300, num_samples=4000, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), x, y, extra_fields=("num_likelihood_evals", "race_stage"))
    post = model_posterior(mcmc)
    assert post.names == ["degree1", "degree2", "degree3"]
    assert_within_3_se(post, exact)
    assert post.effective_draws > 0.5 * 4000
    assert not np.any(np.asarray(mcmc.last_state.exact_model_draw))  # the race was cheaper
    assert np.all(post.stderr[1:] > 0)
    evals = np.asarray(mcmc.get_extra_fields()["num_likelihood_evals"])
    assert evals.mean() < 0.1 * len(DEGREES) * n  # the exact sweep computes K N plus an MH step
    # the parameters given the model: the conjugate posterior mean of degree 3
    draws = conditional_samples(mcmc, "degree3")["beta"]
    # an index, negative ones counting from the end as in Python, gives the same draws; a name or
    # an index that is not a model is refused with the models' names
    np.testing.assert_array_equal(conditional_samples(mcmc, -1)["beta"], draws)
    np.testing.assert_array_equal(conditional_samples(mcmc, np.int64(2))["beta"], draws)
    np.testing.assert_array_equal(conditional_samples(mcmc, jnp.asarray(2))["beta"], draws)
    for bad in ("degree4", 3, -4, 1.0, True):
        with pytest.raises(ValueError, match=r"model must be one of the models' names \['degree1', 'degree2', "
                                             r"'degree3'\] or an index in \[-3, 2\]"):  # one wording for both
            conditional_samples(mcmc, bad)
    phi = pm.features(x, 3)
    a = phi.T @ phi + np.eye(4)
    mean = np.linalg.solve(a, phi.T @ y)
    sd = np.sqrt(np.diagonal(np.linalg.inv(a)))
    assert np.all(np.abs(draws.mean(0) - mean) < 6 * sd / np.sqrt(len(draws) / 10))


def _logistic(columns):
    def model(X, y):
        beta = numpyro.sample("beta", dist.Normal(0.0, 2.0).expand([len(columns) + 1]).to_event(1))
        with numpyro.plate("rows", X.shape[0]):
            logits = beta[0] + X[:, list(columns)] @ beta[1:]
            numpyro.sample("y", dist.Bernoulli(logits=logits), obs=y)

    return model


def _laplace_probabilities(X, y, models, sizes):
    logs = []
    for columns, p in zip(models, sizes):
        Xj = jnp.asarray(X[:, list(columns)])

        def log_post(b, Xj=Xj):
            logits = b[0] + Xj @ b[1:]
            return (jnp.sum(dist.Bernoulli(logits=logits).log_prob(jnp.asarray(y)))
                    + jnp.sum(dist.Normal(0.0, 2.0).log_prob(b)))

        la, _ = fit_laplace(log_post, jnp.zeros(p))
        logs.append(float(la.log_evidence))
    logs = np.array(logs) - max(logs)
    return np.exp(logs) / np.exp(logs).sum()


# full size only (make test-full): model probabilities against evidences run at the CI size in the closed-form
# tests of this module, vectorized chains and ArviZ in the parameter-free null model's
@pytest.mark.full_only
def test_logistic_covariate_selection_against_laplace_evidences_vectorized_and_arviz():
    """A model the kernel was not tuned on (Bernoulli, covariate sets), chains vectorized, int
    labels: p(set | y) within 3 MCSE of the Laplace evidences (exact to O(1/N) here); ArviZ shows
    the model index and each model's parameters; sampling goes on from ``post_warmup_state``."""
    az = pytest.importorskip("arviz")
    rng = np.random.default_rng(11)
    n = 8_000
    X = rng.normal(size=(n, 2))
    # a weak second covariate: the two sets share the posterior
    logits = -0.5 + 0.8 * X[:, 0] + 0.035 * X[:, 1]
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-logits))).astype(np.int64)
    sets = ((0,), (0, 1))
    ref = _laplace_probabilities(X, y, sets, (2, 3))
    assert 0.05 < ref[1] < 0.95
    kernel = ModelSelection({"x1": _logistic(sets[0]), "x1_x2": _logistic(sets[1])})
    mcmc = MCMC(kernel, num_warmup=300, num_samples=1500, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(2), X, y, extra_fields=("num_likelihood_evals", "race_stage", "accept_prob"))
    post = model_posterior(mcmc)
    assert_within_3_se(post, ref)
    idata = az.from_numpyro(mcmc)
    assert {"model", "x1.beta", "x1_x2.beta"} <= set(idata.posterior.data_vars)
    assert idata.posterior["model"].shape == (2, 1500)
    assert "num_likelihood_evals" in idata.sample_stats
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.num_samples = 1000
    mcmc.run(mcmc.post_warmup_state.rng_key, X, y)
    again = model_posterior(mcmc)
    assert np.allclose(again.log_prior_adjustment, post.log_prior_adjustment)  # frozen after warmup
    assert_within_3_se(again, ref)


def test_a_parameter_free_null_model_against_the_closed_form_x64_vectorized_and_arviz():
    """A fixed null model (no latent site: y ~ N(0, 1)) against mu ~ N(0, 1), y ~ N(mu, 1), the data
    tuned so that the Bayes factor is near 1 (``models.normal_mean``): x64 on, NumPy float64 data by
    keyword, vectorized chains.  p(alt | y) within 3 MCSE of the closed form; the null model has no sites
    in the draws or in ArviZ; alt's parameter given alt is its conjugate posterior."""
    az = pytest.importorskip("arviz")
    from subsample_mcmc.models.normal_mean import alt, alt_probability, balanced_data, null

    n = 20_000
    y = balanced_data(n)
    ybar, p_alt = float(np.mean(y)), alt_probability(y)
    assert 0.2 < p_alt < 0.8

    with jax.enable_x64(True):
        mcmc = MCMC(ModelSelection([null, alt]), num_warmup=300, num_samples=1500, num_chains=2,
                    chain_method="vectorized", progress_bar=False)
        mcmc.run(jax.random.PRNGKey(5), y=y, extra_fields=("num_likelihood_evals",))
        idata = az.from_numpyro(mcmc)  # replays the model on float64 draws: under x64, as the run
        # pseudoprior="copula" fits no pilot to the null model (a fresh user's crash: NUTS on no sites)
        kernel = ModelSelection([null, alt], pseudoprior="copula", pilot_draws=100)
        fits = kernel.pseudopriors(kernel.init(jax.random.PRNGKey(6), 0, None, (y,), {}))
    assert fits["null"].lam is None and fits["alt"].lam is not None  # Gaussian for null, copula for alt
    np.testing.assert_allclose(np.asarray(fits["null"].mean), [0.0], atol=1e-5)  # the auxiliary site's prior
    assert set(idata.posterior.data_vars) == {"model", "alt.mu"}
    post = model_posterior(mcmc)
    assert post.names == ["null", "alt"]
    assert_within_3_se(post, np.array([1 - p_alt, p_alt]))
    assert set(mcmc.get_samples()) == {"model", "alt.mu"}
    assert conditional_samples(mcmc, "null") == {}
    mu = np.asarray(conditional_samples(mcmc, "alt")["mu"])
    assert mu.dtype == np.float64
    # conjugate posterior N(n ybar / (n + 1), 1 / (n + 1)); the draws given alt are correlated: ESS / 10
    assert abs(mu.mean() - n * ybar / (n + 1)) < 6 / np.sqrt((n + 1) * len(mu) / 10)
    assert abs(mu.std() * np.sqrt(n + 1) - 1) < 0.15
    evals = np.asarray(mcmc.get_extra_fields()["num_likelihood_evals"])
    assert evals.mean() < 0.2 * n  # the race reads a few points, not 2 N


def test_linear_feature_control_variate_closed_form_and_checked_against_the_model():
    """``control_variate=`` (the model race's proxies in the likelihood's linear features), NumPy
    float64 data: p(d | y) within 3 MCSE of the closed form with every raced decision re-checked
    exactly and none wrong beyond delta; a features likelihood that disagrees with the model (a
    user's wrong noise scale) is refused at init naming the data index; a dict missing a model is
    refused naming the argument."""
    from scipy.stats import binom

    x, y = balanced_polynomial(5_000, seed=4)
    exact = pm.model_probabilities(x, y, DEGREES)
    kernel = ModelSelection(pm.polynomial_models(DEGREES), control_variate=_polynomial_control_variates(x, y),
                            check_decisions=True)
    assert kernel.max_race_fraction == 1 / 32  # max_race_fraction="auto" with feature control variates
    mcmc = MCMC(kernel, num_warmup=200, num_samples=2500, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(3), x, y, extra_fields=("num_likelihood_evals", "model_draw_checked",
                                                         "model_draw_disagrees", "mh_race_stage"))
    assert_within_3_se(model_posterior(mcmc), exact)
    ef = mcmc.get_extra_fields()
    checked = int(np.asarray(ef["model_draw_checked"]).sum())
    errors = int(np.asarray(ef["model_draw_disagrees"]).sum())
    assert checked > 2000 and binom.sf(errors - 1, checked, kernel.race_options["delta"]) > 1e-3, (errors, checked)
    # the MH races of the parameters use the same proxies: p(beta | y, d) is the conjugate posterior
    for d in (2, 3):
        draws = conditional_samples(mcmc, f"degree{d}")["beta"]
        phi = pm.features(x, d)
        a = phi.T @ phi + np.eye(d + 1)
        mean, sd = np.linalg.solve(a, phi.T @ y), np.sqrt(np.diagonal(np.linalg.inv(a)))
        assert np.all(np.abs(draws.mean(0) - mean) < 6 * sd / np.sqrt(len(draws) / 10)), (d, draws.mean(0), mean)
        assert np.all(np.abs(draws.std(0) / sd - 1) < 0.25), (d, draws.std(0), sd)
    assert np.mean(np.asarray(ef["mh_race_stage"]) == 1) > 0.5  # most MH races stop at their first batch
    wrong = _polynomial_control_variates(x, y, noise_scale=2.0)
    refusing = ModelSelection(pm.polynomial_models(DEGREES), control_variate=wrong)
    refusing._pseudoprior = lambda *a: pytest.fail("the control variate is checked before any pseudoprior fit")
    with pytest.raises(ValueError, match=r"control_variate\['degree1'\].*disagrees with the model at data index"):
        refusing.init(jax.random.PRNGKey(0), 10, None, (x, y), None)
    short = ModelSelection(pm.polynomial_models(DEGREES), control_variate=_polynomial_control_variates(x[:4000], y[:4000]))
    short.kernels[0].init = lambda *a: pytest.fail("the sizes are checked before any model's mode search")
    with pytest.raises(ValueError, match=r"control_variate\['degree1'\] has 4000 covariate rows, the data plate 5000"):
        short.init(jax.random.PRNGKey(0), 10, None, (x, y), None)
    with pytest.raises(ValueError, match="control_variate must map every model name"):
        ModelSelection(pm.polynomial_models(DEGREES),
                       control_variate={"degree1": _polynomial_control_variates(x, y)["degree1"]})
    with pytest.raises(ValueError, match="covariates must have shape"):
        LinearFeatureControlVariate(lambda v: v, lambda z, w: z, np.zeros(10))


def test_check_decisions_error_rate_within_delta_and_pseudopriors_reused():
    """``check_decisions=True`` re-draws every raced model index exactly with the same Gumbel noise:
    the disagreement rate stays within ``delta`` (Prop. 1; a one-sided binomial bound) on a balanced
    problem, where the races are hardest; the fitted pseudopriors pass to an exact kernel unchanged."""
    from scipy.stats import binom

    x, y = balanced_polynomial(5_000, seed=5)
    delta = 0.1
    kernel = ModelSelection(pm.polynomial_models(DEGREES), delta=delta, check_decisions=True)
    mcmc = MCMC(kernel, num_warmup=200, num_samples=800, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), np.asarray(x), np.asarray(y),
             extra_fields=("model_draw_checked", "model_draw_disagrees", "race_stage"))
    ef = mcmc.get_extra_fields()
    checked = np.asarray(ef["model_draw_checked"])
    errors = int(np.asarray(ef["model_draw_disagrees"]).sum())
    assert checked.sum() > 500 and np.all(np.asarray(ef["race_stage"])[checked] > 0)
    assert binom.sf(errors - 1, int(checked.sum()), delta) > 1e-3, (errors, checked.sum())
    given = kernel.pseudopriors(mcmc.last_state)
    exact = ModelSelection(pm.polynomial_models(DEGREES), method="exact", pseudoprior=given)
    state = exact.init(jax.random.PRNGKey(2), 10, None, (x, y), None)
    for g, h in zip(state.pseudopriors, given.values()):
        np.testing.assert_array_equal(np.asarray(g.mean), np.asarray(h.mean))
    with pytest.raises(ValueError, match="pseudoprior"):
        ModelSelection(pm.polynomial_models(DEGREES), pseudoprior={"degree1": given["degree1"]})
    # check_decisions=m checks the draws of sweeps i with i % m == 0 only (a timed run's diagnostic)
    every3 = ModelSelection(pm.polynomial_models(DEGREES), delta=delta, check_decisions=3, pseudoprior=given)
    mcmc = MCMC(every3, num_warmup=20, num_samples=40, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), x, y, extra_fields=("model_draw_checked", "race_stage", "i"))
    ef = mcmc.get_extra_fields()
    sweep = np.asarray(ef["i"]) - 1  # the state's i after the sweep
    raced = np.asarray(ef["race_stage"]) > 0
    np.testing.assert_array_equal(np.asarray(ef["model_draw_checked"]), raced & (sweep % 3 == 0))
    for bad in (0.5, -1, "yes"):
        with pytest.raises(ValueError, match="check_decisions must be True, False or an integer"):
            ModelSelection(pm.polynomial_models(DEGREES), check_decisions=bad)
