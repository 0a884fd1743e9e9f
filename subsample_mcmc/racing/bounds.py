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

Each family is an object (:class:`NormalBound`, :class:`NormalUnionBound`,
:class:`EBSBound`, and :class:`ExactBound` for reading everything): a frozen,
hashable :class:`ConfidenceBound` that knows its constant (:meth:`~ConfidenceBound.constant`:
``B`` or ``log(5 / delta_t)``), its width ``G`` (:meth:`~ConfidenceBound.width`, the
number Alg. 1 compares the estimated gap with) and whether the race's heavy-tail
guard applies.  The race (:func:`~subsample_mcmc.racing.race.run_race`) calls these
methods; figures call the same ones, so each ``G`` is written once.
:func:`clopper_pearson` gives the exact interval used to check error rates.

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

from dataclasses import dataclass
from typing import ClassVar, Optional

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize, special

from .schedule import _doublings, num_stages

__all__ = [
    "b_normal",
    "b_normal_table",
    "b_normal_traced",
    "b_normal_union",
    "passage_probability",
    "EBS_KAPPA",
    "ConfidenceBound",
    "NormalBound",
    "NormalUnionBound",
    "EBSBound",
    "ExactBound",
    "clopper_pearson",
]

EBS_KAPPA = 7.0 / 3.0 + 3.0 / math.sqrt(2.0)
_NODES = 160
_LOWER = -9.0


def _stage_fractions(first_fraction: float) -> np.ndarray:
    """``pi_t = pi_1 2^(t-1)`` of the stages ``t = 1 .. t*-1`` (all ``< 1``); the count
    is :func:`~.schedule.num_stages` ``- 1``, written in fractions."""
    return first_fraction * 2.0 ** np.arange(_doublings(first_fraction, 1.0))


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
    if len(_stage_fractions(first_fraction)) == 0:
        return jnp.zeros_like(jnp.asarray(delta, jnp.float32))
    log_delta, grid = b_normal_table(float(first_fraction), event)
    return jnp.interp(jnp.log(delta), jnp.asarray(log_delta, jnp.float32), jnp.asarray(grid, jnp.float32))


# --------------------------------------------------------------------------------------
# Bounds as objects: what Alg. 1 compares, one home for each G
# --------------------------------------------------------------------------------------


def _is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _array_module(*xs):
    """``jax.numpy`` when any argument is a JAX array (inside a race), else NumPy
    (float64 widths for figures and tests)."""
    return jnp if any(isinstance(x, jax.Array) for x in xs) else np


@dataclass(frozen=True)
class ConfidenceBound:
    r"""An uncertainty bound ``G`` of Alg. 1 (Sec. 3.3): its constant and its width.

    A bound is a small frozen (hashable) object, so it is a static argument of the
    jitted race; its *constant* (``B`` or ``log(5 / delta_t)``) is computed once per
    race in Python (or traced, for a traced ``delta``) and passed to the race as a
    traced scalar, so new error levels do not recompile.

    Subclasses implement :meth:`constant` and :meth:`width`; Alg. 1 eliminates arm
    ``i`` after ``T`` points when ``mu_hat_x - mu_hat_i > width(...)``.

    Class attributes:
        name: the ``method=`` string of :func:`~subsample_mcmc.racing.best_arm`.
        needs_range: whether the width uses the reward ranges ``C_i``.
        default_first_batch: ``m1`` when the caller gives none (``None``: ``N``).
    """

    name: ClassVar[str] = ""
    needs_range: ClassVar[bool] = False
    default_first_batch: ClassVar[Optional[int]] = 50

    @property
    def applies_tail_guard(self) -> bool:
        """Whether the race applies :func:`~subsample_mcmc.racing.race.tail_guard`
        (a minimum sample and a Cornish-Fisher-corrected constant) to each comparison."""
        return False

    @property
    def applies_tail_index_guard(self) -> bool:
        """Whether the race adds the tail-index width
        (:func:`~subsample_mcmc.racing.race.tail_sum_width`) to each comparison (only with
        :attr:`applies_tail_guard`)."""
        return False

    def constant(self, delta, population_size: int, first_batch: int):
        """The bound's constant for a per-comparison error level ``delta``.

        Args:
            delta: error level of one comparison (``delta / D'`` in Alg. 1), a float
                or a traced scalar.
            population_size: ``N``.
            first_batch: ``m1``.

        Returns:
            A Python float (concrete ``delta``) or a JAX scalar (traced ``delta``);
            ``0.0`` when ``m1 = N`` (no stage before the exact one uses it).
        """
        raise NotImplementedError

    def width(self, constant, count, sd, reward_range, population_size: int):
        """The half-width ``G`` the race compares the estimated gap with.

        Args:
            constant: :meth:`constant`'s value (or a corrected, per-comparison array).
            count: ``T``, points read (array or scalar; NumPy or JAX).
            sd: ``sigma_hat``, the (biased, ``1/T``) standard deviation estimate.
            reward_range: ``C``, the range of the compared rewards.
            population_size: ``N``; every ``G`` is exactly zero at ``T = N``.
        """
        raise NotImplementedError


@dataclass(frozen=True)
class NormalBound(ConfidenceBound):
    r"""Racing-Normal: ``G_Normal`` of Eq. 9 with ``B_Normal`` of Corollary 4 (App. B).

    ::

        G_Normal(delta, T, s) = s / sqrt(T) * sqrt(1 - (T-1)/(N-1)) * B,
        B = B_Normal(delta, m1 / N)      (:func:`b_normal`, solving Eq. 5).

    Attributes:
        event: which passage event ``B_Normal`` inverts: ``"one_sided"`` (Eq. 5,
            default) or ``"two_sided"`` (Table 1 of the paper).
        heavy_tail_guard: apply the race's heavy-tail guard
            (:func:`~subsample_mcmc.racing.race.tail_guard`) to every comparison.
        tail_index_guard: with ``heavy_tail_guard`` (the default), also add to every comparison
            the width of the unread points' largest value under a Hill (1975) tail fitted to the
            largest differences read so far (:func:`~subsample_mcmc.racing.race.tail_sum_width`):
            the error promise where the reward differences have infinite variance, whose sample
            moments do not settle.  Gated by ``tail_gate_z``, it is zero where finite variance is
            not ruled out (Normal and Uniform rewards: the same races as without it).  Its cost:
            a running top-33 per arm (compile time and a sort per block read), and up to 1.6x the
            reads in decisive races on LogNormal(0, 2) rewards, whose local tail index at race
            sample sizes is that of an infinite-variance tail.  ``False``: the minimum sample and
            Cornish-Fisher constant of :func:`~subsample_mcmc.racing.race.tail_guard` only.
        tail_level_power: the exceedance level of the unread points' largest value that the
            tail-index width covers is ``delta'^tail_level_power`` (``delta' = Phi(-B)``, at most
            the comparison's error level).  1: its ``1 - delta'`` quantile under the fitted Pareto
            tail (conservative wherever the tail lightens beyond the order statistics read, as
            for LogNormal rewards, whose local index at race sample sizes is 1.2-1.9); 0: its
            typical size.  The default is the compromise measured in
            ``benchmarks/results/racing_heavy_tails_infinite.md``.
        tail_gate_z: the tail-index width is added for an arm only where the tail is confidently
            of infinite variance: Hill's ``alpha_hat = 1 / H`` from the top ``k`` has asymptotic
            sd ``alpha / sqrt(k)`` (Hill 1975; ``sqrt(k) (alpha_hat / alpha - 1) -> N(0, 1)``),
            so the width applies where the upper confidence bound
            ``alpha_hat (1 + tail_gate_z / sqrt(k)) < 2`` and is 0 elsewhere.  ``"B"``: ``z`` is
            the comparison's constant ``B``.  ``None``: no gate (the width wherever a tail is
            fitted).

    Example:
        >>> g = NormalBound().width(2.0, 100, 1.0, 0.0, 10_000)   # B = 2, T = 100
        >>> round(float(g), 4)   # 2 / 10 * sqrt(1 - 99/9999)
        0.199
    """

    event: str = "one_sided"
    heavy_tail_guard: bool = True
    tail_index_guard: bool = True
    tail_level_power: float = 0.25
    tail_gate_z: float | None = 2.0
    name: ClassVar[str] = "normal"

    def __post_init__(self):
        if self.event not in ("one_sided", "two_sided"):
            raise ValueError(f"event must be 'one_sided' or 'two_sided', got {self.event!r}")

    @property
    def applies_tail_guard(self) -> bool:
        return bool(self.heavy_tail_guard)

    @property
    def applies_tail_index_guard(self) -> bool:
        return bool(self.heavy_tail_guard and self.tail_index_guard)

    def constant(self, delta, population_size: int, first_batch: int):
        """``B_Normal(delta, m1 / N)`` (:func:`b_normal`; :func:`b_normal_traced` for a
        traced ``delta``)."""
        if num_stages(population_size, first_batch) == 1:
            return 0.0
        if _is_traced(delta):
            return b_normal_traced(delta, first_batch / population_size, self.event)
        return b_normal(delta, first_batch / population_size, event=self.event)

    def width(self, constant, count, sd, reward_range, population_size: int):
        """``G_Normal`` of Eq. 9 (``reward_range`` is not used)."""
        xp = _array_module(constant, count, sd)
        sd = xp.asarray(sd)
        count = xp.asarray(count)
        t = count.astype(sd.dtype)
        fpc = xp.sqrt(xp.maximum(1.0 - (t - 1.0) / (population_size - 1), 0.0) / t)
        return xp.where(count >= population_size, 0.0, sd * (fpc * constant))


@dataclass(frozen=True)
class NormalUnionBound(NormalBound):
    r"""Racing-Normal with the union bound (Eq. 27): ``G_Normal`` of Eq. 9 with
    ``B = Phi^{-1}(1 - delta / (t* - 1))`` (:func:`b_normal_union`) in place of
    ``B_Normal``."""

    name: ClassVar[str] = "normal_union"

    def constant(self, delta, population_size: int, first_batch: int):
        """``Phi^{-1}(1 - delta / (t* - 1))`` of Eq. 27."""
        stages = num_stages(population_size, first_batch)
        if stages == 1:
            return 0.0
        if _is_traced(delta):
            return -jax.scipy.special.ndtri(delta / (stages - 1))
        return b_normal_union(delta, stages)


@dataclass(frozen=True)
class EBSBound(ConfidenceBound):
    r"""Racing-EBS: the empirical Bernstein-Serfling bound (Eq. 6-7; Bardenet &
    Maillard 2015), union over the ``t* - 1`` stages before the exact one::

        G_EBS(delta, T, s, C) = s sqrt(2 rho_T L / T) + kappa C L / T,
        L = log(5 / delta_t),  delta_t = delta / (t* - 1),  kappa = 7/3 + 3/sqrt(2),
        rho_T = 1 - (T-1)/N            if T <= N/2,
                (1 - T/N)(1 + 1/T)     otherwise.

    :meth:`constant` is ``L``.  Needs the reward ranges ``C``; the paper's
    ``m1 = 2`` is the default first batch (a variance needs two points).
    """

    name: ClassVar[str] = "ebs"
    needs_range: ClassVar[bool] = True
    default_first_batch: ClassVar[Optional[int]] = 2

    def constant(self, delta, population_size: int, first_batch: int):
        """``log(5 / delta_t) = log(5 (t* - 1) / delta)`` of Eq. 7."""
        stages = num_stages(population_size, first_batch)
        if stages == 1:
            return 0.0
        if _is_traced(delta):
            return jnp.log(5.0 * (stages - 1) / delta)
        return math.log(5.0 * (stages - 1) / delta)

    def width(self, constant, count, sd, reward_range, population_size: int):
        """``G_EBS`` of Eq. 6-7 with ``L = constant``."""
        xp = _array_module(constant, count, sd, reward_range)
        sd = xp.asarray(sd)
        count = xp.asarray(count)
        t = count.astype(sd.dtype)
        n = population_size
        rho = xp.where(t <= n / 2, 1.0 - (t - 1.0) / n, (1.0 - t / n) * (1.0 + 1.0 / t))
        width = sd * xp.sqrt(2.0 * rho * constant / t) + EBS_KAPPA * reward_range * constant / t
        return xp.where(count >= n, 0.0, width)


@dataclass(frozen=True)
class ExactBound(ConfidenceBound):
    r"""No bound: ``G = inf`` before ``T = N`` and ``0`` at ``T = N``, so Alg. 1 reads
    every reward and returns the exact argmax (the reference the races approximate).
    Its default first batch is ``N``: one stage."""

    name: ClassVar[str] = "exact"
    default_first_batch: ClassVar[Optional[int]] = None

    def constant(self, delta, population_size: int, first_batch: int):
        return 0.0

    def width(self, constant, count, sd, reward_range, population_size: int):
        xp = _array_module(constant, count, sd)
        count = xp.asarray(count)
        return xp.where(count >= population_size, 0.0, xp.inf)


def clopper_pearson(errors: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    r"""Two-sided Clopper-Pearson interval of a binomial proportion.

    With ``k = errors`` of ``n = trials`` and ``a = 1 - level``, the exact interval
    inverts two one-sided binomial tests (Clopper & Pearson 1934)::

        lower = Beta^{-1}(a/2; k, n - k + 1)        (0 when k = 0),
        upper = Beta^{-1}(1 - a/2; k + 1, n - k)    (1 when k = n).

    Used to check a race's error rate against ``delta``: the race is wrong when the
    whole interval lies above ``delta``.

    Example:
        >>> lo, hi = clopper_pearson(0, 100)
        >>> lo, round(hi, 4)
        (0.0, 0.0362)
    """
    from scipy import stats

    errors, trials = int(errors), int(trials)
    if trials < 1 or not (0 <= errors <= trials):
        raise ValueError(f"need 0 <= errors <= trials and trials >= 1, got {errors}/{trials}")
    if not (0.0 < level < 1.0):
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    a = 1.0 - level
    lo = 0.0 if errors == 0 else stats.beta.ppf(a / 2, errors, trials - errors + 1)
    hi = 1.0 if errors == trials else stats.beta.ppf(1 - a / 2, errors + 1, trials - errors)
    return float(lo), float(hi)
