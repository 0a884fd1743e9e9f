r"""Uncertainty bounds ``G`` for the racing algorithm (Sec. 3.3 of Chen & Ghahramani 2016).

Alg. 1 eliminates arm ``i`` at stage ``t`` when the estimated gap to the leader
exceeds ``G(delta', T, sigma_hat, C)``, where ``T = T^(t)`` is the number of points
read so far.  Proposition 3 makes the race correct with probability ``1 - delta``
whenever ``G`` satisfies Eq. 5,

    P( exists t < t*:  mu_hat^(t) - mu > G(delta, T^(t), sigma_hat^(t), C) ) <= delta,

and every ``G`` here is exactly zero at ``T = N`` (the mean is then exact).

Three families are provided:

* **Empirical Bernstein-Serfling** (Eq. 6-7)::

      B_EBS(delta, n, s, C) = s sqrt(2 rho_n log(5/delta) / n) + kappa C log(5/delta) / n,
      kappa = 7/3 + 3/sqrt(2),
      rho_n = 1 - (n-1)/N            if n <= N/2,
              (1 - n/N)(1 + 1/n)     otherwise,
      G_EBS(delta, T, s, C) = B_EBS(delta / (t* - 1), T, s, C).

* **Normal** (Eq. 9) with the exact constant ``B_Normal`` of Corollary 4 / App. B::

      G_Normal(delta, T, s) = s / sqrt(T) * sqrt(1 - (T-1)/(N-1)) * B_Normal(delta, m1/N).

* **Normal with the union bound** (Eq. 27): the same ``G`` with
  ``B = Phi^{-1}(1 - delta / (t* - 1))``.

``B_Normal`` and the error event it inverts
------------------------------------------
Under Assumption 6 the standardised estimates ``z_t = (mu_hat^(t) - mu) / sd_t`` of
the stages ``t = 1 .. t*-1`` (cumulative sizes ``T_t = m1 2^(t-1)``, fractions
``pi_t = T_t / N``) are jointly Gaussian and, by Corollary 4 (Eq. 8), a Gauss-Markov
chain::

    z_t = rho_t z_{t-1} + sqrt(1 - rho_t^2) eps_t,
    rho_t^2 = A_t = pi_{t-1} (1 - pi_t) / (pi_t (1 - pi_{t-1})).

(``corr(mu_hat_s, mu_hat_t) = sqrt(Var_t / Var_s)`` for ``s < t`` when sampling
without replacement, and the finite-N variance ``(1/T)(1 - (T-1)/(N-1))`` makes the
correlation depend on ``pi`` only, so ``B_Normal`` depends on ``(delta, pi_1)`` and
not on N separately.)  Plugging ``G_Normal`` into Eq. 5 gives the one-sided
first-passage probability

    E_1(B) = P( max_{t < t*} z_t > B ),

and ``b_normal(delta, pi_1)`` (``event="one_sided"``, the default) solves
``E_1(B) = delta``: this is exactly the condition of Eq. 5 that Prop. 3 needs.

**What Table 1 of the paper inverts.**  Reproducing App. B shows that its entries
are the roots of the *two-sided* passage probability at level ``2 delta``,

    E_2(B) = P( max_{t < t*} |z_t| > B ) = 2 delta,

(``event="two_sided"``): they agree with that event to about 2e-3 over the whole
table except at ``delta = 0.49`` (where ``dB/d delta`` is large and the paper's
numerics drift by ~0.03), while the one-sided root departs from the table by up to
0.5 for large ``delta``.  Since ``E_2(B) <= 2 E_1(B)``, the table's ``B`` is never
larger than the one-sided one, i.e. it is slightly *anti*-conservative; the two
agree to better than 3e-3 for ``delta <= 0.05`` and differ by less than 0.01 at
``delta = 0.1``.  We default to the one-sided root, which is what Eq. 5 asks for.

Numerics: the passage probability is computed by propagating the sub-density of
the not-yet-crossed chain on a Gauss-Legendre grid (``z`` truncated below at
-9 sigma, 160 nodes; the result is stable to ~1e-7 in ``B``), accumulating the
exact Gaussian crossing probability of each step, so tiny ``delta`` (1e-6 and
below) lose no precision.  A root costs ~30 ms cold and is cached: a warm call is
a dictionary look-up (microseconds).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, special

__all__ = [
    "b_normal",
    "b_normal_table",
    "b_normal_traced",
    "b_normal_union",
    "passage_probability",
    "num_stages",
    "EBS_KAPPA",
]

EBS_KAPPA = 7.0 / 3.0 + 3.0 / math.sqrt(2.0)
_NODES = 160
_LOWER = -9.0


def num_stages(population_size: int, first_batch: int) -> int:
    """``t* = ceil(log2(N / m1)) + 1``: the number of stages of the doubling schedule."""
    k = 0
    while first_batch * 2**k < population_size:
        k += 1
    return k + 1


def _stage_fractions(first_fraction: float) -> np.ndarray:
    # stages t = 1 .. t*-1 have pi_t = pi_1 2^(t-1) < 1
    k = 0
    while first_fraction * 2.0**k < 1.0:
        k += 1
    return first_fraction * 2.0 ** np.arange(k)


def _norm_sf(z):
    return 0.5 * special.erfc(np.asarray(z) / math.sqrt(2.0))


def passage_probability(bound, first_fraction: float, event: str = "one_sided"):
    r"""Probability that the standardised stage estimates cross ``bound`` before ``t*``.

    ``event="one_sided"``: ``P(max_{t<t*} z_t > B)`` (Eq. 5 with ``G_Normal``);
    ``event="two_sided"``: ``P(max_{t<t*} |z_t| > B)``; ``z`` is the Gauss-Markov
    chain of Corollary 4 (Eq. 8) for the doubling schedule with
    ``pi_1 = first_fraction``.  ``bound`` may be a float or an array (vectorised).
    """
    bounds = np.atleast_1d(np.asarray(bound, dtype=np.float64))
    pis = _stage_fractions(first_fraction)
    if len(pis) == 0:
        out = np.zeros_like(bounds)
        return float(out[0]) if np.ndim(bound) == 0 else out
    two = event == "two_sided"
    lower = -bounds if two else np.full_like(bounds, _LOWER)
    valid = bounds > lower
    upper = np.where(valid, bounds, lower + 1.0)
    x, w = np.polynomial.legendre.leggauss(_NODES)
    half = 0.5 * (upper - lower)[:, None]
    x = half * x[None, :] + 0.5 * (upper + lower)[:, None]  # [nb, nodes]
    w = half * w[None, :]
    b = upper[:, None]
    crossed = _norm_sf(upper) * (2.0 if two else 1.0)
    density = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)  # z_1 below the bound
    for t in range(1, len(pis)):
        rho = math.sqrt(pis[t - 1] * (1.0 - pis[t]) / (pis[t] * (1.0 - pis[t - 1])))
        s = math.sqrt(1.0 - rho * rho)
        step = _norm_sf((b - rho * x) / s)
        if two:
            step = step + _norm_sf((b + rho * x) / s)
        crossed = crossed + np.sum(w * density * step, axis=1)
        kernel = np.exp(-0.5 * ((x[:, :, None] - rho * x[:, None, :]) / s) ** 2) / (
            s * math.sqrt(2.0 * math.pi)
        )
        density = np.einsum("bij,bj->bi", kernel, w * density)
    out = np.where(valid, np.minimum(crossed, 1.0), 1.0)
    return float(out[0]) if np.ndim(bound) == 0 else out


def _check(delta: float, first_fraction: float, upper: float = 0.5) -> None:
    if not (0.0 < delta < upper):
        raise ValueError(f"delta must lie in (0, {upper}), got {delta!r}")
    if not (0.0 < first_fraction <= 1.0):
        raise ValueError(
            f"first_fraction = first_batch / population_size must lie in (0, 1], "
            f"got {first_fraction!r}"
        )


@functools.lru_cache(maxsize=4096)
def _b_normal_cached(delta: float, first_fraction: float, event: str) -> float:
    if len(_stage_fractions(first_fraction)) == 0:
        return math.inf  # m1 = N: no stage before the exact one
    k = len(_stage_fractions(first_fraction))
    # bracket: one stage alone <= E(B) <= union over the k stages (Eq. 27)
    lo = float(-special.ndtri(delta)) - 1e-6
    hi = float(-special.ndtri(delta / k)) + 1e-6
    log_target = math.log(2.0 * delta if event == "two_sided" else delta)
    if event == "two_sided":
        lo = max(lo, 1e-6)
        hi = max(hi, float(-special.ndtri(delta / (2 * k)))) + 1e-6

    def f(b):
        return math.log(max(passage_probability(b, first_fraction, event), 1e-300)) - log_target

    return float(optimize.brentq(f, lo, hi, xtol=1e-8, rtol=1e-12))


def b_normal(delta: float, first_fraction: float, event: str = "one_sided") -> float:
    r"""The constant ``B_Normal(delta, pi_1)`` of Eq. 9 (Corollary 4, App. B, Table 1).

    Solves ``E(B) = delta`` for the first-passage probability of the standardised
    stage estimates (see the module docstring for the derivation)::

        one_sided (default):  P( max_{t<t*} z_t > B )   = delta     -- Eq. 5 exactly
        two_sided          :  P( max_{t<t*} |z_t| > B ) = 2 delta   -- what Table 1 tabulates

    Args:
        delta: error level in ``(0, 0.5)``.
        first_fraction: ``pi_1 = m1 / N`` in ``(0, 1]``.
        event: ``"one_sided"`` or ``"two_sided"``.

    Returns:
        ``B`` as a Python float (``inf`` when ``first_fraction == 1``).  Results are
        cached, so repeated calls cost microseconds.

    Example:
        >>> round(b_normal(0.05, 1e-3, event="two_sided"), 2)   # Table 1: 2.46819
        2.47
    """
    delta = float(delta)
    first_fraction = float(first_fraction)
    _check(delta, first_fraction)
    if event not in ("one_sided", "two_sided"):
        raise ValueError(f"event must be 'one_sided' or 'two_sided', got {event!r}")
    return _b_normal_cached(delta, first_fraction, event)


def b_normal_union(delta: float, num_stages_total: int) -> float:
    r"""The union-bound constant of Eq. 27: ``Phi^{-1}(1 - delta / (t* - 1))``."""
    _check(float(delta), 1.0, upper=1.0)
    if num_stages_total <= 1:
        return math.inf
    return float(-special.ndtri(delta / (num_stages_total - 1)))


@functools.lru_cache(maxsize=256)
def b_normal_table(first_fraction: float, event: str = "one_sided") -> tuple[np.ndarray, np.ndarray]:
    """``(log delta, B)`` on a grid, for :func:`b_normal_traced` (cached, ~1 s cold).

    ``B`` runs over ``[0, 8.5]`` in steps of 0.025 (``delta`` from about 0.5 down to
    1e-15); ``log delta = log E(B)`` (halved for the two-sided event).
    """
    grid = np.linspace(0.0, 8.5, 341)
    scale = 0.5 if event == "two_sided" else 1.0
    probs = np.concatenate(
        [passage_probability(chunk, first_fraction, event) for chunk in np.array_split(grid, 8)]
    )
    log_delta = np.log(np.maximum(scale * probs, 1e-300))
    # increasing in log delta for np.interp / jnp.interp
    return log_delta[::-1].copy(), grid[::-1].copy()


def b_normal_traced(delta, first_fraction: float, event: str = "one_sided"):
    """``B_Normal`` for a *traced* ``delta`` (e.g. vmapped over error levels).

    Linear interpolation of :func:`b_normal_table` in ``log delta``; agrees with
    :func:`b_normal` to about 1e-4.  ``first_fraction`` and ``event`` are static.
    """
    import jax.numpy as jnp

    if len(_stage_fractions(first_fraction)) == 0:
        return jnp.zeros_like(jnp.asarray(delta, jnp.float32))
    log_delta, grid = b_normal_table(float(first_fraction), event)
    return jnp.interp(jnp.log(delta), jnp.asarray(log_delta, jnp.float32), jnp.asarray(grid, jnp.float32))
