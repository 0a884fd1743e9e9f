"""ARCH order selection (Sec. 5.2, App. C.2): model, data, product-space sampler, main job."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from subsample_mcmc.models.arch import (
    arch_numpyro_model, lag_matrix, load_returns, log_likelihood_points, prepare, simulate_arch,
    student_t_logpdf, validate_orders,
)
from subsample_mcmc.models.arch_sampler import ArchOrderSampler, _arm_rewards, _control_variate, _pseudo_log_density, total_variation
from subsample_mcmc.models.arch import log_prior
from subsample_mcmc.racing import sample_discrete

# the runs below use the same shapes (2 chains, chunks of 100), so a worker compiles the
# sampler's steps once


@pytest.fixture(scope="module")
def small_problem():
    r, theta = simulate_arch(6000, order=2, alpha0=0.2, alpha_sum=0.6, nu=6.0, seed=3)
    data = prepare(r, orders=(1, 2, 4))
    return r, theta, data, ArchOrderSampler(data)


def test_student_t_is_the_standard_t_with_scale_sigma():
    r = np.linspace(-5, 5, 11)
    for nu, s2 in ((0.7, 2.0), (6.0, 0.3)):
        ours = np.asarray(student_t_logpdf(jnp.asarray(r), s2, nu))
        np.testing.assert_allclose(ours, stats.t.logpdf(r, nu, scale=np.sqrt(s2)), rtol=2e-5, atol=2e-5)


def test_lag_matrix_rows():
    r = np.arange(1.0, 8.0)
    y = lag_matrix(r, 3)
    assert y.shape == (4, 4)
    np.testing.assert_allclose(y[0], [4.0, 9.0, 4.0, 1.0])  # r_3, r_2^2, r_1^2, r_0^2
    np.testing.assert_allclose(y[-1], [7.0, 36.0, 25.0, 16.0])


def test_log_likelihood_matches_the_numpyro_model(small_problem):
    from numpyro.infer.util import log_likelihood

    _, _, data, _ = small_problem
    q_max = max(data.orders)
    u = jnp.linspace(-1.0, 0.5, q_max + 2)
    mask = data.masks[1]  # order 2
    ours = log_likelihood_points(u, mask, data.y)
    x = jax.nn.softplus(u)
    values = {"alpha0": x[0], "alpha": x[1:3], "nu": x[-1]}
    theirs = log_likelihood(arch_numpyro_model, values, data.y, 2, batch_ndims=0)["obs"]
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-4, atol=1e-4)


def test_feature_control_variate_is_exact_on_its_population(small_problem):
    """E[h] from the bin moments equals the average of h over the raced points."""
    _, _, data, sampler = small_problem
    a = sampler.arrays
    u = a.mu + 0.3 * jax.random.normal(jax.random.PRNGKey(0), a.mu.shape) * a.masks
    cv = _control_variate(u, a.masks, sampler.bins)
    h = cv.values(sampler.bins.raced_indices)
    np.testing.assert_allclose(np.asarray(cv.mean()), np.asarray(h.mean(1)), rtol=1e-4, atol=1e-5)
    # the expansion tracks the rewards: residual variance far below the raw variance
    raw = _arm_rewards(u, a.masks, a.y)(sampler.bins.raced_indices)
    res = raw - h
    assert float(jnp.var(res[1] - res[0])) < 0.1 * float(jnp.var(raw[1] - raw[0]))


@pytest.mark.parametrize("control_variate", ["data", "parameter"])
def test_racing_gibbs_draw_within_delta_of_exact(small_problem, control_variate):
    """A racing draw of q disagrees with the exact draw (same Gumbel noise) at rate <= delta."""
    _, _, data, sampler = small_problem
    a = sampler.arrays
    xi = jax.random.normal(jax.random.PRNGKey(5), a.mu.shape) * a.masks
    u = a.mu + jnp.einsum("dpk,dk->dp", a.chol, xi)
    log_f0 = (jnp.asarray(-sampler.laplace.log_evidence + sampler.laplace.log_evidence.max(), jnp.float32)
              + jax.vmap(log_prior)(u, a.masks) - jax.vmap(_pseudo_log_density)(u, a.mu, a.chol, a.masks))
    n = a.y.shape[0]
    rewards = _arm_rewards(u, a.masks, a.y)
    delta = 0.1

    if control_variate == "parameter":
        from subsample_mcmc.kernels.proxy import proxy_sum
        from subsample_mcmc.models.arch_sampler import _proxies, _proxy_residual_rewards

        race_rewards = _proxy_residual_rewards(u, a.masks, _proxies(a), a.y)
        race_f0 = log_f0 + jax.vmap(lambda uu, prx: proxy_sum(prx, uu, with_constant=True))(u, _proxies(a))
    else:
        race_rewards, race_f0 = rewards, log_f0

    @jax.jit
    def both(key):
        cv = _control_variate(u, a.masks, sampler.bins) if control_variate == "data" else None
        fast = sample_discrete(key, race_f0, race_rewards, population_size=n, control_variate=cv, delta=delta)
        exact = sample_discrete(key, log_f0, rewards, population_size=n, method="exact")
        return fast.value, exact.value, fast.race.num_rewards_read

    fast, exact, evals = map(np.asarray, jax.lax.map(both, jax.random.split(jax.random.PRNGKey(1), 300)))
    errors = int((fast != exact).sum())
    # one-sided binomial test of rate <= delta at level 1e-3
    assert stats.binom.sf(errors - 1, 300, delta) > 1e-3, errors
    assert len(np.unique(exact)) >= 2  # the test is not trivial: q is genuinely random here
    assert evals.mean() < len(data.orders) * n  # and the race saved reads


def test_sampler_recovers_true_order(small_problem):
    """At N = 6000 the posterior puts (nearly) all its mass on the true order 2: the
    racing sampler finds it and its decisions err at rate <= delta (its cost against
    exact: the spread-posterior test below)."""
    _, _, data, sampler = small_problem
    run = sampler.run(0, method="racing", num_adapt=300, num_samples=400, num_chains=2, progress_bar=False,
                      check_decisions=True, initial_prior="laplace")
    post = run.posterior_q()
    assert np.argmax(post) == data.orders.index(2), post
    assert np.isclose(post.sum(), 1.0)
    rates = run.error_rates()
    for name in ("gibbs", "mh"):
        e = rates[name]
        assert stats.binom.sf(e["errors"] - 1, e["decisions"], sampler.delta) > 1e-3, (name, e)
    idata = run.to_inference_data()
    assert idata.posterior["q"].shape == (2, 400)
    assert "likelihood_evaluations" in idata.sample_stats


def test_racing_posterior_over_orders_matches_exact_where_it_is_spread():
    """Total variation between racing and exact p(q | r) on data where the posterior is
    genuinely spread (ARCH(2), N = 3000: about 3:1 between orders 2 and 3), so that a
    sampler stuck on one order, or with a biased race, would fail the test."""
    r, _ = simulate_arch(3000, order=2, alpha0=0.2, alpha_sum=0.3, nu=6.0, seed=2)
    sampler = ArchOrderSampler(prepare(r, orders=(1, 2, 3)))
    runs = {m: sampler.run(1, method=m, num_adapt=400, num_samples=600, num_chains=2, progress_bar=False,
                           initial_prior="laplace")
            for m in ("racing", "exact")}
    exact = runs["exact"].posterior_q()
    assert np.sort(exact)[-2] > 0.1, exact  # the test has power: two orders hold real mass
    tv, se = total_variation(runs["racing"], runs["exact"])
    assert tv < 0.1 + 3 * se, (runs["racing"].posterior_q(), exact, tv, se)
    # the same statistic separates exact from a sampler that kept only its modal order
    point = np.eye(len(exact))[np.argmax(exact)]
    assert 0.5 * np.abs(point - exact).sum() > 0.1 + 3 * se
    assert runs["racing"].evals.mean() < runs["exact"].evals.mean()


def test_same_seed_same_draws(small_problem):
    _, _, _, sampler = small_problem
    a = sampler.run(7, method="exact", num_adapt=100, num_samples=100, num_chains=2, progress_bar=False)
    b = sampler.run(7, method="exact", num_adapt=100, num_samples=100, num_chains=2, progress_bar=False)
    np.testing.assert_array_equal(a.q_index, b.q_index)
    np.testing.assert_array_equal(a.alpha0, b.alpha0)


# ------------------------------------------------------------------------ bad input


def test_bad_series_and_orders():
    r, _ = simulate_arch(2000, order=2, seed=0)
    bad = r.copy()
    bad[17] = np.nan
    with pytest.raises(ValueError, match="NaN.*position 17"):
        prepare(bad, orders=(1, 2))
    with pytest.raises(ValueError, match="largest order 30 needs at least"):
        prepare(r[:200], orders=(5, 30))
    for orders in ([0, 5], [2.5, 3], ["a", 2], [5], [3, 3], "abc"):
        with pytest.raises(ValueError, match="orders"):
            validate_orders(orders)
    assert validate_orders(["10", 5.0]) == (5, 10)


def test_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_returns(str(tmp_path / "missing.csv"))
    junk = tmp_path / "junk.csv"
    junk.write_bytes(b"\x00\x01\x02\xff\xfe\n\x00\x00")
    with pytest.raises(ValueError):
        load_returns(str(junk))
    text = tmp_path / "text.csv"
    text.write_text("Date,Close\n2020-01-01,10\n2020-01-02,abc\n2020-01-03,11\n")
    with pytest.raises(ValueError, match="non-numeric"):
        load_returns(str(text))
    neg = tmp_path / "neg.csv"
    neg.write_text("Close\n10\n0\n11\n")
    with pytest.raises(ValueError, match="positive"):
        load_returns(str(neg))
    two = tmp_path / "two.csv"
    two.write_text("a,b\n1,2\n3,4\n")
    with pytest.raises(ValueError, match="which column"):
        load_returns(str(two))


def test_csv_prices_and_returns(tmp_path):
    prices = 100 * np.exp(np.cumsum(np.random.default_rng(0).normal(0, 0.01, 50)))
    f = tmp_path / "p.csv"
    f.write_text("Date,Close\n" + "\n".join(f"2020-01-{i + 1:02d},{p}" for i, p in enumerate(prices[:28])) + "\n")
    s = load_returns(str(f))
    lr = 100 * np.diff(np.log(prices[:28]))
    np.testing.assert_allclose(s.returns, lr - lr.mean())
    g = tmp_path / "r.csv"
    g.write_text("Return\n" + "\n".join(str(x) for x in lr) + "\n")
    np.testing.assert_allclose(load_returns(str(g)).returns, lr - lr.mean())


def test_real_series_load():
    for name in ("sp500", "nasdaq"):
        s = load_returns(name)
        assert s.returns.shape[0] > 5000 and abs(s.returns.mean()) < 1e-10
        assert 0.5 < s.returns.std() < 3.0  # daily percent returns


def test_cli_writes_outputs_and_reports_errors(tmp_path, capsys):
    from subsample_mcmc.cli import main

    out = tmp_path / "out"
    rc = main(["arch", "--data", "simulated", "--simulated-size", "5996", "--simulated-order", "2",
               "--orders", "1,2,4", "--num-adapt", "100", "--num-samples", "100", "--chains", "2",
               "--output", str(out), "--no-progress"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["orders"] == [1, 2, 4]
    for m in ("racing", "exact"):
        assert np.isclose(sum(summary["posterior_q"][m]), 1.0)
        assert summary["likelihood_evaluations"][m] > 0
    for f in ("racing.nc", "exact.nc", "returns.png", "posterior_q.png", "trace_q.png", "autocorr_q.png"):
        assert os.path.exists(out / f), f
    assert main(["arch", "--orders", "0,5", "--output", str(out)]) == 2
    assert "orders must be positive integers" in capsys.readouterr().err
    assert main(["arch", "--data", str(tmp_path / "nope.csv"), "--output", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
