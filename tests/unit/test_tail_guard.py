"""The heavy-tail guard's pieces: the stage moments against SciPy, and Sugden et al.'s sample-size
rule with its widening of the bound (the battery that tests the guard's error promise is in
tests/statistical/test_heavy_tails.py)."""

import jax.numpy as jnp
import numpy as np
from scipy import stats

from subsample_mcmc.racing.race import pair_moments, tail_guard


def test_pair_moments_match_scipy():
    rng = np.random.default_rng(3)
    for x in (rng.standard_normal(500), rng.lognormal(0, 1.5, 500), 5.0 + rng.standard_t(3, 500)):
        centre = x[:10].mean()
        u = x - centre
        sums = [jnp.asarray(np.sum(u ** k), jnp.float32) for k in (1, 2, 3, 4)]
        skew, kurt = pair_moments(jnp.asarray(500), *sums)
        np.testing.assert_allclose(float(skew), stats.skew(x), rtol=2e-3, atol=1e-4)
        np.testing.assert_allclose(float(kurt), stats.kurtosis(x, fisher=False), rtol=2e-3)


def test_tail_guard_rule():
    """Sugden et al.'s n >= 28 + 25 g1^2 (with excess kurtosis in place of g1^2 when larger); B grows with |g1| and with excess kurtosis, and
    tends to B as T grows; light tails leave B unchanged."""
    b, n = jnp.float32(3.0), 1_000_000
    allowed, b_small = tail_guard(jnp.asarray(100), jnp.float32(2.0), jnp.float32(3.0), b, n)
    assert not bool(allowed)  # 28 + 25 * 4 = 128 > 100
    allowed, _ = tail_guard(jnp.asarray(128), jnp.float32(2.0), jnp.float32(3.0), b, n)
    assert bool(allowed)
    for kurt in (1.8, 3.0):  # uniform, normal
        _, b0 = tail_guard(jnp.asarray(100), jnp.float32(0.0), jnp.float32(kurt), b, n)
        assert float(b0) == 3.0
    _, b_kurt = tail_guard(jnp.asarray(100), jnp.float32(0.0), jnp.float32(30.0), b, n)
    assert float(b_kurt) > 3.0
    allowed, _ = tail_guard(jnp.asarray(100), jnp.float32(0.0), jnp.float32(10.0), b, n)
    assert not bool(allowed)  # 28 + 25 * 7 > 100
    _, b_large = tail_guard(jnp.asarray(10_000), jnp.float32(2.0), jnp.float32(3.0), b, n)
    assert 3.0 < float(b_large) < float(b_small)
    # without replacement, the unread N - T points dominate near the end: wider again
    _, b_end = tail_guard(jnp.asarray(n - 100), jnp.float32(2.0), jnp.float32(3.0), b, n)
    assert float(b_end) > float(b_large)


def _top(x, count=None):
    """The race's running top-(K + 1) of |x|, descending, as a [1, K + 1] array."""
    from subsample_mcmc.racing.race import TAIL_ORDER_STATISTICS

    a = np.sort(np.abs(np.asarray(x)))[::-1][:TAIL_ORDER_STATISTICS + 1]
    return jnp.asarray(a[None, :], jnp.float32)


def test_hill_estimate_on_pareto_within_its_sd():
    """Exact Pareto(alpha) samples: given x_(k+1), the log-exceedances are Exp(alpha), so the Hill
    estimate H of 1 / alpha has mean 1 / alpha and sd (1 / alpha) / sqrt(k)."""
    from subsample_mcmc.racing.race import hill_tail

    rng = np.random.default_rng(0)
    for alpha in (1.1, 2.0):
        hs = []
        for _ in range(100):
            h, t, k = hill_tail(_top(rng.pareto(alpha, 4000) + 1.0), jnp.asarray(4000))
            hs.append(float(h[0]))
        hs, k = np.array(hs), int(k)
        sd = (1.0 / alpha) / np.sqrt(k)
        assert k == 32
        assert abs(hs.mean() - 1.0 / alpha) < 3.0 * sd / np.sqrt(len(hs)), (alpha, hs.mean())
        assert 0.7 * sd < hs.std() < 1.3 * sd, (alpha, hs.std(), sd)
        assert np.mean(np.abs(hs - 1.0 / alpha) < 2.0 * sd) > 0.9


def test_tail_width_negligible_on_normal_data():
    """Light tails: the tail-index width is a small fraction of the Normal bound's CLT width."""
    from subsample_mcmc.racing.bounds import NormalBound, b_normal
    from subsample_mcmc.racing.race import tail_sum_width
    from jax.scipy.special import ndtr

    n, b = 100_000, b_normal(0.001, 50 / 100_000)
    delta_cmp = jnp.float32(ndtr(-b))
    rng = np.random.default_rng(1)
    for t in (250, 1000, 10_000):
        x = rng.standard_normal(t)
        clt = float(NormalBound().width(b, t, x.std(), 0.0, n))
        for power in (0.25, 1.0):
            w = float(tail_sum_width(_top(x - x[:50].mean()), jnp.asarray(t), n, delta_cmp ** power)[0])
            assert 0.0 <= w < 0.05 * clt, (t, power, w, clt)
    # and it is zero once everything is read
    x = rng.standard_normal(n)
    assert float(tail_sum_width(_top(x), jnp.asarray(n), n, delta_cmp)[0]) == 0.0


def test_tail_width_grows_with_heavier_tails():
    """Same threshold scale, heavier tail (smaller alpha): a wider tail term; and a smaller level
    (delta) widens it as delta^(-1 / alpha)."""
    from subsample_mcmc.racing.race import tail_sum_width

    rng = np.random.default_rng(2)
    w = {a: float(tail_sum_width(_top(rng.pareto(a, 2000) + 1.0), jnp.asarray(2000), 100_000,
                                 jnp.float32(1e-3))[0]) for a in (1.1, 3.0)}
    assert w[1.1] > 10.0 * w[3.0]
    x = _top(rng.pareto(1.5, 2000) + 1.0)
    w1, w2 = (float(tail_sum_width(x, jnp.asarray(2000), 100_000, jnp.float32(d))[0]) for d in (1e-2, 1e-4))
    assert w2 > 5.0 * w1


def test_decisive_lognormal_race_still_stops_early():
    """LogNormal(0, 2) rewards whose gap is far beyond the bound: without the tail-index width the race
    stops after its first batch (50 of 100,000 points); with it, within the first stages (at T = 50
    the Hill estimate uses k = 6 order statistics and is noisy), far from reading on."""
    from subsample_mcmc.racing.bounds import NormalBound
    from subsample_mcmc.testing import make_problem, run_setting

    pr = make_problem(0, 2, 100_000, "lognormal", 1e-6)
    old = run_setting(pr, method=NormalBound(tail_index_guard=False), delta=0.01, num_races=20, batch_size=None)
    new = run_setting(pr, method=NormalBound(tail_index_guard=True), delta=0.01, num_races=20, batch_size=None)
    assert old["fraction_read"] < 0.01
    assert new["fraction_read"] < 0.003, (new["fraction_read"], old["fraction_read"])
    assert new["errors"] == 0
