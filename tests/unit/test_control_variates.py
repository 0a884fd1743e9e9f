"""Data-space Taylor control variates (Eq. 11) with bins and exactly-read outliers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from subsample_mcmc.racing import best_arm, make_data_bins, taylor_control_variate


def _student_loglik(theta, y, nu=4.0):
    z = y - theta
    return -0.5 * (nu + 1.0) * jnp.log1p(z * z / nu)


def test_expectation_matches_brute_force_mean():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((5000, 2)) * [1.0, 3.0] + [0.5, -1.0]
    bins = make_data_bins(data, num_bins=20)
    theta = jnp.array([[0.3, 0.1], [0.0, -0.5], [1.0, 1.0]])

    def loglik(y):
        return -jnp.sum((y[None] - theta) ** 2 * jnp.array([1.0, 0.3]), -1) + jnp.sin(y[0]) * theta[:, 1]

    cv = taylor_control_variate(loglik, bins)
    h = cv.values(jnp.arange(5000))
    np.testing.assert_allclose(np.asarray(cv.mean()), np.asarray(h).mean(1), rtol=2e-4, atol=2e-4)


def test_quadratic_likelihood_is_cancelled_exactly():
    """For a quadratic log-likelihood h = l, the residual rewards are constant: the race
    ends at the first stage and still returns the exact arm."""
    rng = np.random.default_rng(1)
    n = 50_000
    data = rng.standard_normal(n).astype(np.float32)
    theta = jnp.array([0.0, 0.01, 0.02, 0.015])
    loglik = lambda y: -0.5 * (y[0] - theta) ** 2  # noqa: E731
    rewards = -0.5 * (jnp.asarray(data)[None] - theta[:, None]) ** 2
    cv = taylor_control_variate(loglik, make_data_bins(data, num_bins=10))
    truth = int(np.argmax(np.asarray(rewards, np.float64).mean(1)))
    r = best_arm(jax.random.PRNGKey(0), rewards, control_variate=cv, delta=0.01)
    assert int(r.arm) == truth
    assert int(r.num_stages) == 1


def test_control_variate_reduces_data_read():
    """Student-t likelihood, two close parameters (an MH-like race): with the data-space
    control variate the race reads far fewer points on average."""
    rng = np.random.default_rng(2)
    n = 50_000
    data = jnp.asarray(rng.standard_t(4.0, n).astype(np.float32))
    theta = jnp.array([0.0, 0.008])
    rewards = jax.vmap(lambda t: _student_loglik(t, data))(theta)
    loglik = lambda y: _student_loglik(theta, y[0])  # noqa: E731
    cv = taylor_control_variate(loglik, make_data_bins(data, num_bins=50))
    truth = int(np.argmax(np.asarray(rewards, np.float64).mean(1)))
    keys = jax.random.split(jax.random.PRNGKey(0), 20)
    plain = jax.vmap(lambda k: best_arm(k, rewards, delta=0.05))(keys)
    with_cv = jax.vmap(lambda k: best_arm(k, rewards, delta=0.05, control_variate=cv))(keys)
    assert float(with_cv.num_points_read.mean()) < 0.2 * float(plain.num_points_read.mean())
    assert np.mean(np.asarray(with_cv.arm) == truth) >= 0.8


@pytest.mark.parametrize("as_function", [False, True])
def test_exact_points_are_summed_exactly(as_function):
    rng = np.random.default_rng(3)
    n = 8000
    data = rng.standard_t(3.0, n).astype(np.float32)
    theta = jnp.array([0.0, 0.02, -0.01])
    table = jax.vmap(lambda t: _student_loglik(t, jnp.asarray(data), 3.0))(theta)
    bins = make_data_bins(data, num_bins=16, exact_fraction=0.2)
    assert bins.exact_indices.shape[0] == int(0.2 * n)
    # the exact points are the farthest from their bin's reference
    dist = np.abs(data - np.asarray(bins.reference)[np.asarray(bins.bin_of), 0])
    assert dist[np.asarray(bins.exact_indices)].min() >= dist[np.asarray(bins.raced_indices)].max()
    cv = taylor_control_variate(lambda y: _student_loglik(theta, y[0], 3.0), bins)
    rewards = (lambda idx: table[:, idx]) if as_function else table
    kw = dict(num_arms=3, population_size=n) if as_function else {}
    n_race = n - int(0.2 * n)
    for offset in ([0.0, 0.0, 0.0], [0.002, 0.0, 0.0], [0.0, -0.01, 0.02]):
        offset = jnp.array(offset)
        r = best_arm(jax.random.PRNGKey(0), rewards, control_variate=cv, first_batch=n_race,
                     arm_offset=offset, **kw)
        truth = int(np.argmax(np.asarray(table, np.float64).mean(1) + np.asarray(offset)))
        assert int(r.arm) == truth
        assert int(r.num_rewards_read) == 3 * n


def test_bins_validation():
    with pytest.raises(ValueError, match="NaN"):
        make_data_bins(np.array([0.0, np.nan, 1.0]))
    with pytest.raises(ValueError, match="exact_fraction"):
        make_data_bins(np.arange(10.0), exact_fraction=1.0)
    with pytest.raises(ValueError, match="shape"):
        make_data_bins(np.zeros((2, 3, 4)))


def test_linear_feature_expansion_equals_the_data_space_expansion():
    """For rewards that depend on y through z_i = P_i y + c_i, Eq. 11 in feature space is the
    data-space expansion (chain rule), at O(p') per reward instead of O(p^2)."""
    rng = np.random.default_rng(0)
    y = rng.normal(size=(3000, 5))
    p_mat = jnp.asarray(rng.normal(size=(3, 2, 5)) * 0.3, jnp.float32)
    shift = jnp.asarray(rng.normal(size=(3, 2)), jnp.float32)

    def f(z):  # [D, 2] -> [D], arm i uses z_i only
        return -jnp.log1p(z[:, 0] ** 2) + jnp.sin(z[:, 1])

    bins = make_data_bins(y, num_bins=20, exact_fraction=0.1)
    feat = taylor_control_variate(f, bins, features=(p_mat, shift))
    data_space = taylor_control_variate(lambda yy: f(jnp.einsum("dqp,p->dq", p_mat, yy) + shift), bins)
    idx = jnp.arange(200)
    np.testing.assert_allclose(np.asarray(feat.values(idx)), np.asarray(data_space.values(idx)), rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(np.asarray(feat.mean()), np.asarray(data_space.mean()), rtol=2e-4, atol=2e-4)
    with pytest.raises(ValueError, match="features must be"):
        taylor_control_variate(f, bins, features=(p_mat[:, :, :3], shift))


def _logistic_phi(z, w):
    return w * z[0] - jnp.logaddexp(0.0, z[0])


@pytest.mark.parametrize("order", [2, 3])
def test_linear_feature_proxy_is_a_taylor_polynomial_with_exact_sums(order):
    """The per-datum proxy in linear features (NumPy float64 inputs): its precomputed sums equal the
    sum of its per-datum values at any A, over all points and over a raced subset, and the residual
    l_n - h_n shrinks like |A - A*|^(order + 1) (a wrong derivative or moment would break either)."""
    from subsample_mcmc.racing import linear_feature_proxy

    rng = np.random.default_rng(3)
    n = 3000
    x = np.c_[np.ones(n), rng.normal(size=(n, 2))]
    beta = np.array([-0.3, 0.8, -0.5])
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-x @ beta))).astype(np.float64)
    ref = beta[None, :]
    prox = linear_feature_proxy(_logistic_phi, ref, x, y, order=order)
    direction = np.array([[0.5, -0.3, 0.4]])

    def exact(a):
        z = x @ np.asarray(a).T
        return y * z[:, 0] - np.logaddexp(0.0, z[:, 0])

    residuals = []
    for eps in (0.2, 0.1):
        a = jnp.asarray(ref + eps * direction, jnp.float32)
        h = np.asarray(prox.values(a, jnp.arange(n)), np.float64)
        np.testing.assert_allclose(float(prox.total_sum(a)), h.sum(), rtol=1e-4)
        residuals.append(np.abs(exact(ref + eps * direction) - h).sum())
    assert residuals[0] / residuals[1] > 0.7 * 2 ** (order + 1), residuals
    raced = np.sort(rng.choice(n, size=2000, replace=False))
    sub = prox.restricted(raced)
    a = jnp.asarray(ref + 0.3 * direction, jnp.float32)
    np.testing.assert_allclose(float(sub.total_sum(a)), float(jnp.sum(sub.values(a, jnp.asarray(raced)))), rtol=1e-4)
    with pytest.raises(ValueError, match="reference_matrix must have shape"):
        linear_feature_proxy(_logistic_phi, ref[:, :2], x, y)
    with pytest.raises(ValueError, match="order must be 2 or 3"):
        linear_feature_proxy(_logistic_phi, ref, x, y, order=4)


def test_linear_feature_proxy_sums_over_its_active_entries_and_refuses_others():
    """With ``active`` (the entries of A that can move, as ModelSelection finds them at init) the
    proxy's sums contract smaller moments and still equal the sum of its per-datum values (NumPy
    float64 inputs, two features, one of them a scale whose row moves in one entry only, as ARCH's nu);
    a matrix that moves an entry outside ``active`` gets NaN, not a wrong sum, and a race's mean then
    sums its per-datum values."""
    from subsample_mcmc.racing import linear_feature_proxy

    rng = np.random.default_rng(5)
    n = 2000
    x = np.c_[np.ones(n), rng.normal(size=(n, 3))]
    y = rng.normal(size=n) * 1.3 + x[:, 1:] @ np.array([0.4, -0.2, 0.1])

    def hetero(z, w):  # mean z0, log-variance z1 (the second row of A: its intercept only)
        return -0.5 * z[1] - 0.5 * (w - z[0]) ** 2 * jnp.exp(-z[1])

    ref = np.array([[0.1, 0.4, -0.2, 0.1], [0.5, 0.0, 0.0, 0.0]])
    raced = np.sort(rng.choice(n, size=1500, replace=False))
    base = linear_feature_proxy(hetero, ref, x, y, order=3, sums=False)
    active = np.array([0, 1, 2, 3, 4])  # row 0 and the log-variance intercept
    full, sub = base.restricted(raced), base.restricted(raced, active)
    assert sub.m3.shape == (5, 5, 5) and full.m3.shape == (2, 4, 2, 4, 2, 4)
    for _ in range(3):
        a = ref.copy()
        a[0] += rng.normal(size=4) * 0.1
        a[1, 0] += rng.normal() * 0.1
        a = jnp.asarray(a, jnp.float32)
        h = float(jnp.sum(base.values(a, jnp.asarray(raced))))
        np.testing.assert_allclose(float(sub.total_sum(a)), h, rtol=1e-4)
        np.testing.assert_allclose(float(sub.total_sum(a)), float(full.total_sum(a)), rtol=1e-5)
    outside = jnp.asarray(ref, jnp.float32).at[1, 2].add(0.1)
    assert np.isnan(float(sub.total_sum(outside))) and np.isfinite(float(full.total_sum(outside)))
    # a race's mean then sums the per-datum values (a rejected MH proposal or a wrong model draw otherwise)
    from subsample_mcmc.racing import ArmControlVariates

    cv = ArmControlVariates((sub, sub), (outside, a), jnp.asarray(raced), jnp.asarray(np.setdiff1d(np.arange(n), raced)))
    mean = np.asarray(jax.jit(lambda c: c.mean())(cv))
    np.testing.assert_allclose(mean[0], float(jnp.sum(base.values(outside, jnp.asarray(raced)))) / raced.size, rtol=1e-4)
    np.testing.assert_allclose(mean[1], float(sub.total_sum(a)) / raced.size, rtol=1e-5)


def test_a_race_takes_known_exact_sums_instead_of_reading_those_points():
    """``ArmControlVariates.exact_sums`` (the arms' sums over the exactly-read points, when the caller has
    them): a race given the right sums draws what the race that reads the points draws, from the same
    points, and counts the rewards it did not compute as not computed; given wrong sums it draws from
    them (they are used, not ignored); a non-finite sum stops it without a draw, as a non-finite reward
    does.  ``fill_exact_sums`` computes the unknown (NaN) entries only. NumPy float64 inputs."""
    from subsample_mcmc.racing import ArmControlVariates, fill_exact_sums, linear_feature_proxy, sample_discrete

    rng = np.random.default_rng(3)
    n = 3000
    x = np.c_[np.ones(n), rng.normal(size=(n, 2))]
    y = (rng.uniform(size=n) < 0.4).astype(np.float64)
    ref = np.array([[-0.4, 0.3, -0.1]])
    exact = np.sort(rng.choice(n, size=300, replace=False))
    raced = np.setdiff1d(np.arange(n), exact)
    base = linear_feature_proxy(_logistic_phi, ref, x, y, order=3, sums=False)
    proxy = base.restricted(raced)
    mats = tuple(jnp.asarray(ref + d, jnp.float32) for d in (0.0, 0.01, -0.012))
    xj, yj = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)

    def points(a, idx):  # the logistic log-likelihood of every datum in idx at the features' matrix a
        z = xj[idx] @ a[0]
        return yj[idx] * z - jnp.logaddexp(0.0, z)

    def rewards(idx):
        return jnp.stack([points(a, idx) for a in mats])

    sums = np.asarray(jnp.sum(rewards(jnp.asarray(exact)), axis=1))
    log_f0 = jnp.zeros(3)

    def draw(key, exact_sums):
        cv = ArmControlVariates((proxy,) * 3, mats, jnp.asarray(raced), jnp.asarray(exact), exact_sums=exact_sums)
        return sample_discrete(key, log_f0, rewards, population_size=n, control_variate=cv, delta=0.05)

    draw = jax.jit(draw)
    for seed in range(5):
        key = jax.random.PRNGKey(seed)
        read, given = draw(key, None), draw(key, jnp.asarray(sums))
        assert int(read.value) == int(given.value)
        assert int(read.race.num_points_read) == int(given.race.num_points_read)
        assert int(read.race.num_likelihood_evals) - int(given.race.num_likelihood_evals) == 3 * exact.size
    # sums that favour arm 2 by 200 nats: the race follows them
    wrong = draw(jax.random.PRNGKey(0), jnp.asarray(sums + np.array([0.0, 0.0, 200.0])))
    assert int(wrong.value) == 2
    bad = draw(jax.random.PRNGKey(0), jnp.asarray(sums * np.array([1.0, np.inf, 1.0])))
    assert int(bad.value) == -1 or bool(bad.race.nonfinite)
    # fill_exact_sums: the NaN entries are computed, a known one is kept (its function is not what it returns)
    cv = ArmControlVariates((proxy,) * 3, mats, jnp.asarray(raced), jnp.asarray(exact),
                            exact_sums=jnp.asarray([sums[0], np.nan, np.nan], jnp.float32))
    fns = [lambda: jnp.float32(-1e9)] + [lambda a=a: jnp.sum(points(a, jnp.asarray(exact))) for a in mats[1:]]
    filled = np.asarray(jax.jit(lambda c: fill_exact_sums(c, fns).exact_sums)(cv))
    np.testing.assert_allclose(filled, sums, rtol=1e-5)
    assert fill_exact_sums(cv._replace(exact_sums=None), fns).exact_sums is None


def test_feature_proxy_table_gives_each_proxys_polynomial_from_one_row_per_datum():
    """The model race's packed table (NumPy float64 covariates): at random feature matrices, under jit and
    with a chain axis under vmap, it gives every proxy's own ``values`` (one, two and three features,
    orders 2 and 3, covariates shared as a prefix, in another order, or not at all); each distinct
    covariate column is stored once. A wrong monomial coefficient (a missing 1/a!) or a wrong column
    would break the equality."""
    from subsample_mcmc.racing import ArmControlVariates, feature_proxy_table, linear_feature_proxy

    rng = np.random.default_rng(11)
    n = 700
    x = np.c_[np.ones(n), rng.normal(size=(n, 4))]
    y = rng.normal(size=n)
    other = rng.normal(size=(n, 2))

    def hetero(z, w):  # mean z0, log-variance z1
        return -0.5 * z[1] - 0.5 * (w - z[0]) ** 2 * jnp.exp(-z[1])

    def three(z, w):
        return _logistic_phi(z, w > 0) - 0.5 * (w - z[1]) ** 2 * jnp.exp(-z[2])

    specs = [(_logistic_phi, x[:, :3], 1, 3), (hetero, x, 2, 3), (hetero, x[:, [0, 3, 1]], 2, 2),
             (three, np.c_[x[:, :2], other], 3, 3), (_logistic_phi, other, 1, 2)]
    proxies, refs = [], []
    for phi, cov, pf, order in specs:
        ref = rng.normal(size=(pf, cov.shape[1])) * 0.3
        proxies.append(linear_feature_proxy(phi, ref, cov, y, order=order))
        refs.append(ref)
    table = feature_proxy_table(proxies)
    monomials = sum(len(layout[1]) for layout in table.layout)
    assert monomials == 4 + 10 + 6 + 20 + 3
    assert table.table.shape == (n, monomials + 5 + 2)  # x's five columns and other's two, once each
    idx = jnp.asarray(rng.choice(n, size=300, replace=False))

    def both(mats):
        cv = ArmControlVariates(tuple(proxies), mats, idx, idx[:0])
        return cv.values(idx), cv._replace(table=table).values(idx)

    for _ in range(3):
        mats = tuple(jnp.asarray(r + rng.normal(size=r.shape) * 0.2, jnp.float32) for r in refs)
        own, packed = jax.jit(both)(mats)
        np.testing.assert_allclose(np.asarray(packed), np.asarray(own), rtol=2e-5, atol=2e-5)
    chains = jax.tree.map(lambda v: jnp.stack([v, v]), table)  # vectorized chains carry the table per chain
    one = jax.vmap(lambda t, m: t.values(m, tuple(p.reference for p in proxies), idx))(chains, jax.tree.map(
        lambda v: jnp.stack([v, v]), mats))
    np.testing.assert_allclose(np.asarray(one[1]), np.asarray(own), rtol=2e-5, atol=2e-5)
    with pytest.raises(ValueError, match="holds 5 proxies, got 2"):
        table.values(mats[:2], tuple(p.reference for p in proxies[:2]), idx)


def test_linear_feature_proxy_compiles_its_derivatives_once_per_likelihood():
    """The features' derivatives are one compiled program per likelihood function, whatever the
    covariates' width or the data's size (ModelSelection's candidate models share it: one
    compilation instead of two per model); the last chunk, padded to the chunk size, gives the same
    per-datum coefficients as one chunk of everything."""
    from subsample_mcmc.racing import linear_feature_proxy
    from subsample_mcmc.racing.control_variates import _feature_derivatives

    def phi(z, w):  # a fresh function: its own compiled program
        return w * z[0] - jnp.logaddexp(0.0, z[0])

    rng = np.random.default_rng(8)
    x = np.c_[np.ones(2500), rng.normal(size=(2500, 4))]
    y = (rng.uniform(size=2500) < 0.4).astype(float)
    chunked = linear_feature_proxy(phi, np.full((1, 5), 0.1), x, y, chunk_size=1024, sums=False)
    linear_feature_proxy(phi, np.full((1, 3), 0.1), x[:2300, :3], y[:2300], chunk_size=1024, sums=False)
    assert _feature_derivatives(phi, True, 3)._cache_size() == 1
    whole = linear_feature_proxy(phi, np.full((1, 5), 0.1), x, y, chunk_size=2500, sums=False)
    for name in ("value", "d1", "d2", "d3"):
        np.testing.assert_allclose(np.asarray(getattr(chunked, name)), np.asarray(getattr(whole, name)), rtol=1e-6)


def test_linear_feature_proxy_accepts_an_unhashable_likelihood_object():
    """A likelihood given as a callable object that defines ``__eq__`` (hence no ``__hash__``), as
    a dataclass does, is not cached by function but still gets its proxy, equal to the one of the
    same likelihood given as a plain function."""
    import dataclasses

    from subsample_mcmc.racing import linear_feature_proxy

    @dataclasses.dataclass
    class Logistic:
        scale: float

        def __call__(self, z, w):
            return w * self.scale * z[0] - jnp.logaddexp(0.0, self.scale * z[0])

    with pytest.raises(TypeError):
        hash(Logistic(1.0))
    rng = np.random.default_rng(9)
    x = np.c_[np.ones(600), rng.normal(size=(600, 2))]
    y = (rng.uniform(size=600) < 0.3).astype(float)
    ref = np.full((1, 3), 0.2)
    from_object = linear_feature_proxy(Logistic(1.0), ref, x, y, chunk_size=256)
    from_function = linear_feature_proxy(_logistic_phi, ref, x, y, chunk_size=256)
    for name in ("value", "d1", "d2", "d3", "total"):
        np.testing.assert_allclose(np.asarray(getattr(from_object, name)),
                                   np.asarray(getattr(from_function, name)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_features", [1, 2, 3, 4])
def test_taylor_polynomial_of_the_feature_proxy_equals_its_definition(num_features):
    """The per-datum proxy polynomial (sums of elementwise products for up to three features,
    einsums beyond) equals ``value + d1.dz + dz'd2 dz / 2 + d3[dz, dz, dz] / 6`` computed in NumPy
    float64, with and without the cubic term."""
    from subsample_mcmc.racing.control_variates import _taylor_polynomial

    rng = np.random.default_rng(num_features)
    m, p = 50, num_features
    value, d1, d2, d3, dz = (rng.normal(size=(m,) + (p,) * k) for k in (0, 1, 2, 3, 1))
    quad = value + np.einsum("ma,ma->m", d1, dz) + 0.5 * np.einsum("ma,mab,mb->m", dz, d2, dz)
    cubic = quad + np.einsum("ma,mb,mc,mabc->m", dz, dz, dz, d3) / 6.0
    f32 = [jnp.asarray(v, jnp.float32) for v in (value, d1, d2, d3, dz)]
    np.testing.assert_allclose(np.asarray(_taylor_polynomial(*f32)), cubic, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(_taylor_polynomial(f32[0], f32[1], f32[2], None, f32[4])), quad,
                               rtol=1e-4, atol=1e-4)
