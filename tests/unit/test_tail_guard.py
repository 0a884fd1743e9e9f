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
