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
* **Bounded memory.**  A stage larger than ``max_block`` points is read in chunks
  by a ``fori_loop``, so a race (and a ``vmap`` of races) allocates O(D max_block)
  per race, not O(D N).  Reading positions are offset by the carried count, which
  keeps XLA from hoisting the (loop-invariant) reads of skipped stages.
* **Static shapes, true early exit.**  Stage ``t`` reads a block of the static size
  ``m_t = T^(t) - T^(t-1)``; the stages are unrolled at trace time, every stage
  after the first is wrapped in a ``while_loop`` that runs at most once, and each
  is nested in the branch of the one before, so later stages are never visited.  Unbatched,
  a stage that is not reached is skipped outright; under ``vmap`` the loop runs
  while *any* member of the batch still races, so a batch costs what its slowest
  race costs, never the full population unless some race needs it.
* **Precision.**  Sums over up to 1e7 rewards in float32 lose the differences that
  decide a race, so the statistics are kept as *differences to a reference arm*
  ``r`` (the stage-1 leader): ``d_{i,n} = l_{i,n} - l_{r,n}`` is formed per reward
  (nearly exact when arms are close, which is when it matters), each block is
  reduced to its mean and centred second moments, and blocks are merged with Chan
  et al.'s pairwise update.  Mean gaps are therefore accurate to float32 rounding
  of the *gaps*, not of the totals (tested at N = 1e7 against a naive sum that
  fails).  Marginal variances use rewards centred at the first reward of each arm.
* **Cost accounting.**  ``num_evaluations`` counts the rewards of the arms still
  in the race at each stage (the sample complexity of the paper's Fig. 1);
  ``num_points_read`` is ``T`` at the stop.  With static shapes a stage computes
  the block for all ``D`` arms.
* **Non-finite rewards.**  A non-finite reward stops the race at once with
  ``arm = -1`` and ``nonfinite = True``; it never returns an arm as if all were well.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax import lax

from .bounds import EBS_KAPPA
from .permutation import index_stream
from .schedule import doubling_schedule

__all__ = ["RaceResult", "racing", "run_at_most_once"]


class RaceResult(NamedTuple):
    """What a race returns (a pytree: ``vmap`` gives one entry per race).

    Attributes:
        arm: the chosen arm (int32), ``-1`` if a non-finite reward stopped the race.
        num_evaluations: rewards read, all arms together (int32).
        num_stages: stages run (Alg. 1) or pulls made (lil'UCB) (int32).
        num_points_read: distinct data points read, ``T`` at the stop (int32).
        nonfinite: True when a NaN or infinite reward was met (then ``arm == -1``).
    """

    arm: jax.Array
    num_evaluations: jax.Array
    num_stages: jax.Array
    num_points_read: jax.Array
    nonfinite: jax.Array


def run_at_most_once(pred, fn, operand):
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
    evaluations: jax.Array
    stages: jax.Array


def _merge(n_a, mean_a, m2_a, n_b, mean_b, m2_b, outer):
    n = n_a + n_b
    frac = n_b / n
    delta = mean_b - mean_a
    mean = mean_a + delta * frac
    corr = outer(delta) * (n_a * frac)
    return mean, m2_a + m2_b + corr


def racing(
    key: jax.Array,
    reward_fn: Callable[[jax.Array], jax.Array],
    arm_offset: jax.Array,
    bound_param: jax.Array,
    reward_range: jax.Array,
    *,
    num_arms: int,
    population_size: int,
    first_batch: int,
    bound: str,
    variance: str,
    index_map: Optional[jax.Array] = None,
    max_block: int = 1 << 14,
) -> RaceResult:
    r"""Run Alg. 1 once.  Traceable; all keyword arguments are static.

    Args:
        key: PRNG key of the without-replacement order.
        reward_fn: ``indices -> [num_arms, len(indices)]`` rewards ``l_{i,n}``.
        arm_offset: ``[num_arms]`` constants added to each arm's mean (e.g.
            ``(log f0(i) + eps_i) / N`` of Eq. 3), kept out of the per-reward sums.
        bound_param: for ``bound="normal"``: the constant ``B`` of Eq. 9 / Eq. 27;
            for ``bound="ebs"``: ``log(5 / delta_t)`` of Eq. 6-7.
        reward_range: ``[num_arms]`` ranges ``C_i`` (used by ``"ebs"`` only).
        bound: ``"normal"`` or ``"ebs"``.
        variance: ``"pairwise"`` or ``"marginal"``.
        index_map: optional ``[population_size]`` data indices of the raced
            population (used when some points are always read exactly).
        max_block: largest number of points evaluated at once; larger stages are
            read in chunks, so memory is O(D max_block) per race.
    """
    n_pop, n_arms = int(population_size), int(num_arms)
    sizes = doubling_schedule(n_pop, first_batch)
    stream = index_stream(key, n_pop)
    pairwise = variance == "pairwise"
    arange = jnp.arange(n_arms)

    def bound_width(count: int, sd, crange):
        if count >= n_pop:
            return jnp.zeros_like(sd)
        if bound == "normal":
            fpc = math.sqrt(max(1.0 - (count - 1) / (n_pop - 1), 0.0) / count)
            return sd * (fpc * bound_param)
        # empirical Bernstein-Serfling, Eq. 6 with rho_n
        pi_prev, pi_now = (count - 1) / n_pop, count / n_pop
        rho = 1.0 - pi_prev if count <= n_pop / 2 else (1.0 - pi_now) * (1.0 + 1.0 / count)
        return sd * jnp.sqrt(2.0 * rho * bound_param / count) + EBS_KAPPA * crange * bound_param / count

    def read(start, size: int):
        # ``start`` is the carried count (== the stage's first position whenever the
        # stage runs): indices that depend on the loop carry are not loop-invariant,
        # so XLA cannot hoist the reads of every stage out of their skipped loops.
        idx = stream(start + jnp.arange(size, dtype=jnp.int32))
        if index_map is not None:
            idx = index_map[idx]
        block = reward_fn(idx)
        return block

    def absorb(state: _State, block, m: int) -> _State:
        """Merge a block of ``m`` rewards into the running statistics (Chan et al.)."""
        finite = jnp.all(jnp.isfinite(block))
        block = jnp.where(finite, block, 0.0)
        count_after = state.count + m
        diffs = block - block[state.ref]
        b_mean = jnp.mean(diffs, axis=1)
        if pairwise:
            dev = diffs - b_mean[:, None]
            b_second = dev @ dev.T
            mean_diff, second = _merge(
                state.count, state.mean_diff, state.second, m, b_mean, b_second,
                lambda d: jnp.outer(d, d),
            )
            mean_level = state.mean_level
        else:
            mean_diff = state.mean_diff + (b_mean - state.mean_diff) * (m / count_after)
            levels = block - state.shift[:, None]
            l_mean = jnp.mean(levels, axis=1)
            l_second = jnp.sum((levels - l_mean[:, None]) ** 2, axis=1)
            mean_level, second = _merge(
                state.count, state.mean_level, state.second, m, l_mean, l_second,
                lambda d: d * d,
            )
        evaluations = state.evaluations + m * jnp.sum(state.alive).astype(jnp.int32)
        return state._replace(
            nonfinite=state.nonfinite | ~finite,
            count=count_after.astype(jnp.int32),
            mean_diff=mean_diff,
            second=second,
            mean_level=mean_level,
            evaluations=evaluations,
        )

    def absorb_range(state: _State, size: int) -> _State:
        """Read ``size`` more points, in chunks of at most ``max_block``: memory stays
        O(D max_block) per race whatever N is."""
        full, rest = divmod(size, max_block)
        if full == 1:
            state = absorb(state, read(state.count, max_block), max_block)
        elif full > 1:
            state = lax.fori_loop(
                0, full, lambda _, st: absorb(st, read(st.count, max_block), max_block), state
            )
        if rest:
            state = absorb(state, read(state.count, rest), rest)
        return state

    def decide(state: _State, count: int) -> _State:
        mu = state.mean_diff + arm_offset
        leader = jnp.argmax(jnp.where(state.alive, mu, -jnp.inf)).astype(jnp.int32)
        gap = mu[leader] - mu
        if count >= n_pop:
            alive = arange == leader
        else:
            if pairwise:
                s = state.second
                var = (s[leader, leader] + jnp.diagonal(s) - 2.0 * s[leader]) / count
                width = bound_width(count, jnp.sqrt(jnp.maximum(var, 0.0)),
                                    reward_range[leader] + reward_range)
            else:
                sd = jnp.sqrt(jnp.maximum(state.second, 0.0) / count)
                w = bound_width(count, sd, reward_range)
                width = w[leader] + w
            alive = state.alive & ~((gap > width) & (arange != leader))
        finished = jnp.sum(alive) == 1
        done = finished | state.nonfinite
        arm = jnp.where(state.nonfinite, -1, jnp.where(finished, leader, state.arm))
        return state._replace(alive=alive, done=done, arm=arm.astype(jnp.int32),
                              stages=state.stages + 1)

    # stage 1 (always run); its first chunk fixes the reference arm and the centring
    head = min(sizes[0], max_block)
    first = read(jnp.array(0, jnp.int32), head)
    finite0 = jnp.all(jnp.isfinite(first))
    first_clean = jnp.where(finite0, first, 0.0)
    shift = first_clean[:, 0]
    ref = jnp.argmax(jnp.mean(first_clean - shift[:, None], axis=1) + shift + arm_offset)
    dtype = first_clean.dtype
    zeros = jnp.zeros((n_arms,), dtype)
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
        evaluations=jnp.array(0, jnp.int32),
        stages=jnp.array(0, jnp.int32),
    )
    state = absorb(state, first_clean, head)
    state = decide(absorb_range(state, sizes[0] - head), sizes[0])

    # Stages are *nested*: stage t+1 lives inside stage t's branch, so a race that
    # stops at stage t never even tests the later ones (cost O(stages run)).
    bounds_list = list(zip(sizes[:-1], sizes[1:]))

    def run_from(position: int, s: _State) -> _State:
        if position == len(bounds_list):
            return s
        lo, hi = bounds_list[position]

        def stage(st):
            return run_from(position + 1, decide(absorb_range(st, hi - lo), hi))

        return run_at_most_once(~s.done, stage, s)

    state = run_from(0, state)

    return RaceResult(
        arm=state.arm,
        num_evaluations=state.evaluations,
        num_stages=state.stages,
        num_points_read=state.count,
        nonfinite=state.nonfinite,
    )
