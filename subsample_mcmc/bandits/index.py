r"""Index policies (Maes, Wehenkel & Ernst, Sec. 2.2 and 6.1) as pure JAX triples.

Alg. 1 of Maes et al.: play every arm once (arms ``0 .. K-1`` in order), then at round
``t`` play ``argmax_k index(H^k_{t-1}, t)`` with ties broken at random.  The statistics
of arm k are ``t_k`` (plays), ``rbar_k`` (mean) and ``sigma_k`` (the *population*
standard deviation ``sqrt(mean(r^2) - rbar^2)``); ``t`` is the 1-indexed current round.

=============== ============================================================== ===========
policy          index                                                          defaults
=============== ============================================================== ===========
``ucb1``        ``rbar + sqrt(C ln t / t_k)`` (Eq. 2)                           C = 2
``ucb1_tuned``  ``rbar + sqrt(ln t / t_k min(1/4, V_k))`` (Eq. 3),              --
                ``V_k = sigma_k^2 + sqrt(2 ln t / t_k)`` (Auer et al. 2002)
``ucb1_normal`` ``rbar + sqrt(16 sigma_k^2 t_k/(t_k-1) ln(t-1)/t_k)`` (Eq. 4),  --
                plus Auer's rule: an arm played fewer than ``ceil(8 ln t)``
                times is played first
``ucb2``        epochs of length ``tau(r+1) - tau(r)``, ``tau(r) =              alpha=1e-3
                ceil((1+alpha)^r)``, chosen by ``rbar + sqrt((1+alpha)
                ln(e n / tau(r)) / (2 tau(r)))`` (Auer et al. 2002)
``ucb_v``       ``rbar + sqrt(2 sigma^2 zeta ln t / t_k) + c 3 zeta ln t/t_k``  c=1, zeta=1
                (Eq. 5)
``kl_ucb``      ``max{q : t_k kl(rbar, q) <= ln t + c ln ln t}``                c = 0
                (Garivier & Cappe 2011; ``kl`` is the Bernoulli divergence)
``eps_greedy``  ``eps_n = min(1, c K / (d^2 t))``: a uniform arm with           c=1, d=1
                probability ``eps_n``, else the best empirical mean
                (Auer 2002)
=============== ============================================================== ===========

``ucb1_tuned`` uses Auer's variance ``V_k`` (the rendered Eq. 3 of Maes et al. prints a
standard deviation; :func:`ucb1_tuned_std` is that reading, kept for comparison).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .base import Policy, argmax_random_ties

__all__ = [
    "IndexState", "arm_statistics", "index_policy", "ucb1", "ucb1_tuned", "ucb1_tuned_std",
    "ucb1_normal", "ucb2", "ucb_v", "kl_ucb", "eps_greedy", "bernoulli_kl", "kl_ucb_index",
    "greedy",
]


class IndexState(NamedTuple):
    """Sufficient statistics of every arm, plus the epoch bookkeeping of UCB2."""

    counts: jax.Array      # [K] t_k
    sums: jax.Array        # [K] sum of rewards
    sumsq: jax.Array       # [K] sum of squared rewards
    tau: jax.Array         # [K] UCB2: tau(r_k), the current epoch index value
    current: jax.Array     # UCB2: arm of the running epoch
    remaining: jax.Array   # UCB2: plays left in the running epoch


def _positive(name, value):
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")


def _init(params, key, spec):
    k = spec.num_arms
    z = jnp.zeros((k,), jnp.float32)
    return IndexState(z, z, z, jnp.ones((k,), jnp.float32), jnp.int32(0), jnp.int32(0))


def _record(state, arm, reward):
    return state._replace(counts=state.counts.at[arm].add(1.0),
                          sums=state.sums.at[arm].add(reward),
                          sumsq=state.sumsq.at[arm].add(reward * reward))


def _update(params, state, key, t, arm, reward, obs):
    return _record(state, arm, reward)


def arm_statistics(state: IndexState):
    """``(t_k, rbar_k, sigma_k)`` with safe values (0) for unplayed arms."""
    n = jnp.maximum(state.counts, 1.0)
    mean = state.sums / n
    var = jnp.maximum(state.sumsq / n - mean ** 2, 0.0)
    return state.counts, mean, jnp.sqrt(var)


def _first_unplayed(state):
    unplayed = state.counts == 0
    return jnp.any(unplayed), jnp.argmax(unplayed).astype(jnp.int32)


_SELECTS = {}


def index_policy(name, index_fn, default_params=(), param_names=()) -> Policy:
    """Alg. 1 of Maes et al. for an index ``index_fn(params, t_k, rbar_k, sigma_k, t) -> [K]``
    (all arguments broadcast over arms): initialisation round, then argmax with random
    tie-breaking.  NaN indices never win.  The select function is memoised per
    ``index_fn`` so that policies differing only in ``params`` share compiled code."""
    if index_fn not in _SELECTS:
        _SELECTS[index_fn] = _make_index_select(index_fn)
    return Policy(name, _init, _SELECTS[index_fn], _update, tuple(default_params),
                  tuple(param_names))


def _make_index_select(index_fn):
    def select(params, state, key, t, obs):
        any_unplayed, first = _first_unplayed(state)
        tk, mean, sd = arm_statistics(state)
        idx = index_fn(params, jnp.maximum(tk, 1.0), mean, sd, jnp.asarray(t, jnp.float32))
        return jnp.where(any_unplayed, first, argmax_random_ties(key, idx))

    return select


def _ucb1_index(params, tk, mean, sd, t):
    (c,) = params
    return mean + jnp.sqrt(jnp.maximum(c, 0.0) * jnp.log(t) / tk)


def _ucb1_tuned_index(params, tk, mean, sd, t):
    v = sd ** 2 + jnp.sqrt(2.0 * jnp.log(t) / tk)
    return mean + jnp.sqrt(jnp.log(t) / tk * jnp.minimum(0.25, v))


def _ucb1_tuned_std_index(params, tk, mean, sd, t):
    v = sd + jnp.sqrt(2.0 * jnp.log(t) / tk)
    return mean + jnp.sqrt(jnp.log(t) / tk * jnp.minimum(0.25, v))


def _ucb_v_index(params, tk, mean, sd, t):
    c, zeta = params
    e = zeta * jnp.log(t)
    return mean + jnp.sqrt(2.0 * sd ** 2 * e / tk) + c * 3.0 * e / tk


def _greedy_index(params, tk, mean, sd, t):
    return mean


def bernoulli_kl(p, q):
    """``kl(p, q) = p ln(p/q) + (1-p) ln((1-p)/(1-q))`` with the convention 0 ln 0 = 0."""
    eps = 1e-7
    q = jnp.clip(q, eps, 1.0 - eps)
    p = jnp.clip(p, 0.0, 1.0)
    a = jnp.where(p > 0, p * jnp.log(jnp.maximum(p, eps) / q), 0.0)
    b = jnp.where(p < 1, (1 - p) * jnp.log(jnp.maximum(1 - p, eps) / (1 - q)), 0.0)
    return a + b


def kl_ucb_index(mean, tk, bound, num_iters: int = 30):
    """``max{q in [rbar, 1] : t_k kl(rbar, q) <= bound}`` by bisection (the KL-UCB index
    of Garivier & Cappe 2011); ``kl(rbar, .)`` is increasing on ``[rbar, 1]``."""
    mean = jnp.clip(mean, 0.0, 1.0)
    lo, hi = mean, jnp.ones_like(mean)
    target = jnp.maximum(bound, 0.0) / tk

    def body(_, lh):
        lo, hi = lh
        mid = 0.5 * (lo + hi)
        ok = bernoulli_kl(mean, mid) <= target
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

    lo, hi = jax.lax.fori_loop(0, num_iters, body, (lo, hi))
    return lo


def _kl_ucb_index(params, tk, mean, sd, t):
    (c,) = params
    bound = jnp.log(t) + c * jnp.log(jnp.maximum(jnp.log(t), 1e-12))
    return kl_ucb_index(mean, tk, bound)


def ucb1(C: float = 2.0) -> Policy:
    """UCB1 (Eq. 2 of Maes et al.; Auer et al. 2002), default ``C = 2``; ``C > 0``."""
    _positive("C", C)
    return index_policy("ucb1", _ucb1_index, (float(C),), ("C",))


def ucb1_tuned() -> Policy:
    """UCB1-Tuned (Eq. 3 of Maes et al.) with Auer's variance bound
    ``min(1/4, sigma^2 + sqrt(2 ln t / t_k))``; parameter-free."""
    return index_policy("ucb1_tuned", _ucb1_tuned_index)


def ucb1_tuned_std() -> Policy:
    """UCB1-Tuned as printed in Eq. 3 of Maes et al. (``sigma_k``, not ``sigma_k^2``)."""
    return index_policy("ucb1_tuned_std", _ucb1_tuned_std_index)


def ucb_v(c: float = 1.0, zeta: float = 1.0) -> Policy:
    """UCB-V (Eq. 5 of Maes et al.; Audibert, Munos & Szepesvari 2009), ``c = zeta = 1``;
    both must be > 0."""
    _positive("c", c)
    _positive("zeta", zeta)
    return index_policy("ucb_v", _ucb_v_index, (float(c), float(zeta)), ("c", "zeta"))


def kl_ucb(c: float = 0.0) -> Policy:
    """KL-UCB (Garivier & Cappe 2011): ``max{q : t_k kl(rbar_k, q) <= ln t + c ln ln t}``;
    Maes et al. report ``c = 0`` and ``c = 3`` (and tuned negative values, so any finite
    ``c`` is accepted)."""
    if not jnp.isfinite(c):
        raise ValueError(f"c must be finite, got {c}")
    return index_policy("kl_ucb", _kl_ucb_index, (float(c),), ("c",))


def greedy() -> Policy:
    """Pure exploitation after the initialisation round (the index ``rbar_k``)."""
    return index_policy("greedy", _greedy_index)


def ucb1_normal() -> Policy:
    """UCB1-Normal (Eq. 4 of Maes et al.; Auer et al. 2002, Fig. 4): if an arm has been
    played fewer than ``ceil(8 ln t)`` times play it (the least played, ties at random),
    else ``argmax rbar_k + sqrt(16 q_k ln(t-1) / t_k)``, ``q_k = t_k sigma_k^2 / (t_k-1)``."""
    return Policy("ucb1_normal", _init, _ucb1_normal_select, _update, (), ())


def _ucb1_normal_select(params, state, key, t, obs):
    k1, k2 = jax.random.split(key)
    tf = jnp.asarray(t, jnp.float32)
    tk, mean, sd = arm_statistics(state)
    forced = tk < jnp.ceil(8.0 * jnp.log(tf))
    least = argmax_random_ties(k1, -tk)
    tk1 = jnp.maximum(tk, 2.0)
    idx = mean + jnp.sqrt(16.0 * tk1 * sd ** 2 / (tk1 - 1.0) * jnp.log(jnp.maximum(tf - 1.0, 1.0)) / tk1)
    return jnp.where(jnp.any(forced), least, argmax_random_ties(k2, idx))


def ucb2(alpha: float = 1e-3) -> Policy:
    r"""UCB2 (Auer, Cesa-Bianchi & Fischer 2002, Fig. 2), default ``alpha = 1e-3``.

    After one play of each arm, repeatedly pick ``j = argmax rbar_j + a_{n, r_j}``,
    ``a_{n,r} = sqrt((1+alpha) ln(e n / tau(r)) / (2 tau(r)))``, ``tau(r) =
    ceil((1+alpha)^r)``, ``n`` the number of plays so far, and play j
    ``tau(r_j+1) - tau(r_j)`` times, then ``r_j += 1``.  Epochs of length zero (frequent
    for small alpha) leave ``tau(r_j)`` and hence j's index unchanged, so j is re-chosen
    until a non-empty epoch; we jump there directly: the state keeps ``tau_j`` and an
    epoch of arm j moves ``tau_j`` to the next value of ``ceil((1+alpha)^r)``.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    return Policy("ucb2", _init, _ucb2_select, _ucb2_update, (float(alpha),), ("alpha",))



def next_tau(alpha, tau):
    r_next = jnp.floor(jnp.log(tau) / jnp.log1p(alpha) + 1e-6) + 1.0
    return jnp.maximum(jnp.ceil(jnp.exp(r_next * jnp.log1p(alpha)) - 1e-4), tau + 1.0)

def _ucb2_select(params, state, key, t, obs):
    (alpha,) = params
    any_unplayed, first = _first_unplayed(state)
    tk, mean, _ = arm_statistics(state)
    n = jnp.asarray(t, jnp.float32) - 1.0
    tau = state.tau
    bonus = jnp.sqrt((1.0 + alpha) * jnp.log(jnp.e * n / tau) / (2.0 * tau))
    chosen = argmax_random_ties(key, mean + bonus)
    arm = jnp.where(state.remaining > 0, state.current, chosen)
    return jnp.where(any_unplayed, first, arm)

def _ucb2_update(params, state, key, t, arm, reward, obs):
    (alpha,) = params
    was_init = state.counts[arm] == 0
    state2 = _record(state, arm, reward)
    continuing = state.remaining > 0
    new_tau = next_tau(alpha, state.tau[arm])
    plays = (new_tau - state.tau[arm]).astype(jnp.int32)
    start = ~was_init & ~continuing
    return state2._replace(
        tau=jnp.where(start, state.tau.at[arm].set(new_tau), state.tau),
        current=jnp.where(start, arm, state.current).astype(jnp.int32),
        remaining=jnp.where(start, plays - 1, jnp.where(continuing, state.remaining - 1, 0)
                            ).astype(jnp.int32))


def eps_greedy(c: float = 1.0, d: float = 1.0) -> Policy:
    r"""eps_n-greedy (Auer et al. 2002, Fig. 3): ``eps_t = min(1, c K / (d^2 t))``; with
    probability ``eps_t`` a uniform arm, else the best empirical mean (ties at random).
    Every arm is played once first, as for the index policies.  ``c, d > 0``."""
    _positive("c", c)
    _positive("d", d)
    return Policy("eps_greedy", _init, _eps_greedy_select, _update, (float(c), float(d)),
                  ("c", "d"))


def _eps_greedy_select(params, state, key, t, obs):
    c, d = params
    k1, k2, k3 = jax.random.split(key, 3)
    any_unplayed, first = _first_unplayed(state)
    k = state.counts.shape[0]
    eps = jnp.minimum(1.0, c * k / (d * d * jnp.asarray(t, jnp.float32)))
    _, mean, _ = arm_statistics(state)
    explore = jax.random.uniform(k1) < eps
    arm = jnp.where(explore, jax.random.randint(k2, (), 0, k), argmax_random_ties(k3, mean))
    return jnp.where(any_unplayed, first, arm).astype(jnp.int32)
