"""Confidence widths and stopping rules against closed forms written here from the papers.

Error-rate tests (error <= delta) pass for any bound that is too *wide*; these tests
do not: the widths are checked against the formulas of Chen & Ghahramani (2016)
(Eq. 6-7: empirical Bernstein-Serfling, Bardenet & Maillard 2015; Eq. 9 / Eq. 27:
Normal) and Jamieson et al. (2014, Fig. 1: lil'UCB), and a race on a fixed
population must stop at exactly the stage (or pull) the formula predicts.  Each
stopping test also checks that a width twice too large would predict another stop,
so a conservative but wrong implementation fails.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from subsample_mcmc.racing import (
    EBSBound,
    ExactBound,
    LilUCBBound,
    NormalBound,
    NormalUnionBound,
    b_normal,
    best_arm,
    index_stream,
)
from subsample_mcmc.racing.lil_ucb import lil_ucb_radius

KAPPA = 7.0 / 3.0 + 3.0 / math.sqrt(2.0)


def _stages(n, m1):
    """t* = ceil(log2(N / m1)) + 1 and T^(t) = min(m1 2^(t-1), N)."""
    t_star = math.ceil(math.log2(n / m1)) + 1
    return t_star, [min(m1 * 2 ** k, n) for k in range(t_star)]


def _ebs_closed_form(delta, t, n, m1, s, c):
    """Eq. 6-7: s sqrt(2 rho_T log(5/delta_t) / T) + kappa C log(5/delta_t) / T,
    delta_t = delta / (t* - 1); rho_T = 1 - pi_{T-1} (T <= N/2), (1 - pi_T)(1 + 1/T)."""
    t_star, _ = _stages(n, m1)
    log_term = math.log(5.0 / (delta / (t_star - 1)))
    rho = 1.0 - (t - 1.0) / n if t <= n / 2 else (1.0 - t / n) * (1.0 + 1.0 / t)
    return s * math.sqrt(2.0 * rho * log_term / t) + KAPPA * c * log_term / t


def _normal_closed_form(b, t, n, s):
    """Eq. 9: s / sqrt(T) sqrt(1 - (T-1)/(N-1)) B."""
    return s / math.sqrt(t) * math.sqrt(1.0 - (t - 1.0) / (n - 1.0)) * b


def _lil_closed_form(delta_prime, t, sigma, eps, beta):
    """Jamieson et al. (2014), Fig. 1: (1+beta)(1+sqrt(eps)) sqrt(2 sigma^2 (1+eps)
    log(log((1+eps) T) / delta') / T), inner log floored at 1."""
    inner = math.log(max((1.0 + eps) * t, math.e))
    return (1.0 + beta) * (1.0 + math.sqrt(eps)) * math.sqrt(
        2.0 * sigma ** 2 * (1.0 + eps) * math.log(inner / delta_prime) / t)


# ----------------------------------------------------------------------------- widths


@pytest.mark.parametrize("n,m1", [(10_000, 2), (100_000, 50), (777, 5)])
@pytest.mark.parametrize("delta", [0.1, 1e-3])
def test_ebs_width_is_the_bernstein_serfling_closed_form(n, m1, delta):
    bound = EBSBound()
    constant = bound.constant(delta, n, m1)
    t_star, _ = _stages(n, m1)
    assert constant == pytest.approx(math.log(5.0 * (t_star - 1) / delta), rel=1e-14)
    for t in [m1, 3 * m1, n // 2, n // 2 + 1, n - 3]:
        for s, c in [(1.0, 4.0), (0.01, 0.5), (0.0, 2.0)]:
            want = _ebs_closed_form(delta, t, n, m1, s, c)
            assert float(bound.width(constant, t, s, c, n)) == pytest.approx(want, rel=1e-12)
            # the race's float32 path gives the same number
            got32 = bound.width(jnp.float32(constant), jnp.int32(t), jnp.float32(s), jnp.float32(c), n)
            assert float(got32) == pytest.approx(want, rel=2e-5)
    assert float(bound.width(constant, n, 1.0, 1.0, n)) == 0.0  # G = 0 at T = N


@pytest.mark.parametrize("n,m1", [(10_000, 50), (3000, 7)])
def test_normal_widths_are_eq9_with_b_normal_and_the_union_constant(n, m1):
    delta = 0.05
    t_star, _ = _stages(n, m1)
    b = NormalBound().constant(delta, n, m1)
    assert b == b_normal(delta, m1 / n)
    bu = NormalUnionBound().constant(delta, n, m1)
    assert bu == pytest.approx(norm.ppf(1.0 - delta / (t_star - 1)), rel=1e-12)
    for bound, const in [(NormalBound(), b), (NormalUnionBound(), bu)]:
        for t in [m1, 5 * m1, n - 1]:
            want = _normal_closed_form(const, t, n, 0.7)
            assert float(bound.width(const, t, 0.7, 123.0, n)) == pytest.approx(want, rel=1e-12)
        assert float(bound.width(const, n, 0.7, 0.0, n)) == 0.0


def test_exact_bound_never_decides_before_n():
    assert float(ExactBound().width(0.0, 999, 1.0, 1.0, 1000)) == math.inf
    assert float(ExactBound().width(0.0, 1000, 1.0, 1.0, 1000)) == 0.0


@pytest.mark.parametrize("setting", ["heuristic", "theory"])
def test_lil_ucb_radius_is_the_closed_form(setting):
    bound = LilUCBBound(setting)
    eps, beta, _, delta_prime = bound.parameters(4, 0.05)
    if setting == "heuristic":  # Jamieson et al. Sec. 5 / Chen & Ghahramani
        assert (eps, beta, delta_prime) == (0.0, 0.5, 0.01)
    n, c = 10_000, 3.0
    for t in [1, 2, 3, 50, 4321]:
        want = _lil_closed_form(delta_prime, t, c / 2.0, eps, beta)
        assert float(bound.width(delta_prime, t, None, c, n)) == pytest.approx(want, rel=1e-12)
        assert float(lil_ucb_radius(delta_prime, t, c / 2.0, eps, beta)) == pytest.approx(want, rel=1e-12)
    assert float(bound.width(delta_prime, n, None, c, n)) == 0.0


# ----------------------------------------------------------------------- stopping rules


def _population(n, gap, noise, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(n)
    arm1 = base + gap + noise * rng.standard_normal(n)
    return np.stack([base, arm1]).astype(np.float32)


def _predicted_stop(rewards, key, m1, width_at):
    """First stage of the doubling schedule whose estimated gap exceeds the width,
    following the race's own reading order (:func:`index_stream`); with the margin
    by which every stage decides (to keep float32 rounding out of the test)."""
    n = rewards.shape[1]
    order = np.asarray(index_stream(key, n)(jnp.arange(n, dtype=jnp.int32)))
    r = np.asarray(rewards, np.float64)
    ranges = r.max(1) - r.min(1)
    _, sizes = _stages(n, m1)
    margin = math.inf
    for stage, t in enumerate(sizes, start=1):
        seen = r[:, order[:t]]
        means = seen.mean(1)
        leader = int(np.argmax(means))
        diff = seen[leader] - seen[1 - leader]
        gap = diff.mean()
        g = 0.0 if t == n else width_at(t, diff.std(), ranges.sum())
        margin = min(margin, abs(gap - g) / max(g, 1e-12))
        if gap > g:
            return stage, t, leader, margin
    raise AssertionError("unreachable: G = 0 at T = N")


@pytest.mark.parametrize("method", ["normal", "normal_union", "ebs"])
@pytest.mark.parametrize("seed", [0, 1])
def test_race_stops_at_the_stage_the_formula_predicts(method, seed):
    n, m1, delta = 1 << 14, 32, 0.05
    gap = {"normal": 0.12, "normal_union": 0.12, "ebs": 0.5}[method]
    rewards = _population(n, gap, 1.0, seed)
    key = jax.random.PRNGKey(seed + 10)
    t_star, _ = _stages(n, m1)
    if method == "ebs":
        def width(t, s, c, scale=1.0):
            return scale * _ebs_closed_form(delta, t, n, m1, s, c)
    else:
        # Eq. 9 with B_Normal (Corollary 4), or Eq. 27: B = Phi^{-1}(1 - delta / (t* - 1))
        b = b_normal(delta, m1 / n) if method == "normal" else norm.ppf(1.0 - delta / (t_star - 1))

        def width(t, s, c, scale=1.0):
            return scale * _normal_closed_form(b, t, n, s)

    stage, t_stop, arm, margin = _predicted_stop(rewards, key, m1, width)
    assert margin > 1e-3, "population too close to a decision boundary for a float32 race"
    assert 1 < stage < t_star, "pick a gap that stops mid-race"
    # power: a width twice too large (or never eliminating) predicts another stop
    wide_stage = _predicted_stop(rewards, key, m1, lambda t, s, c: width(t, s, c, 2.0))[0]
    assert wide_stage > stage
    r = best_arm(key, jnp.asarray(rewards), method=method, first_batch=m1, delta=delta,
                 heavy_tail_guard=False)
    assert int(r.arm) == arm == 1
    assert int(r.num_stages) == stage
    assert int(r.num_points_read) == t_stop
    assert int(r.num_rewards_read) == 2 * t_stop
    assert int(r.num_likelihood_evals) == 2 * int(r.num_points_computed)


def _lil_ucb_simulation(means, c, n, delta, width_scale=1.0):
    """Adapted lil'UCB (Sec. 3.2; Jamieson et al. 2014, Fig. 1, heuristic setting) on
    arms whose rewards are constant: pull argmax_i mu_i + radius(T_i) until some arm has
    T_i >= 1 + lambda sum_{j != i} T_j.  Returns (arm, total pulls, smallest UCB gap)."""
    d = len(means)
    eps, beta, lam, delta_prime = 0.0, 0.5, 1.0 + 10.0 / d, delta / 5.0
    pulls = np.ones(d)
    closest = math.inf
    while True:
        ucb = np.array([means[i] + (0.0 if pulls[i] >= n else width_scale * _lil_closed_form(
            delta_prime, pulls[i], c / 2.0, eps, beta)) for i in range(d)])
        top = np.sort(ucb)[-2:]
        closest = min(closest, top[1] - top[0])
        best = int(np.argmax(ucb))
        total = pulls.sum()
        if np.any(pulls >= 1 + lam * (total - pulls)):
            return int(np.argmax(pulls)), int(total), closest
        if pulls[best] >= n:
            return best, int(total), closest
        pulls[best] += 1


def test_lil_ucb_stops_after_the_pulls_the_formula_predicts():
    n, delta, c = 5000, 0.1, 0.5
    means = np.array([0.0, 0.5, 0.25], np.float32)  # exactly representable
    arm, total, closest = _lil_ucb_simulation(means.astype(np.float64), c, n, delta)
    assert closest > 1e-4, "a near tie of upper bounds: float32 could pull another arm"
    assert _lil_ucb_simulation(means, c, n, delta, width_scale=2.0)[1] != total
    rewards = jnp.asarray(np.repeat(means[:, None], n, axis=1))
    r = best_arm(jax.random.PRNGKey(0), rewards, method="lil_ucb", delta=delta, reward_range=c)
    assert int(r.arm) == arm == 1
    assert int(r.num_rewards_read) == total
    assert int(r.num_likelihood_evals) == 3 * total


def test_exact_method_computes_every_reward():
    rewards = _population(3000, 0.5, 1.0)
    r = best_arm(jax.random.PRNGKey(0), jnp.asarray(rewards), method="exact")
    assert int(r.num_points_read) == int(r.num_points_computed) == 3000
    assert int(r.num_likelihood_evals) == 2 * 3000 == int(r.num_rewards_read)


def test_a_bound_object_is_accepted_as_method():
    rewards = jnp.asarray(_population(4096, 0.12, 1.0))
    key = jax.random.PRNGKey(3)
    by_name = best_arm(key, rewards, method="normal_union", heavy_tail_guard=False)
    by_object = best_arm(key, rewards, method=NormalUnionBound(heavy_tail_guard=False))
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), by_name, by_object))
    with pytest.raises(ValueError, match="heavy_tail_guard"):
        best_arm(key, rewards, method=NormalBound(), heavy_tail_guard=False)
