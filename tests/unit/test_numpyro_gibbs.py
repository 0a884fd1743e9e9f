"""RacingGibbs: exact Gibbs equivalence, total variation, composition with NumPyro Gibbs."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS, DiscreteHMCGibbs, Gibbs
from scipy import stats

from subsample_mcmc import RacingGibbs, RacingMH

LOCS = jnp.array([0.0, 0.02, 0.04, 0.03, -0.01])
N = 5000
Y = jax.random.normal(jax.random.PRNGKey(0), (N,)) + 0.025


def single_site(y):
    k = numpyro.sample("k", dist.Categorical(probs=jnp.ones(5) / 5))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(LOCS[k], 1.0), obs=y)


def mixed(y):
    k = numpyro.sample("k", dist.Categorical(probs=jnp.array([0.1, 0.2, 0.3, 0.2, 0.2])))
    s = numpyro.sample("s", dist.HalfNormal(2.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(LOCS[k], s), obs=y)


def _exact_posterior(y):
    yy = np.asarray(y, np.float64)
    lp = np.array([np.sum(-0.5 * (yy - float(m)) ** 2) for m in LOCS])
    p = np.exp(lp - lp.max())
    return p / p.sum(), lp


def test_draws_match_exact_gibbs_when_forced_to_read_all():
    """first_batch = N: every draw equals the exact Gumbel-max Gibbs draw (float64) made
    with the same Gumbel noise."""
    kernel = RacingGibbs(single_site, first_batch=N)
    state = kernel.init(jax.random.PRNGKey(3), 0, None, (Y,), {})
    step = jax.jit(lambda s: kernel.sample(s, (Y,), {}))
    _, lp = _exact_posterior(Y)
    seen = set()
    for _ in range(40):
        _, key_site = jax.random.split(state.rng_key)
        key_gumbel, _ = jax.random.split(key_site)
        gumbel = np.asarray(jax.random.gumbel(key_gumbel, (5,), jnp.float32), np.float64)
        exact = int(np.argmax(np.log(0.2) + lp + gumbel))
        state = step(state)
        assert int(state.z["k"]) == exact
        assert int(state.num_likelihood_evals) == 5 * N
        seen.add(exact)
    assert len(seen) >= 3


def test_total_variation_within_delta():
    p, _ = _exact_posterior(Y)
    delta, num = 0.05, 3000
    mcmc = MCMC(RacingGibbs(single_site, delta=delta), num_warmup=0, num_samples=num, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), Y, extra_fields=("num_likelihood_evals",))
    counts = np.bincount(np.asarray(mcmc.get_samples()["k"]), minlength=5)
    tv = 0.5 * np.abs(counts / num - p).sum()
    rng = np.random.default_rng(0)
    noise = [0.5 * np.abs(rng.multinomial(num, p) / num - p).sum() for _ in range(2000)]
    assert tv <= delta + np.quantile(noise, 0.999)
    # never more than exact Gibbs's 5 N, up to the masked tail of the race's last 800-point
    # chunk (5000 points are computed in chunks up to 5600): the count is honest
    assert float(mcmc.get_extra_fields()["num_likelihood_evals"].mean()) <= 5 * 5600


def test_exact_method_follows_the_posterior():
    p, _ = _exact_posterior(Y)
    mcmc = MCMC(RacingGibbs(single_site, method="exact"), num_warmup=0, num_samples=3000, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(2), Y)
    counts = np.bincount(np.asarray(mcmc.get_samples()["k"]), minlength=5)
    assert stats.chisquare(counts, 3000 * p).pvalue > 1e-3


# the inner NUTS at the full size only (make test-full): at the CI size it runs in
# test_accept_prob_extra_field_is_the_inner_kernels and the zoo's extended entry student_dof_mixed
@pytest.mark.parametrize("inner", [pytest.param("nuts", marks=pytest.mark.full_only), "racing_mh"])
def test_mixed_model_matches_discrete_hmc_gibbs(inner):
    inner_kernel = NUTS(mixed) if inner == "nuts" else RacingMH(mixed, proposal="langevin")
    ours = MCMC(RacingGibbs(mixed, inner_kernel=inner_kernel), num_warmup=300, num_samples=1500,
                num_chains=2, chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours.run(jax.random.PRNGKey(0), np.asarray(Y))
    # an inner RacingMH is a block of the Gibbs step: its end-of-warmup mixing check is not made there (it
    # ran on every step under the chains' vmap and warned "acceptance 0" on partial sums, ~1,500 times)
    poor = [str(w.message) for w in caught if "mixes poorly" in str(w.message)]
    assert not poor, (len(poor), poor[:1])
    ref = MCMC(DiscreteHMCGibbs(NUTS(mixed)), num_warmup=300, num_samples=1500, num_chains=2,
               chain_method="sequential", progress_bar=False)
    ref.run(jax.random.PRNGKey(1), Y)
    a, b = ours.get_samples(), ref.get_samples()
    fa = np.bincount(np.asarray(a["k"]), minlength=5) / a["k"].size
    fb = np.bincount(np.asarray(b["k"]), minlength=5) / b["k"].size
    assert 0.5 * np.abs(fa - fb).sum() < 0.1
    s_sd = float(b["s"].std())
    assert abs(float(a["s"].mean()) - float(b["s"].mean())) < 0.5 * s_sd
    assert abs(float(a["s"].std()) / s_sd - 1) < 0.3


def test_accept_prob_extra_field_is_the_inner_kernels():
    """``extra_fields=("accept_prob",)``, as a NumPyro user asks it of any kernel, failed with a
    bare ``tuple indices must be integers`` (the field lived at ``inner_state.accept_prob``): it is
    the inner kernel's acceptance (RacingMH's, NUTS's) per chain and draw, NaN without one."""
    import arviz as az

    for inner in (RacingMH(mixed), NUTS(mixed)):
        mcmc = MCMC(RacingGibbs(mixed, inner_kernel=inner), num_warmup=50, num_samples=100, num_chains=2,
                    chain_method="vectorized", progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), np.asarray(Y), extra_fields=("accept_prob", "inner_state.accept_prob"))
        fields = mcmc.get_extra_fields(group_by_chain=True)
        acc = np.asarray(fields["accept_prob"])
        assert acc.shape == (2, 100) and np.all((acc >= 0) & (acc <= 1)) and 0 < acc.mean() < 1, acc.mean()
        np.testing.assert_array_equal(acc, np.asarray(fields["inner_state.accept_prob"]))
        assert "acceptance_rate" in az.from_numpyro(mcmc, log_likelihood=False).sample_stats
    mcmc = MCMC(RacingGibbs(single_site), num_warmup=5, num_samples=10, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), np.asarray(Y), extra_fields=("accept_prob",))
    assert np.all(np.isnan(np.asarray(mcmc.get_extra_fields()["accept_prob"])))


def test_blocks_of_numpyro_gibbs():
    """RacingGibbs and RacingMH are blocks of NumPyro's composable Gibbs kernel."""
    kernel = Gibbs([(RacingGibbs(mixed), ["k"]), (RacingMH(mixed, control_variate=None, delta=0.01), ["s"])])
    mcmc = MCMC(kernel, num_warmup=200, num_samples=600, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(4), Y)
    ref = MCMC(DiscreteHMCGibbs(NUTS(mixed)), num_warmup=200, num_samples=600, progress_bar=False)
    ref.run(jax.random.PRNGKey(5), Y)
    a, b = mcmc.get_samples(), ref.get_samples()
    assert abs(float(a["s"].mean()) - float(b["s"].mean())) < 0.5 * float(b["s"].std())
    fa = np.bincount(np.asarray(a["k"]), minlength=5) / a["k"].size
    fb = np.bincount(np.asarray(b["k"]), minlength=5) / b["k"].size
    assert 0.5 * np.abs(fa - fb).sum() < 0.15


def poisson_site(y):
    k = numpyro.sample("k", dist.Poisson(3.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(k, 1.0), obs=y)


def vector_site(y):
    k = numpyro.sample("k", dist.Bernoulli(0.5).expand([3]).to_event(1))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(k.sum(), 1.0), obs=y)


@pytest.mark.parametrize("model,inner,match", [
    (poisson_site, None, "'k'.*finite support"),
    (mixed, None, r"\['s'\].*inner_kernel"),
    (vector_site, None, "scalar discrete"),
])
def test_bad_models(model, inner, match):
    with pytest.raises(ValueError, match=match):
        MCMC(RacingGibbs(model, inner_kernel=inner), num_warmup=1, num_samples=1,
             progress_bar=False).run(jax.random.PRNGKey(0), Y[:200])


SC = jnp.array([1.0, 1.004, 1.008, 0.996, 1.006])


def student(y):
    k = numpyro.sample("k", dist.Categorical(probs=jnp.ones(5) / 5))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.StudentT(5.0, 0.0, SC[k]), obs=y)


def test_data_space_control_variate_reads_less_and_stays_exact():
    from subsample_mcmc.numpyro import DataSpaceControlVariate

    n = 20_000
    y = jax.random.t(jax.random.PRNGKey(0), 5.0, (n,))
    lik = lambda v, yy: dist.StudentT(5.0, 0.0, SC[v["k"]]).log_prob(yy[0])  # noqa: E731
    cv = DataSpaceControlVariate(lik, y, num_bins=50, exact_fraction=0.1)
    runs = {}
    for name, c in (("plain", None), ("cv", cv)):
        mcmc = MCMC(RacingGibbs(student, control_variate=c, first_batch=100), num_warmup=0,
                    num_samples=400, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(1), y, extra_fields=("num_likelihood_evals",))
        runs[name] = (np.asarray(mcmc.get_samples()["k"]), float(mcmc.get_extra_fields()["num_likelihood_evals"].mean()))
    # exact points are read every step (10% of N per arm); the race itself reads far less
    race_evals_cv = runs["cv"][1] - 5 * int(0.1 * n)
    assert race_evals_cv < 0.25 * runs["plain"][1]
    # forced full read with the control variate: exact Gibbs draws
    kernel = RacingGibbs(student, control_variate=cv, first_batch=n - int(0.1 * n))
    state = kernel.init(jax.random.PRNGKey(3), 0, None, (y,), {})
    step = jax.jit(lambda s: kernel.sample(s, (y,), {}))
    yy = np.asarray(y, np.float64)
    lp = np.array([stats.t.logpdf(yy, 5.0, 0.0, float(s)).sum() for s in SC])
    for _ in range(20):
        _, key_site = jax.random.split(state.rng_key)
        gumbel = np.asarray(jax.random.gumbel(jax.random.split(key_site)[0], (5,), jnp.float32), np.float64)
        state = step(state)
        assert int(state.z["k"]) == int(np.argmax(lp + np.log(0.2) + gumbel))


def test_data_space_control_variate_must_agree_with_the_model():
    from subsample_mcmc.numpyro import DataSpaceControlVariate

    y = jax.random.t(jax.random.PRNGKey(0), 5.0, (1000,))
    wrong = DataSpaceControlVariate(lambda v, yy: dist.Normal(0.0, SC[v["k"]]).log_prob(yy[0]), y, num_bins=10)
    with pytest.raises(ValueError, match="disagrees with the model"):
        MCMC(RacingGibbs(student, control_variate=wrong), num_warmup=0, num_samples=1,
             progress_bar=False).run(jax.random.PRNGKey(0), y)


def test_vectorized_init_params_without_a_chain_axis_are_refused_by_name():
    """Before: an IndexError from slicing each chain's start out of a value with no chain axis."""
    kernel = RacingGibbs(mixed, inner_kernel=RacingMH(mixed))
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    with pytest.raises(ValueError, match=r"init_params\['s'\] has shape \(\); .*\(a leading axis of the 3 chains"):
        kernel.init(keys, 10, {"s": np.array(0.0)}, (np.asarray(Y),), {})
    with pytest.raises(ValueError, match=r"\['nope'\], which are not latent sites RacingGibbs starts"):
        kernel.init(keys, 10, {"nope": np.zeros(3)}, (np.asarray(Y),), {})


def test_constructor_mistakes_are_named():
    """A fresh user's trial: a kernel class as ``inner_kernel``, a string ``delta`` and a string model
    failed late (inside NumPyro) or ran silently; each is refused when the kernel is built."""
    def model(y):
        numpyro.sample("k", dist.Categorical(probs=jnp.ones(3) / 3))

    with pytest.raises(TypeError, match="inner_kernel must be a kernel instance"):
        RacingGibbs(model, inner_kernel=RacingMH)
    for kernel in (RacingGibbs, RacingMH):
        with pytest.raises(TypeError, match="delta must be a number"):
            kernel(model, delta="0.05")
        with pytest.raises(TypeError, match="model must be a NumPyro model function"):
            kernel("model")
    with pytest.raises(ValueError, match=r"tie_share must lie in \[0, 1\)"):
        RacingGibbs(model, tie_share=1.0)


def _rare_ones_model(y):
    # value 0 gives every 1 probability 0 (NumPyro clips it to about -87 nats in float32); three 1s in 20,000
    k = numpyro.sample("k", dist.Categorical(probs=np.ones(4) / 4))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Bernoulli(probs=jnp.asarray([0.0, 1e-4, 5e-4, 2e-3])[k]), obs=y)


def test_rare_influential_data_send_the_chain_to_exact_draws():
    """A few data decide the draw (three 1s in 20,000 rule out k = 0): a first batch of 50 almost never
    contains them, so the race drew the impossible k = 0 in 87% of the steps without a sign.  The init
    check measures the concentration of the arms' log-likelihood differences, warns, and draws exactly;
    the draws follow the exact posterior (NumPy float64 data)."""
    y = np.zeros(20000)
    y[[100, 7000, 15000]] = 1.0
    kern = RacingGibbs(_rare_ones_model)
    mcmc = MCMC(kern, num_warmup=100, num_samples=2000, progress_bar=False)
    with pytest.warns(UserWarning, match="draw the discrete sites exactly"):
        mcmc.run(jax.random.PRNGKey(0), y)
    assert bool(mcmc.last_state.exact_mode) and float(mcmc.last_state.spread_ratio) > 5
    p = np.array([1e-4, 5e-4, 2e-3])
    lp = 3 * np.log(p) + (len(y) - 3) * np.log1p(-p)
    post = np.r_[0.0, np.exp(lp - lp.max()) / np.exp(lp - lp.max()).sum()]
    freq = np.bincount(np.asarray(mcmc.get_samples()["k"]), minlength=4) / 2000
    assert freq[0] == 0.0
    assert np.all(np.abs(freq - post) < 4 * np.sqrt(post * (1 - post) / 2000) + 1e-3), (freq, post)


def _moving_support_model(y):
    k = numpyro.sample("k", dist.Categorical(probs=np.ones(10) / 10))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Uniform(0.0, k + 1.0), obs=y)


def _moving_latent_support_model(y):
    k = numpyro.sample("k", dist.Categorical(probs=np.ones(3) / 3))
    b = numpyro.sample("b", dist.Uniform(0.0, k + 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(b, 1.0), obs=y)


def test_supports_that_move_with_a_discrete_site():
    """y ~ Uniform(0, k + 1): the race, blind to the data above k + 1 it has not read, drew k = 0 at every
    step where the posterior puts all its mass on k = 6; it is refused naming method='exact', which
    gives values of probability 0 (a log-likelihood of -inf) no mass.  A latent support that moves with
    k (b ~ Uniform(0, k + 1)) is refused at set-up."""
    y = np.random.default_rng(0).uniform(0.0, 7.0, 3000)
    with pytest.raises(ValueError, match="moves with the discrete sites.*method='exact'"):
        MCMC(RacingGibbs(_moving_support_model), num_warmup=5, num_samples=5, progress_bar=False).run(
            jax.random.PRNGKey(0), y)
    mcmc = MCMC(RacingGibbs(_moving_support_model, method="exact"), num_warmup=20, num_samples=200,
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y)  # from k = 0, where every y > 1 has probability 0
    assert np.all(np.asarray(mcmc.get_samples()["k"]) == 6)
    with pytest.raises(ValueError, match="'b' has a support that moves"):
        MCMC(RacingGibbs(_moving_latent_support_model, inner_kernel=RacingMH(_moving_latent_support_model)),
             num_warmup=5, num_samples=5, progress_bar=False).run(jax.random.PRNGKey(0), y)


def _spike_and_slab(X, y=None):
    a = numpyro.sample("a", dist.Normal(0.0, 10.0))
    g = jnp.stack([numpyro.sample(f"g{j}", dist.Bernoulli(0.5)) for j in range(X.shape[1])])
    b = numpyro.sample("b", dist.Normal(0.0, 0.1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(a + X @ (g * b), 1.0), obs=y)


def test_an_inner_racing_mh_whose_scale_cannot_follow_the_discrete_values_warns():
    """Spike and slab: given g_j = 1, b_j's conditional is fitted by the data (sd ~ 1 / sqrt(N)); given
    g_j = 0, it is its prior (sd 0.1), 7 times wider.  An inner RacingMH keeps the proposal scale of the
    start's configuration: a fresh user's run (N = 5,000) had b_0 given g_0 = 0 at sd 0.049 and mean 0.055
    instead of 0.1 and 0, and p(g_0) 5 standard errors high at R-hat 1.00, without a warning.  The init
    measures the curvature change against the proposal's mass matrix and warns, naming NUTS; where the
    discrete value moves the data's location, not the conditional's scale (``mixed``: k picks the mean,
    s the sd), it does not (NumPy float64, keyword data)."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(2000, 2))
    y = 0.5 + X @ np.array([0.05, 0.0]) + rng.normal(size=2000)
    kernel = RacingGibbs(_spike_and_slab, inner_kernel=RacingMH(_spike_and_slab))
    with pytest.warns(UserWarning, match=r"curvature up to \d+-fold.*inner_kernel=NUTS"):
        state = kernel.init(jax.random.PRNGKey(0), 10, None, (X,), {"y": y})
    assert float(state.inner_scale_ratio) > 20.0, state.inner_scale_ratio

    calm = RacingGibbs(mixed, inner_kernel=RacingMH(mixed))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="RacingGibbs: the inner RacingMH")
        state = calm.init(jax.random.PRNGKey(0), 10, None, (np.asarray(Y, np.float64),), {})
    assert 1.0 <= float(state.inner_scale_ratio) < 2.0, state.inner_scale_ratio


def test_chains_start_in_different_configurations():
    """Each chain's discrete start is drawn from the site's support with its own key (NumPy data): with
    8 keys over 5 values at least 3 distinct starts (a kernel starting every chain at the prototype's
    value has 1, and R-hat cannot see a chain held in its start); a value in init_params is kept."""
    y = np.asarray(Y, np.float64)
    kernel = RacingGibbs(single_site)
    starts = [int(kernel.init(jax.random.PRNGKey(s), 0, None, (y,), {}).z["k"]) for s in range(8)]
    assert len(set(starts)) >= 3, starts
    assert int(kernel.init(jax.random.PRNGKey(0), 0, {"k": np.int32(4)}, (y,), {}).z["k"]) == 4


def shifted(y):
    k = numpyro.sample("k", dist.Bernoulli(0.5))
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu + 3.0 * k, 1.0), obs=y)


def test_joint_moves_are_made_where_a_discrete_value_moves_the_continuous_posterior():
    """Init measures how far each configuration's conditional mode lies from the best one's, in
    posterior sds: ``y ~ N(mu + 3k, 1)`` (N = 400) puts mu's modes 3 apart (60 sds), so the chain makes
    joint moves; in ``mixed`` the discrete value moves the location by at most 0.05 (its scale's
    conditional barely moves), so it does not, and its step is the one-site Gibbs step unchanged."""
    rng = np.random.default_rng(2)
    y = rng.normal(1.0, 1.0, 400)
    state = RacingGibbs(shifted, inner_kernel=RacingMH(shifted)).init(jax.random.PRNGKey(0), 10, None, (y,), {})
    assert bool(state.joint_moves) and float(state.coupling_sds) > 20
    assert state.joint_laplace.mean.shape == (2, 1)
    np.testing.assert_allclose(np.asarray(state.joint_laplace.mean[:, 0]),
                               [np.sum(y) / 401, np.sum(y - 3.0) / 401], atol=1e-3)
    state = RacingGibbs(mixed, inner_kernel=RacingMH(mixed)).init(jax.random.PRNGKey(0), 10, None,
                                                                  (np.asarray(Y),), {})
    assert not bool(state.joint_moves) and float(state.coupling_sds) < 2.0


def many_sites(y):
    ks = [numpyro.sample(f"k{i}", dist.Bernoulli(0.5)) for i in range(7)]
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    shift = 3.0 * ks[0] + 0.01 * sum(ks[1:])
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu + shift, 1.0), obs=y)


def test_coupled_sites_with_too_many_configurations_for_joint_moves_warn():
    """Seven binary sites (128 joint configurations, more than the 64 joint moves are prepared for), one
    of which moves mu's conditional mode by 3 (60 posterior sds, N = 400, NumPy float64): no joint move
    is made, so a chain may stay where it started; init measures the coupling one site at a time and
    must say so (a kernel that skips the check is silent, as it was)."""
    y = np.random.default_rng(5).normal(1.0, 1.0, 400)
    kernel = RacingGibbs(many_sites, inner_kernel=RacingMH(many_sites))
    with pytest.warns(UserWarning, match=r"128 joint discrete configurations.*check_discrete_chains"):
        state = kernel.init(jax.random.PRNGKey(0), 10, None, (y,), {})
    assert state.joint_laplace is None and not bool(state.joint_moves) and float(state.coupling_sds) > 20


def test_a_site_update_with_a_joint_move_races_each_draw_at_half_delta():
    """With joint moves a site's update is two races (its conditional draw, then the joint move): each
    runs at delta / 2 so that the update stays within delta of the exact one; without, at delta."""
    y = np.random.default_rng(2).normal(1.0, 1.0, 400)
    kernel = RacingGibbs(shifted, inner_kernel=RacingMH(shifted), delta=0.04)
    kernel.init(jax.random.PRNGKey(0), 10, None, (y,), {})
    assert kernel._step_race_options()["delta"] == pytest.approx(0.02)
    calm = RacingGibbs(mixed, inner_kernel=RacingMH(mixed), delta=0.04)
    calm.init(jax.random.PRNGKey(0), 10, None, (np.asarray(Y),), {})
    assert calm._step_race_options()["delta"] == pytest.approx(0.04)


def _change_point(t, y=None):
    tau = numpyro.sample("tau", dist.Categorical(probs=np.ones(10) / 10))
    mu1 = numpyro.sample("mu1", dist.Normal(0.0, 5.0))
    mu2 = numpyro.sample("mu2", dist.Normal(0.0, 5.0))
    with numpyro.plate("data", t.shape[0]):
        numpyro.sample("y", dist.Normal(jnp.where(t < 60 * (tau + 1), mu1, mu2), 1.0), obs=y)


def test_a_change_point_started_anywhere_does_not_raise_the_inner_scale_alarm():
    """A change point on a grid of 10 times (N = 660, the shift after the 5th, NumPy int64 times): a
    start at tau = 0 leaves the first segment 60 points, so the first level's conditional there is 10
    times wider than where the posterior is (the curvature check at the start's values warned on most
    random starts; asserted below).  Where RacingGibbs fits every configuration, the check compares
    the plausible configurations only (the posterior holds tau near 4), and stays quiet from every start."""
    rng = np.random.default_rng(3)
    t = np.arange(660)
    y = np.where(t < 300, 0.0, 1.0) + rng.normal(size=660)
    kernel = RacingGibbs(_change_point, inner_kernel=RacingMH(_change_point))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="RacingGibbs: the inner RacingMH")
        state = kernel.init(jax.random.PRNGKey(0), 10, {"tau": np.int32(0)}, (t,), {"y": y})
    assert float(state.inner_scale_ratio) < 4.0, state.inner_scale_ratio
    # the check at the start's values (what it was): far above the warning's threshold of 4
    old = kernel._inner_scale_ratio(state.inner_state, {"tau": state.z["tau"]}, (t,), {"y": y})
    assert float(old) > 8.0, old


NU_GRID = np.array([2.0, 3.0, 4.0, 6.0])


def _dof(y):
    k = numpyro.sample("k", dist.Categorical(probs=jnp.ones(4) / 4))
    loc = numpyro.sample("loc", dist.Normal(0.0, 10.0))
    scale = numpyro.sample("scale", dist.HalfNormal(5.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.StudentT(jnp.asarray(NU_GRID)[k], loc, scale), obs=y)


def _joint_picks(kernel, state, y, current, keys):
    from jax.flatten_util import ravel_pytree

    _, unravel = ravel_pytree(state.inner_state.z)
    flat = state.joint_laplace.mean[current]
    discrete = {"k": jnp.asarray(current, state.z["k"].dtype)}

    def one(key, exact):
        d, _, _, _ = kernel._joint_move(key, "k", discrete, flat, unravel, state.joint_laplace, exact, (y,), {})
        return d["k"]

    race = jax.jit(jax.vmap(lambda k: one(k, jnp.asarray(False))))(keys)
    exact = jax.jit(jax.vmap(lambda k: one(k, jnp.asarray(True))))(keys)
    return np.asarray(race), np.asarray(exact)


def test_a_joint_move_reads_the_few_data_that_separate_the_configurations():
    """Student-t data (tail index 3.5, N = 2,000, NumPy float64), dof in {2, 3, 4, 6}: p(nu = 6 | y) is
    about 3e-7, and what separates nu = 4 from 6 is carried by the tail observations (the per-datum
    differences at the two Laplace modes have skewness ~7, kurtosis ~85).  A joint move raced from a
    first batch of 50 misses them and moved to nu = 6 in ~0.3% of moves (~12 of 4,000 here, all
    within delta, and a 2-5% error in the posterior sd of the scale); init measures those moments and
    the joint move's race reads at least the heavy-tail guard's minimum sample at them first.  From the
    nu = 4 mode, every race must agree with the exact draw on never choosing nu = 2 or 6."""
    y = 1.0 + 2.0 * np.random.default_rng(120).standard_t(3.5, size=2000)
    kernel = RacingGibbs(_dof, inner_kernel=RacingMH(_dof))
    state = kernel.init(jax.random.PRNGKey(0), 10, None, (y,), {})
    assert bool(state.joint_moves)
    assert float(state.joint_guard_sample) > 1000, float(state.joint_guard_sample)
    assert kernel._joint_first_batch == min(int(np.ceil(float(state.joint_guard_sample))), y.shape[0])
    race, exact = _joint_picks(kernel, state, y, 2, jax.random.split(jax.random.PRNGKey(3), 4000))
    assert not np.isin(exact, [0, 3]).any()
    assert not np.isin(race, [0, 3]).any(), np.bincount(race, minlength=4)


def _noise_family_tie(nu, seed, n=20_000):
    """``(model, y)``: Normal against Student-t(3) noise for t_nu data (NumPy float64), the prior
    log-odds cancelling the likelihood gap, so that p(k = 1 | y) = 1/2 at every step."""
    y = np.random.default_rng(seed).standard_t(nu, size=n)
    sd = float(np.sqrt(nu / (nu - 2)))
    gap = float(stats.t.logpdf(y, 3.0).sum() - stats.norm.logpdf(y, 0.0, sd).sum())

    def model(y=None):
        k = numpyro.sample("k", dist.Categorical(logits=jnp.array([0.0, -gap])))
        numpyro.sample("z", dist.Normal(0.0, 1.0))  # a continuous site for the inner kernel
        with numpyro.plate("data", y.shape[0]):
            numpyro.factor("ll", jnp.where(k == 0, dist.Normal(0.0, sd).log_prob(y), dist.StudentT(3.0).log_prob(y)))

    return model, y


def test_a_conditional_draw_reads_the_tail_that_a_first_batch_misses():
    """Choosing Normal against Student-t(3) noise on t_6 data (N = 20,000, NumPy float64), with prior
    log-odds that cancel the likelihood gap so that p(k = 1 | y) = 1/2 at every step: the per-datum
    differences (about y^2 / 6) have a one-sided heavy tail that carries their mean, and a first batch of 50
    that misses it sees the Normal ahead. Such races put p(k = 1) at 0.42 (7 standard errors low) with
    no warning, until init measured the differences' population skewness and kurtosis and made the
    conditional draws' races read the guard's minimum sample (here 16,016 points) first."""
    n = 20_000
    model, y = _noise_family_tie(6.0, seed=1, n=n)

    kernel = RacingGibbs(model, inner_kernel=NUTS(model))
    draws = 1500
    mcmc = MCMC(kernel, num_warmup=100, num_samples=draws, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(7), y=y)
    guard = float(mcmc.last_state.guard_sample)
    assert guard > 5_000 and kernel._discrete_first_batch == min(int(np.ceil(guard)), n), guard
    p = float(np.mean(np.asarray(mcmc.get_samples()["k"])))
    se = 0.5 / np.sqrt(draws)  # the conditional of k is the same at every step: independent draws
    assert abs(p - 0.5) < 4 * se, (p, se)


def test_a_conditional_draw_that_must_read_everything_is_drawn_exactly_and_says_so():
    """The same choice on t_4 data: the guard's minimum sample exceeds N, so the race would read all
    the data before deciding; the chain draws exactly instead (the same draws without a race's
    overhead) and the warning says why."""
    n = 20_000
    model, y = _noise_family_tie(4.0, seed=0, n=n)

    kernel = RacingGibbs(model, inner_kernel=NUTS(model))
    with pytest.warns(UserWarning, match="a race would first read"):
        state = kernel.init(jax.random.PRNGKey(7), 10, None, (), {"y": y})
    assert bool(state.exact_mode) and float(state.guard_sample) >= n
