"""ARCH order selection (Sec. 5.2, App. C.2): model, data, product-space sampler, main job."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from subsample_mcmc.models.arch import (
    arch_models,
    arch_numpyro_model,
    lag_matrix,
    load_returns,
    log_likelihood_points,
    prepare,
    simulate_arch,
    student_t_logpdf,
    validate_orders,
)


@pytest.fixture(scope="module")
def small_problem():
    r, theta = simulate_arch(6000, order=2, alpha0=0.2, alpha_sum=0.6, nu=6.0, seed=3)
    data = prepare(r, orders=(1, 2, 4))
    return r, theta, data


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

    _, _, data = small_problem
    q_max = max(data.orders)
    u = jnp.linspace(-1.0, 0.5, q_max + 2)
    mask = data.masks[1]  # order 2
    ours = log_likelihood_points(u, mask, data.y)
    x = jax.nn.softplus(u)
    values = {"alpha0": x[0], "alpha": x[1:3], "nu": x[-1]}
    theirs = log_likelihood(arch_numpyro_model, values, data.y, 2, batch_ndims=0)["obs"]
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("order", [1, 4])
def test_series_windows_give_each_rows_likelihood(small_problem, order):
    """With ``series=data.series`` the model reads a subset's rows from windows of the series: at every
    index the same log-likelihood as the lag matrix's row (and as :func:`log_likelihood_points`, written
    apart), for the largest order and a smaller one (a window read backwards or shifted by one row
    would give another lag's weight or another time's return); at all N points it reads the lag matrix."""
    from numpyro import handlers

    _, _, data = small_problem
    q_max = max(data.orders)
    u = jnp.linspace(-1.0, 0.5, q_max + 2)
    mask = data.masks[list(data.orders).index(order)]
    ours = np.asarray(log_likelihood_points(u, mask, data.y))
    x = jax.nn.softplus(u)
    values = {"alpha0": x[0], "alpha": x[1:order + 1], "nu": x[-1]}
    series = np.asarray(data.series, np.float64)  # NumPy float64, as a user passes it
    for size in (None, 257):
        tr = handlers.trace(handlers.seed(handlers.substitute(arch_numpyro_model, values), 5)).get_trace(
            data.y, order, size, series=series)
        idx = np.asarray(tr["data"]["value"])
        got = np.asarray(tr["obs"]["fn"].log_prob(tr["obs"]["value"]))
        assert got.shape == idx.shape == ((data.y.shape[0],) if size is None else (size,))
        np.testing.assert_allclose(got, ours[idx], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(tr["obs"]["value"]), np.asarray(data.y)[idx, 0])


def test_series_of_the_wrong_shape_is_refused(small_problem):
    _, _, data = small_problem
    with pytest.raises(ValueError, match=r"series must be the \[N \+ max Q, 2\].*prepare\(returns, orders\).series"):
        handlers_run(data.y, np.asarray(data.series)[1:])
    with pytest.raises(ValueError, match="series must be"):
        handlers_run(data.y, np.asarray(data.series)[:, :1])


def test_a_series_of_other_returns_is_refused_by_the_kernels(small_problem):
    """A ``series`` of the right shape but of other returns would give the races another likelihood than
    the full-data passes: the kernels' start-up check of subsets against all the data refuses it, naming
    the disagreement (not the shape check the model fails when the kernels try indexing its arguments)."""
    from numpyro.infer import MCMC

    from subsample_mcmc import ModelSelection

    _, _, data = small_problem
    y, other = np.asarray(data.y), np.asarray(data.series)[::-1].copy()
    with pytest.raises(ValueError, match="per-datum log-likelihood of observed site 'obs'"):
        MCMC(ModelSelection(arch_models(data.orders), pseudoprior="laplace"), num_warmup=2, num_samples=2,
             progress_bar=False).run(jax.random.PRNGKey(0), y, series=other)


def handlers_run(y, series):
    from numpyro import handlers

    return handlers.trace(handlers.seed(arch_numpyro_model, 0)).get_trace(y, 2, series=series)




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
    assert load_returns().name == "djia"  # the default: the longest shipped series
    for name, size in (("djia", 37_930), ("sp500-1950", 17_345)):
        s = load_returns(name)
        assert s.returns.shape[0] == size and abs(s.returns.mean()) < 1e-10
        assert 0.5 < s.returns.std() < 3.0 and s.dates[0] < s.dates[-1]
    for name in ("sp500", "nasdaq"):
        s = load_returns(name)
        assert s.returns.shape[0] > 5000 and abs(s.returns.mean()) < 1e-10
        assert 0.5 < s.returns.std() < 3.0  # daily percent returns


