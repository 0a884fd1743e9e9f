"""The parameter-space Taylor proxy (subsample_mcmc.kernels.proxy), second and third order.

Properties checked on a logistic regression (float64): the known sum ``proxy_sum`` equals
the sum of the per-datum terms the race subtracts (so the race's rewards sum to the full
log-likelihood minus a known term); the residual shrinks like the next order of ``D``
(``D^3`` for the second-order proxy, ``D^4`` for the third); the third-derivative sum equals
the closed form of a GLM, ``sum_n l'''(eta_n) x_n (x) x_n (x) x_n``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from subsample_mcmc.kernels import proxy_per_datum, proxy_residual, proxy_sum, taylor_proxy

N, P = 3000, 4


def _logistic_data(seed=0):
    rng = np.random.default_rng(seed)
    x = np.c_[np.ones(N), rng.normal(size=(N, P - 1))]  # NumPy float64, as users pass it
    y = (rng.random(N) < 1 / (1 + np.exp(-(x @ np.array([0.3, -1.0, 0.5, 0.8]))))).astype(np.float64)
    return x, y


def _ll(x, y):
    xj, yj = jnp.asarray(x), jnp.asarray(y)

    def ll(theta, idx):
        eta = xj[idx] @ theta
        return yj[idx] * eta - jnp.logaddexp(0.0, eta)

    return ll


@pytest.fixture(scope="module")
def x64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize("order", [2, 3])
def test_known_sum_equals_the_sum_of_the_per_datum_terms(x64, order):
    x, y = _logistic_data()
    ll = _ll(x, y)
    ref = jnp.array([0.25, -0.9, 0.45, 0.7])
    prx = taylor_proxy(ll, ref, N, chunk_size=700, order=order)  # a remainder chunk too
    assert (prx.third_sum is None) == (order == 2)
    theta = ref + jnp.array([0.05, -0.03, 0.02, 0.04])
    per_datum = jnp.sum(proxy_per_datum(ll, prx, theta, jnp.arange(N)))
    np.testing.assert_allclose(float(per_datum), float(proxy_sum(prx, theta)), rtol=1e-10)
    # with the constant: the residuals sum to the log-likelihood minus the known sum
    res = jnp.sum(proxy_residual(ll, prx, with_constant=True)(theta, jnp.arange(N)))
    total = jnp.sum(ll(theta, jnp.arange(N)))
    np.testing.assert_allclose(float(res + proxy_sum(prx, theta, with_constant=True)), float(total), rtol=1e-12)


@pytest.mark.parametrize("order", [2, 3])
def test_residual_is_of_the_next_order(x64, order):
    x, y = _logistic_data(1)
    ll = _ll(x, y)
    ref = jnp.array([0.3, -1.0, 0.5, 0.8])
    prx = taylor_proxy(ll, ref, N, order=order)
    direction = jnp.array([0.6, 0.3, -0.5, 0.4])
    idx = jnp.arange(N)

    def size(eps):  # the largest per-datum residual at D = eps * direction
        return float(jnp.max(jnp.abs(proxy_residual(ll, prx, with_constant=True)(ref + eps * direction, idx))))

    ratio = size(0.1) / size(0.05)  # 2^(order + 1) for a residual of order order + 1
    assert abs(np.log2(ratio) - (order + 1)) < 0.15, ratio


def test_third_derivative_sum_is_the_glm_closed_form(x64):
    x, y = _logistic_data(2)
    ll = _ll(x, y)
    ref = jnp.array([0.1, 0.4, -0.2, 0.3])
    prx = taylor_proxy(ll, ref, N, chunk_size=1024, order=3)
    p = 1 / (1 + np.exp(-(x @ np.asarray(ref))))
    third = -p * (1 - p) * (1 - 2 * p)  # d^3/d eta^3 of y eta - log(1 + e^eta)
    expected = np.einsum("n,ni,nj,nk->ijk", third, x, x, x)
    np.testing.assert_allclose(np.asarray(prx.third_sum), expected, rtol=1e-9, atol=1e-9)


def test_order_other_than_two_or_three_is_refused():
    with pytest.raises(ValueError, match="order must be 2 or 3"):
        taylor_proxy(lambda t, i: jnp.zeros(i.shape), jnp.zeros(2), 10, order=4)


def test_curvature_mismatch_tells_a_kink_from_a_smooth_likelihood():
    """``curvature_mismatch``: the full-data second differences of a smooth (logistic) log-likelihood
    agree with the proxy's Hessian (mismatch near 0); an L1 (Laplace) regression's per-datum Hessians
    are 0 almost everywhere while its sum is curved through the data that cross the kink (near 1)."""
    from subsample_mcmc.kernels.proxy import curvature_mismatch

    x, y = _logistic_data()
    ll = _ll(x, y)
    every = jnp.arange(N)
    theta = jnp.asarray([0.3, -1.0, 0.5, 0.8], jnp.float32)
    proxy = taylor_proxy(ll, theta, N)
    directions = 0.2 * jax.random.normal(jax.random.PRNGKey(0), (6, P))  # about the posterior's scale
    sums = jax.vmap(lambda t: jnp.sum(ll(t, every)))
    smooth = curvature_mismatch(sums, proxy, theta, directions)
    assert float(jnp.max(smooth)) < 0.1, smooth

    resid = jnp.asarray(x @ np.array([0.3, -1.0, 0.5, 0.8]) + np.random.default_rng(1).laplace(size=N), jnp.float32)
    xj = jnp.asarray(x, jnp.float32)

    def l1(t, idx):
        return -jnp.abs(resid[idx] - xj[idx] @ t)

    proxy1 = taylor_proxy(l1, theta, N)
    assert float(jnp.max(jnp.abs(proxy1.hess_sum))) == 0.0
    kinked = curvature_mismatch(jax.vmap(lambda t: jnp.sum(l1(t, every))), proxy1, theta, directions)
    assert float(jnp.median(kinked)) > 0.9, kinked  # the kernel's statistic: the median over directions
