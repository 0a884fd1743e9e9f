r"""Racing with a finite reward population: Alg. 1 of Chen & Ghahramani (2016).

All arms share one mini-batch of indices per stage, read without replacement along
the keyed permutation of :mod:`.permutation`; after stage ``t`` (``T = T^(t)``
points read) the leader ``x = argmax_i mu_hat_i`` is found and arm ``i`` is
eliminated when

    pairwise:  mu_hat_x - mu_hat_i > G(delta/(D-1), T, sigma_hat_{x,i}, C_x + C_i)
    marginal:  mu_hat_x - mu_hat_i > G(delta/D, T, sigma_hat_x, C_x) + G(delta/D, T, sigma_hat_i, C_i)

with the natural (biased, ``1/T``) variance estimates of Sec. 3.1.  The race stops
when one arm survives; at ``T = N`` every ``G`` is zero and the exact argmax is
returned, so at most ``N D`` rewards are read (Prop. 3).

Implementation notes
--------------------
* **Static shapes, true early exit, one trace per phase.**  Points are read in
  chunks of a few fixed sizes growing geometrically (``m1``, ``16 m1``, ``256 m1``,
  ... capped at ``max_block``), one ``while_loop`` per size; a chunk is masked at the
  next stage boundary of the doubling schedule, where the elimination test runs (the
  boundaries are multiples of the chunk except ``N``, reached by a chunk of exactly
  the remainder: a race never computes more than ``N`` points per arm).  A
  race that stops leaves the loops at once (under ``vmap`` a batch costs what its
  slowest race costs); the reward function is traced once per phase, not once per
  stage, which keeps compilation short when rewards come from a NumPyro model; and
  memory is O(D max_block) per race whatever N is.  Reading positions are offset by
  the carried count, so XLA cannot hoist reads out of their loops.
* **Precision.**  Sums over up to 1e7 rewards in float32 lose the differences that
  decide a race, so the statistics are kept as *differences to a reference arm*
  ``r`` (the stage-1 leader): ``d_{i,n} = l_{i,n} - l_{r,n}`` is formed per reward
  (nearly exact when arms are close, which is when it matters), each block is
  reduced to its mean and centred second moments, and blocks are merged with Chan
  et al.'s pairwise update.  Mean gaps are therefore accurate to float32 rounding
  of the *gaps*, not of the totals (tested at N = 1e7 against a naive sum that
  fails).  Marginal variances use rewards centred at the first reward of each arm.
* **Cost accounting.**  ``num_rewards_read`` counts the rewards of the arms still
  in the race at each stage (the sample complexity of the paper's Fig. 1);
  ``num_points_read`` is ``T`` at the stop.  With static shapes a stage computes
  the block for all ``D`` arms: ``num_likelihood_evals = D num_points_computed``
  is what the reward function evaluated.
* **Bounds are objects.**  ``G`` comes from a
  :class:`~subsample_mcmc.racing.bounds.ConfidenceBound` (static): the race calls
  its ``width`` and asks it whether the heavy-tail guard applies; it never
  branches on a bound's name.
* **Non-finite rewards.**  A non-finite reward stops the race at once with
  ``arm = -1`` and ``nonfinite = True``; it never returns an arm as if all were well.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax import lax

from .bounds import ConfidenceBound
from .permutation import index_stream
from .schedule import doubling_schedule

__all__ = ["RaceResult", "run_race", "tail_guard", "guard_minimum_sample", "pair_moments", "first_batch_spread",
           "TAIL_ORDER_STATISTICS", "hill_tail", "tail_sum_width"]

VARIANCES = ("pairwise", "marginal")


class RaceResult(NamedTuple):
    """What a race returns (a pytree: ``vmap`` gives one entry per race).

    Attributes:
        arm: the chosen arm (int32), ``-1`` if a non-finite reward stopped the race.
        num_rewards_read: rewards read, all arms together (int32): at each stage
            the rewards of the arms still in the race (the paper's sample
            complexity, Fig. 1); lil'UCB: the pulls.
        num_stages: stages run (Alg. 1) or pulls made (lil'UCB) (int32).
        num_points_read: distinct data points read, ``T`` at the stop (int32).
        nonfinite: True when a NaN or infinite reward was met (then ``arm == -1``).
        num_points_computed: data points whose rewards were computed for all arms
            (int32): ``num_points_read`` plus the masked tail of the last fixed-size
            chunk (static shapes).
        num_likelihood_evals: rewards *computed*, all arms together (int32):
            ``num_arms * num_points_computed``, what a reward function evaluated
            (``D N`` for the exact method).
        truncated: True when the race reached its ``max_points`` budget without a
            decision (then ``arm == -1``): the caller decides exactly.
        alive: ``bool[num_arms]``, the arms still in the race when it stopped (a decided race:
            ``arm`` alone).  A truncated race's exact decision needs only these: the race, run on
            to ``T = N``, would return the best of them at the full sums, and an eliminated arm
            was dropped on a bound that holds with the race's probability ``1 - delta`` (lil'UCB,
            which eliminates nothing: every arm).
    """

    arm: jax.Array
    num_rewards_read: jax.Array
    num_stages: jax.Array
    num_points_read: jax.Array
    nonfinite: jax.Array
    num_points_computed: jax.Array
    num_likelihood_evals: jax.Array
    truncated: jax.Array
    alive: jax.Array


def _run_at_most_once(pred, fn, operand):
    """``fn(operand)`` if ``pred`` else ``operand``, skipping the work when not taken.

    A ``while_loop`` with at most one trip: unlike ``lax.cond`` it stays a real
    branch under ``vmap`` (it runs while any batch member needs it).
    """

    def body(carry):
        return jnp.array(False), fn(carry[1])

    return lax.while_loop(lambda carry: carry[0], body, (pred, operand))[1]




class _State(NamedTuple):
    done: jax.Array
    nonfinite: jax.Array
    alive: jax.Array  # bool[D]
    arm: jax.Array
    ref: jax.Array  # reference arm for differences
    shift: jax.Array  # [D] centring for marginal variances
    count: jax.Array  # points read
    mean_diff: jax.Array  # [D] mean of l_i - l_ref
    second: jax.Array  # [D, D] (pairwise, centred moments of differences) or [D] (marginal)
    mean_level: jax.Array  # [D] mean of l_i - shift_i (marginal only)
    rewards_read: jax.Array
    stages: jax.Array
    computed: jax.Array  # points whose rewards were computed (masked ones included)
    centre: jax.Array  # [D] fixed centre of the power sums (first block's means)
    power1: jax.Array  # [D] sum e_i,  e = d - centre (pairwise: differences; marginal: levels)
    power2: jax.Array  # [D, D] sum e_a e_b (pairwise) or [D] sum e^2 (marginal)
    power3: jax.Array  # [D, D] sum e_a^2 e_b (pairwise) or [D] sum e^3
    power4: jax.Array  # [D, D] sum e_a^3 e_b (pairwise) or [D] sum e^4
    power22: jax.Array  # [D, D] sum e_a^2 e_b^2 (pairwise) or [D] unused
    tail_top: jax.Array  # [D, K + 1] largest |e| read so far, descending (tail-index guard) or [D, 1] unused


# Sugden, Smith & Jones (2000), "Cochran's rule for simple random sampling", JRSS-B 62:
# the Normal approximation of a without-replacement sample mean is adequate once
# n > 28 + 25 g1^2, with g1 the population skewness.
SUGDEN_CONSTANT, SUGDEN_SKEW_FACTOR = 28.0, 25.0


def guard_minimum_sample(skew, kurt):
    r"""The heavy-tail guard's minimum sample ``28 + 25 max(g1^2, k - 3)`` (:func:`tail_guard`) for
    skewness ``g1`` and kurtosis ``k``: a decision of the Normal bound needs at least this many points."""
    return SUGDEN_CONSTANT + SUGDEN_SKEW_FACTOR * jnp.maximum(skew * skew, kurt - 3.0)


def pair_moments(count, sum1, sum2, sum3, sum4):
    r"""Standardised skewness and kurtosis from power sums about a fixed centre.

    With ``s_k = sum_n u_n^k`` over ``T`` points and ``m = s_1 / T``:
    ``mu_2 = s_2/T - m^2``, ``mu_3 = s_3/T - 3 m s_2/T + 2 m^3``,
    ``mu_4 = s_4/T - 4 m s_3/T + 6 m^2 s_2/T - 3 m^4``; returns
    ``(mu_3 / mu_2^{3/2}, mu_4 / mu_2^2)`` (0 and 3 for a degenerate sample).
    """
    t = jnp.maximum(count, 1).astype(sum1.dtype)
    m = sum1 / t
    a2, a3, a4 = sum2 / t, sum3 / t, sum4 / t
    mu2 = jnp.maximum(a2 - m * m, 0.0)
    mu3 = a3 - 3.0 * m * a2 + 2.0 * m ** 3
    mu4 = jnp.maximum(a4 - 4.0 * m * a3 + 6.0 * m * m * a2 - 3.0 * m ** 4, 0.0)
    tiny = jnp.finfo(sum1.dtype).tiny ** 0.25
    ok = mu2 > tiny * (1.0 + a2)
    skew = jnp.where(ok, mu3 / jnp.maximum(mu2, tiny) ** 1.5, 0.0)
    kurt = jnp.where(ok, mu4 / jnp.maximum(mu2, tiny) ** 2, 3.0)
    return skew, kurt


def first_batch_spread(differences: jax.Array, batch: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    r"""What a race's first batch sees of the spread of the reward differences of two arms, against
    the truth (from all ``N`` of them).

    The race reads ``D_n`` (``differences``, shape ``[N]``); its stage-1 width is ``B N s / sqrt(m)``
    with ``s`` the sample sd of ``m = batch`` of them, and Racing-Normal's error promise (Eq. 9) needs
    ``s`` close to the population ``sigma_D``.  When a few data carry most of the spread, a batch of
    ``m`` misses them with probability ``(1 - q)^m``: the points in the top fraction
    ``q = 1 - 2^(-1/m)`` of ``|D_n - mean D|`` are missed by at least half of all batches.  Returns
    ``(se_all, se_typical, guard_sample)``: ``N sigma / sqrt(m)`` over all the data and over the data
    without that top fraction (in nats); ``se_all / se_typical`` near 1: the first batch sees the
    spread, far above 1: most races decide on a width too narrow by that factor, and no sample-based
    guard can tell.  ``guard_sample``: the heavy-tail guard's minimum sample
    (:func:`guard_minimum_sample`) at the population skewness and kurtosis of the ``D_n``.  Traceable.
    """
    d = jnp.asarray(differences)
    n, m = d.shape[0], int(batch)
    c = d - jnp.mean(d)
    top = jnp.quantile(jnp.abs(c), 0.5 ** (1.0 / m))  # 1 - q
    scale = n / jnp.sqrt(jnp.asarray(m, c.dtype))
    u = c / jnp.maximum(jnp.sqrt(jnp.mean(c * c)), jnp.finfo(c.dtype).tiny)  # standardised: no underflow of c^4
    skew, kurt = pair_moments(jnp.asarray(n, c.dtype), jnp.sum(u), jnp.sum(u ** 2), jnp.sum(u ** 3), jnp.sum(u ** 4))
    return (scale * jnp.sqrt(jnp.mean(c * c)),
            scale * jnp.sqrt(jnp.mean(jnp.where(jnp.abs(c) <= top, c, 0.0) ** 2)),
            guard_minimum_sample(skew, kurt))


def tail_guard(count, skew, kurt, b, population_size):
    r"""Heavy-tail guard of the Normal bound: ``(allowed, b_corrected)``.

    With ``T`` of ``N`` points read (``f = T / N``) and ``g1``, ``k`` the sample
    skewness and kurtosis of the compared rewards (differences of two arms):

    * **Minimum sample** (Sugden, Smith & Jones 2000, Cochran's rule for simple
      random sampling): a decision needs ``T >= 28 + 25 max(g1^2, k - 3)``.  The
      published rule has ``g1^2`` only; the excess-kurtosis term is ours: a small
      sample of a very skewed population often shows a near-zero skewness but an
      excess kurtosis of several units (LogNormal(0, 2.5) differences at T = 100:
      |g1| < 1.1 yet k in [6.6, 17] in the samples that misled the plain rule),
      and for Gamma-like families ``k - 3 = 1.5 g1^2`` anyway.
    * **Cornish-Fisher correction** of ``B``, the ``1 - delta`` quantile of a
      studentised mean (Hall 1983; Johnson 1978), with the without-replacement
      skewness ``g1 (1 - 2f) / sqrt(T (1 - f))`` and excess kurtosis
      ``(k - 3) (1 - 6 f (1 - f)) / (T (1 - f))`` of the sample mean (the moments of
      a simple random sample's mean; the unread ``N - T`` points dominate as
      ``f -> 1``)::

          B' = B + |g1| s_T (2 B^2 + 1) / 6 + max(k - 3, 0) |1 - 6 f (1 - f)| / (T (1 - f)) (B^3 + 3 B) / 24,
          s_T = max(1 / sqrt(T), |1 - 2 f| / sqrt(T (1 - f))),

      signs taken in the direction that widens the bound.  Light tails (``g1 = 0``,
      ``k <= 3``) leave ``B`` unchanged.
    """
    t = jnp.maximum(count, 1).astype(skew.dtype)
    f = t / population_size
    rest = jnp.maximum(t * (1.0 - f), 1.0)
    allowed = t >= guard_minimum_sample(skew, kurt)
    s_t = jnp.maximum(1.0 / jnp.sqrt(t), jnp.abs(1.0 - 2.0 * f) / jnp.sqrt(rest))
    excess = jnp.maximum(kurt - 3.0, 0.0) * jnp.abs(1.0 - 6.0 * f * (1.0 - f)) / rest
    b_corrected = (b + jnp.abs(skew) * s_t * (2.0 * b * b + 1.0) / 6.0
                   + excess * (b ** 3 + 3.0 * b) / 24.0)
    return allowed, b_corrected


#: order statistics kept per arm by the tail-index guard: the Hill estimate uses the top
#: ``k = min(K, max(4, T // 8))`` of them and ``x_(k+1)`` (so ``K + 1`` are kept).
TAIL_ORDER_STATISTICS = 32


def hill_tail(top, count):
    r"""Hill (1975) estimate of the tail of ``|u|`` from its largest order statistics.

    ``top``: ``[..., K + 1]`` the largest ``|u|`` among the ``T = count`` read, descending
    (``x_(1) >= x_(2) >= ...``).  With ``k = min(K, max(4, floor(T / 8)))`` and threshold
    ``t = x_(k+1)``, the Hill estimator of ``1 / alpha`` is

        H = (1 / k) sum_{i <= k} log(x_(i) / t),

    the maximum-likelihood estimate of ``1 / alpha`` when the exceedances ``|u| / t > 1`` are
    Pareto, ``P(|u| > x) ~ (k / T) (x / t)^(-alpha)`` for ``x >= t`` (Hill 1975, Ann. Statist. 3);
    its sd is about ``H / sqrt(k)``.  Returns ``(H, t, k)``; ``H = 0`` where ``t = 0`` (fewer than
    ``k + 1`` nonzero values: no tail to fit).  Traceable.
    """
    kmax = top.shape[-1] - 1
    k = jnp.clip(count // 8, 4, kmax).astype(jnp.int32)
    t = jnp.take(top, k, axis=-1)
    ok = t > 0.0
    safe_t = jnp.where(ok, t, 1.0)
    i = jnp.arange(top.shape[-1])
    logs = jnp.where((i < k) & ok[..., None], jnp.log(jnp.maximum(top, safe_t[..., None]) / safe_t[..., None]), 0.0)
    h = jnp.sum(logs, axis=-1) / k.astype(top.dtype)
    return jnp.where(ok, h, 0.0), jnp.where(ok, t, 0.0), k


def tail_sum_width(top, count, population_size, delta, gate_z=None):
    r"""The tail-index guard's extra width (mean scale) for one arm's unread points.

    With the fitted tail ``P(|u| > x) ~ (k / T) (x / t)^(-alpha)`` of :func:`hill_tail`, the
    largest of the ``M = N - T`` unread ``|u|`` exceeds ``y`` with probability about
    ``M (k / T) (y / t)^(-alpha)``; for a subexponential (in particular a regularly varying) tail
    the sum of the ``M`` unread centred values exceeds ``y`` with the same probability as
    ``y -> infinity`` (the single-big-jump principle of stable and regularly varying sums), so its
    ``1 - delta`` quantile is about

        W = t (M k / (T delta))^(1 / alpha) = t exp(H log(M k / (T delta)))

    on the sum scale, ``W / N`` on the scale of the means the race compares.  The Normal bound
    covers the centre of the sum (its CLT part) when the variance is finite; ``W`` covers the
    one large unread value that a population of infinite (or not yet settled) variance holds.
    It grows as ``delta^(-1/alpha)``: negligible for light tails (``alpha`` large: a few ``t``,
    against a CLT width of ``B sqrt(M)`` sds), and it reads a near-tie on to ``T = N`` when
    ``alpha < 2``, while a gap far beyond ``W`` is still decided early.  ``W = 0`` at ``T = N``.

    ``gate_z``: apply ``W`` only where the tail is confidently of infinite variance.  Hill's
    estimator is asymptotically Normal, ``sqrt(k) (alpha_hat / alpha - 1) -> N(0, 1)`` (sd of
    ``alpha_hat`` about ``alpha / sqrt(k)``), so ``alpha_hat (1 + z / sqrt(k))`` with
    ``alpha_hat = 1 / H`` is an approximate upper confidence bound on ``alpha``; ``W`` is kept
    where it is below 2, i.e. ``1 + z / sqrt(k) < 2 H``, and is 0 elsewhere (finite variance not
    ruled out: the Normal bound and :func:`tail_guard` cover the arm).  ``None``: no gate.
    Traceable.
    """
    h, t, k = hill_tail(top, count)
    tt = jnp.maximum(count, 1).astype(top.dtype)
    rest = jnp.maximum(population_size - tt, 0.0)
    log_arg = jnp.log(jnp.maximum(rest, 1.0) * k.astype(top.dtype) / (tt * delta))
    w = t * jnp.exp(h * jnp.maximum(log_arg, 0.0))
    keep = rest > 0.0
    if gate_z is not None:
        keep = keep & (1.0 + gate_z / jnp.sqrt(k.astype(top.dtype)) < 2.0 * h)
    return jnp.where(keep, w / population_size, 0.0)


def _phases(population_size: int, first_batch: int, max_block: int, growth: int = 16):
    """``[(chunk, count_limit), ...]``: chunk sizes growing by ``growth`` from ``m1``
    (capped at ``max_block``); each phase reads until ``count_limit`` points.

    Every stage boundary of the doubling schedule (``m1 2^k``) inside a phase is a
    multiple of its chunk, so only the last boundary, ``N``, can cut a chunk; the last
    phase therefore ends with one chunk of exactly the remainder: a race that reads
    everything computes ``N`` points per arm, not up to a chunk more."""
    chunk = max(1, min(first_batch, max_block))
    phases, start = [], 0
    while True:
        nxt = chunk * growth
        if nxt > max_block or nxt >= population_size:
            full = start + ((population_size - start) // chunk) * chunk
            if full == population_size:
                return phases + [(chunk, population_size)]
            if full == start:  # less than a chunk left, and no stage boundary before N
                return phases + [(population_size - start, population_size)]
            return phases + [(chunk, full), (population_size - full, population_size)]
        phases.append((chunk, nxt))
        start, chunk = nxt, nxt


def run_race(
    key: jax.Array,
    reward_fn: Callable[[jax.Array], jax.Array],
    arm_offset: jax.Array,
    bound_param: jax.Array,
    reward_range: jax.Array,
    *,
    num_arms: int,
    population_size: int,
    first_batch: int,
    bound: ConfidenceBound,
    variance: str,
    index_map: Optional[jax.Array] = None,
    max_block: int = 1 << 14,
    resolution=0.0,
    max_points: Optional[int] = None,
) -> RaceResult:
    r"""Run Alg. 1 once.  Traceable; all keyword arguments are static.

    After stage ``t`` (``T`` points read) arm ``i`` is eliminated when
    ``mu_hat_x - mu_hat_i > G``, ``G = bound.width(bound_param, T, sigma_hat, C, N)``
    (pairwise: ``sigma_hat_{x,i}``, ``C_x + C_i``; marginal: the sum of the two arms'
    own widths).

    Args:
        key: PRNG key of the without-replacement order.
        reward_fn: ``indices -> [num_arms, len(indices)]`` rewards ``l_{i,n}``.
        arm_offset: ``[num_arms]`` constants added to each arm's mean (e.g.
            ``(log f0(i) + eps_i) / N`` of Eq. 3), kept out of the per-reward sums.
        bound_param: the bound's constant, ``bound.constant(delta / D', N, m1)``
            (``B`` of Eq. 9 / Eq. 27, or ``log(5 / delta_t)`` of Eq. 6-7); traced.
        reward_range: ``[num_arms]`` ranges ``C_i`` (used when ``bound.needs_range``).
        bound: a :class:`~subsample_mcmc.racing.bounds.ConfidenceBound` (static).
            When ``bound.applies_tail_guard``, :func:`tail_guard` is applied to
            every comparison (skewness of the compared rewards from their third and
            fourth power sums): a decision waits for ``T >= 28 + 25 g1^2`` and ``B``
            gets the Cornish-Fisher correction.  Costs O(D^2) per point read
            (pairwise) or O(D) (marginal), like the variance estimates.  When also
            ``bound.applies_tail_index_guard``, each arm keeps its ``K + 1 = 33`` largest
            ``|e|`` (differences to the reference arm, pairwise; levels, marginal; centred at
            the first block's means) in a running top-k (``lax.top_k`` per block), and every
            comparison's width gets ``W_x + W_i`` of :func:`tail_sum_width` (Hill tail of each
            arm, level ``Phi(-B)^tail_level_power``; the reference arm's ``W`` is 0 in the
            pairwise case): reward differences of infinite variance, whose unread points hold
            extremes the sample variance has not seen.
        variance: ``"pairwise"`` or ``"marginal"``.
        index_map: optional ``[population_size]`` data indices of the raced
            population (used when some points are always read exactly).
        max_block: largest number of points evaluated at once; larger stages are
            read in chunks, so memory is O(D max_block) per race.
        resolution: ``epsilon >= 0`` (traced): an arm is also eliminated once its width
            ``G`` against the leader is below ``epsilon`` (where the heavy-tail guard
            allows a decision).  The race then returns an ``epsilon``-good arm,
            ``mu_best - mu_arm <= epsilon``, with probability at least ``1 - delta``
            ((epsilon, delta)-PAC identification, Even-Dar, Mannor & Mansour 2006): on the
            event that no confidence bound fails, an arm ``i`` dropped at width
            ``G < epsilon`` while ``x`` leads has ``mu_i - mu_x <= mu_hat_i - mu_hat_x + G
            <= epsilon``.  0 (default): the exact best arm, the race may read all ``N``.
        max_points: a budget (static): the race reads no stage past the last boundary
            ``T^(t) <= max_points`` of the doubling schedule (at least the first); a race
            still undecided there stops with ``arm = -1`` and ``truncated = True``, and its
            caller decides exactly (full-data sums, the same Gumbel noise or ``u``: the race's
            answer at ``T = N``).  The error promise still holds: a truncated race makes no
            decision, and the stages it ran are a prefix of the schedule ``B`` was set for, so
            it can only err where the untruncated race could.  ``None`` (default): no budget.
    """
    if not isinstance(bound, ConfidenceBound):
        raise TypeError(f"bound must be a ConfidenceBound (e.g. NormalBound()), got {bound!r}")
    if variance not in VARIANCES:
        raise ValueError(f"variance must be one of {VARIANCES}, got {variance!r}")
    n_pop, n_arms = int(population_size), int(num_arms)
    sizes = doubling_schedule(n_pop, first_batch)
    schedule = jnp.asarray(sizes, jnp.int32)
    stream = index_stream(key, n_pop)
    pairwise = variance == VARIANCES[0]
    arange = jnp.arange(n_arms)
    phases = _phases(n_pop, first_batch, max_block)
    budget = n_pop  # the last stage boundary the race may reach
    if max_points is not None:
        budget = max([sizes[0]] + [t for t in sizes if t <= int(max_points)])
        starts = [0] + [limit for _, limit in phases[:-1]]
        phases = [(chunk, min(limit, budget)) for (chunk, limit), start in zip(phases, starts) if start < budget]

    guard = bound.applies_tail_guard
    tail_index = guard and bound.applies_tail_index_guard
    n_top = TAIL_ORDER_STATISTICS + 1 if tail_index else 1

    def bound_width(count, sd, crange, b=None):
        return bound.width(bound_param if b is None else b, count, sd, crange, n_pop)

    def read(start, size: int, stop):
        """Rewards at positions ``[start, start + size)`` of the reading order; those at
        or past ``stop`` (the next stage boundary) are masked out.  ``start`` is the
        carried count, so XLA cannot hoist reads out of the loops."""
        pos = start + jnp.arange(size, dtype=jnp.int32)
        valid = pos < stop
        idx = stream(jnp.minimum(pos, n_pop - 1))
        if index_map is not None:
            idx = index_map[idx]
        return reward_fn(idx), valid

    def absorb(state: _State, block, valid) -> _State:
        """Merge the valid rewards of a block into the running statistics (Chan et al.)."""
        finite = jnp.all(jnp.isfinite(block) | ~valid[None, :])
        w = valid.astype(block.dtype)
        block = jnp.where(finite & valid[None, :], block, 0.0)
        m_int = jnp.sum(valid.astype(jnp.int32))
        m = jnp.maximum(m_int, 1).astype(block.dtype)
        count_after = state.count + m_int
        n_a = state.count.astype(block.dtype)
        frac = m_int.astype(block.dtype) / jnp.maximum(count_after, 1).astype(block.dtype)
        diffs = block - block[state.ref]
        b_mean = jnp.sum(diffs * w, axis=1) / m
        delta_mean = b_mean - state.mean_diff
        mean_diff = state.mean_diff + delta_mean * frac
        if pairwise:
            dev = (diffs - b_mean[:, None]) * w
            second = state.second + dev @ dev.T + jnp.outer(delta_mean, delta_mean) * (n_a * frac)
            mean_level = state.mean_level
        else:
            levels = block - state.shift[:, None]
            l_mean = jnp.sum(levels * w, axis=1) / m
            l_delta = l_mean - state.mean_level
            l_second = jnp.sum(((levels - l_mean[:, None]) * w) ** 2, axis=1)
            mean_level = state.mean_level + l_delta * frac
            second = state.second + l_second + l_delta * l_delta * (n_a * frac)
        powers = {}
        if guard:
            base = diffs if pairwise else block - state.shift[:, None]
            e = (base - state.centre[:, None]) * w
            e2 = e * e
            powers["power1"] = state.power1 + jnp.sum(e, axis=1)
            if pairwise:
                powers["power2"] = state.power2 + e @ e.T
                powers["power3"] = state.power3 + e2 @ e.T
                powers["power4"] = state.power4 + (e2 * e) @ e.T
                powers["power22"] = state.power22 + e2 @ e2.T
            else:
                powers["power2"] = state.power2 + jnp.sum(e2, axis=1)
                powers["power3"] = state.power3 + jnp.sum(e2 * e, axis=1)
                powers["power4"] = state.power4 + jnp.sum(e2 * e2, axis=1)
            if tail_index:
                merged = jnp.concatenate([state.tail_top, jnp.abs(e)], axis=1)
                powers["tail_top"] = lax.top_k(merged, n_top)[0]
        rewards_read = state.rewards_read + m_int * jnp.sum(state.alive).astype(jnp.int32)
        return state._replace(
            **powers,
            nonfinite=state.nonfinite | ~finite,
            count=count_after.astype(jnp.int32),
            mean_diff=mean_diff,
            second=second,
            mean_level=mean_level,
            rewards_read=rewards_read,
        )

    def decide(state: _State) -> _State:
        """Elimination step of Alg. 1 after ``T = state.count`` points."""
        count = state.count
        mu = state.mean_diff + arm_offset
        leader = jnp.argmax(jnp.where(state.alive, mu, -jnp.inf)).astype(jnp.int32)
        gap = mu[leader] - mu
        t = jnp.maximum(count, 1).astype(mu.dtype)
        allowed = jnp.ones((n_arms,), bool)
        b = None
        if guard:
            if pairwise:  # moments of u = e_leader - e_i from the power sums
                x = leader
                p2, p3, p4, q = state.power2, state.power3, state.power4, state.power22
                d2, d3, d4 = jnp.diagonal(p2), jnp.diagonal(p3), jnp.diagonal(p4)
                s1 = state.power1[x] - state.power1
                s2 = d2[x] - 2.0 * p2[x] + d2
                s3 = d3[x] - 3.0 * p3[x] + 3.0 * p3[:, x] - d3
                s4 = d4[x] - 4.0 * p4[x] + 6.0 * q[x] - 4.0 * p4[:, x] + d4
                skew, kurt = pair_moments(count, s1, s2, s3, s4)
            else:  # each arm's own skewness; a comparison takes the worse of the two
                skew_arm, kurt_arm = pair_moments(count, state.power1, state.power2, state.power3,
                                                  state.power4)
                skew = jnp.maximum(jnp.abs(skew_arm), jnp.abs(skew_arm[leader]))
                kurt = jnp.maximum(kurt_arm, kurt_arm[leader])
            allowed, b = tail_guard(count, skew, kurt, bound_param, n_pop)
        tail_width = 0.0
        if tail_index:
            # per-comparison error level the constant B stands for: Phi(-B) <= delta' (B_Normal
            # covers all stages, so it exceeds the one-look quantile)
            delta_cmp = jnp.maximum(jax.scipy.special.ndtr(-jnp.asarray(bound_param, mu.dtype)),
                                    jnp.finfo(mu.dtype).tiny) ** float(getattr(bound, "tail_level_power", 1.0))
            gate_z = getattr(bound, "tail_gate_z", None)
            if isinstance(gate_z, str):  # "B": the comparison's own constant
                gate_z = jnp.asarray(bound_param, mu.dtype)
            w_arm = tail_sum_width(state.tail_top, count, n_pop, delta_cmp, gate_z)
            tail_width = w_arm + w_arm[leader]
        if pairwise:
            sec = state.second
            var = (sec[leader, leader] + jnp.diagonal(sec) - 2.0 * sec[leader]) / t
            width = bound_width(count, jnp.sqrt(jnp.maximum(var, 0.0)), reward_range[leader] + reward_range, b)
        else:
            sd_arm = jnp.sqrt(jnp.maximum(state.second, 0.0) / t)
            width = bound_width(count, sd_arm, reward_range, b) + bound_width(
                count, sd_arm[leader], reward_range[leader], b)
        width = width + tail_width
        eliminated = ((gap > width) | (width < resolution)) & allowed & (arange != leader)
        eliminated = eliminated | ((count >= n_pop) & (arange != leader))
        alive = state.alive & ~eliminated
        finished = jnp.sum(alive) == 1
        done = finished | state.nonfinite
        arm = jnp.where(state.nonfinite, -1, jnp.where(finished, leader, state.arm))
        return state._replace(alive=alive, done=done, arm=arm.astype(jnp.int32),
                              stages=state.stages + 1)

    def next_boundary(count):
        return schedule[jnp.minimum(jnp.searchsorted(schedule, count, side="right"), len(sizes) - 1)]

    def step(chunk: int):
        def body(state: _State) -> _State:
            stop = next_boundary(state.count)
            block, valid = read(state.count, chunk, stop)
            state = absorb(state, block, valid)._replace(computed=state.computed + chunk)
            decided = decide(state)
            at_boundary = state.count == stop
            return jax.tree.map(lambda a, b: jnp.where(at_boundary | state.nonfinite, a, b), decided, state)

        return body

    # first chunk: fixes the reference arm and the centring
    chunk0 = phases[0][0]
    first, valid0 = read(jnp.array(0, jnp.int32), chunk0, schedule[0])
    finite0 = jnp.all(jnp.isfinite(first) | ~valid0[None, :])
    first_clean = jnp.where(finite0 & valid0[None, :], first, 0.0)
    shift = first_clean[:, 0]
    w0 = valid0.astype(first_clean.dtype)
    ref = jnp.argmax(jnp.sum((first_clean - shift[:, None]) * w0, axis=1) / jnp.sum(w0) + shift + arm_offset)
    dtype = first_clean.dtype
    zeros = jnp.zeros((n_arms,), dtype)
    base0 = first_clean - first_clean[ref] if pairwise else first_clean - shift[:, None]
    centre = jnp.sum(base0 * w0, axis=1) / jnp.maximum(jnp.sum(w0), 1.0)
    mat = jnp.zeros((n_arms, n_arms) if (pairwise and guard) else (n_arms,), dtype)
    state = _State(
        done=jnp.array(False),
        nonfinite=~finite0,
        alive=jnp.ones((n_arms,), bool),
        arm=jnp.array(-1, jnp.int32),
        ref=ref.astype(jnp.int32),
        shift=shift,
        count=jnp.array(0, jnp.int32),
        mean_diff=zeros,
        second=jnp.zeros((n_arms, n_arms) if pairwise else (n_arms,), dtype),
        mean_level=zeros,
        rewards_read=jnp.array(0, jnp.int32),
        stages=jnp.array(0, jnp.int32),
        computed=jnp.array(chunk0, jnp.int32),
        centre=centre,
        power1=zeros,
        power2=mat,
        power3=mat,
        power4=mat,
        power22=mat,
        tail_top=jnp.zeros((n_arms, n_top), dtype),
    )
    state = absorb(state, first, valid0)
    state = jax.tree.map(lambda a, b: jnp.where(state.count == schedule[0], a, b), decide(state), state)

    # Phases of growing, fixed chunk sizes: the reward function is traced once per
    # phase (not once per stage), a race that stops leaves the loops at once, and
    # memory is O(D max_block) per race whatever N is.
    for chunk, limit in phases:
        with jax.named_scope("race_later_stages"):  # a profile's name for the loops (jax.profiler)
            state = lax.while_loop(
                lambda st, limit=limit: ~st.done & (st.count < limit), step(chunk), state
            )
    truncated = ~state.done & ~state.nonfinite & (state.count >= budget) & (budget < n_pop)

    return RaceResult(
        arm=state.arm,
        num_rewards_read=state.rewards_read,
        num_stages=state.stages,
        num_points_read=state.count,
        nonfinite=state.nonfinite,
        num_points_computed=state.computed,
        num_likelihood_evals=state.computed * n_arms,
        truncated=truncated,
        alive=state.alive,
    )
