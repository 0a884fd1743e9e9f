r"""Racing arms whose reward populations differ in size (App. C.3 of Chen & Ghahramani 2016).

The Gibbs move of one mention in author coreference (Sec. 5.3) chooses among candidate
clusters ``y`` with

    p(Y_i = y | y_{-i}, x)  ∝  exp( sum_{j in C_y} f(x_i, x_j) ),

so arm ``y`` is a *total* over its own population of ``N_y = |C_y|`` rewards
``l_{y,n} = f(x_i, x_{j_n})``, and the sizes differ from 0 (an empty cluster) to
thousands.  After the Gumbel-max reduction (Eq. 2) the sampler needs

    argmax_y  o_y + S_y,      S_y = sum_{n < N_y} l_{y,n},   o_y = log f0(y) + eps_y,

which this race finds reading each arm's population without replacement, along its own
keyed permutation (:func:`~.permutation.sized_permuted_indices`), independently of the
other arms.

Schedule (App. C.3, item 1).  Arm ``y`` reads ``T_y^(1) = min(m1, N_y)`` rewards in the first
stage (the paper's ``m1 = 3``: a first batch of 50 would already read a third of all the
rewards), then batches doubling from ``m_y^(2) = max(floor(r (N_y - m1)), 1)`` (``r = 1/10``)::

    T_y^(t) = min(m1 + m_y^(2) (2^(t-1) - 1), N_y),   t >= 2,

so every arm is read in full after at most ``t* = 6`` stages, whatever its size.

Bound (App. C.3, item 2, Eq. 26, written for totals).  With ``sigma_hat_y^2`` the natural
(``1/T``) variance of the ``T_y`` rewards read, the estimated total
``S_hat_y = N_y mean_hat_y`` has the without-replacement variance

    V_y = N_y^2 sigma_hat_y^2 / T_y (1 - (T_y - 1) / (N_y - 1))     (0 once T_y = N_y),

and, the arms being sampled independently, the leader ``x = argmax o_y + S_hat_y``
eliminates arm ``i`` when

    (o_x + S_hat_x) - (o_i + S_hat_i)  >  B sqrt(V_x + V_i),
    B = Phi^{-1}(1 - delta / ((D - 1)(t* - 1)))                     (Eq. 27),

a union bound over the ``D - 1`` comparisons with the winner and the ``t* - 1`` stages
before the last (the exact ``B_Normal`` of Corollary 4 assumes one doubling schedule
shared by the compared rewards, which per-arm schedules break).  The race is exact once
every surviving arm is read in full, so it never reads more than ``sum_y N_y`` rewards.

Known reward bounds (``reward_bounds=(lo, hi)``, optional).  When every reward of arm ``y``
lies in ``[lo_y, hi_y]`` (a bounded pairwise factor), an arm not read yet is known to total at
most ``U_y = o_y + N_y hi_y``.  Arms with ``N_y <= m1``, which the schedule would read in full
at once, then wait: each comparison enters them at ``U_y`` with ``V_y = 0``, so the test
above drops arm ``y`` unread when

    (o_x + S_hat_x) - U_y  >  B sqrt(V_x),

and it is read (in full) at the next stage only if it survives a comparison that could have
dropped it (with the guard: once the leader has passed the guard's size rule), at the last
stage at the latest.  Since ``U_y >= o_y + S_y``, dropping ``y`` wrongly needs the leader's
total to be overestimated by ``B sqrt(V_x)``, an event no likelier than the pairwise test's
error; each pair still meets one comparison per stage, so Eq. 27's union constant and the
error level are unchanged.  A leader holding a large cluster with a strongly positive total
then spares the many clusters of one to three mentions of a coreference move, which the
paper's schedule reads in full: the cost of a move falls from about ``sum_y min(N_y, m1)``
toward ``m1`` times the number of large clusters.  A reward read outside its bounds stops the
race (``nonfinite``), since the bounds would no longer hold.

Heavy-tail guard (on by default, as in :func:`~.api.best_arm`).  The paper "slightly
abuses the Normal assumption" with ``m1 = 3``.  With the guard a comparison may eliminate
only when each of its two arms is read in full or has ``T_y >= 28 + 25 max(g1^2, k - 3)``
(Sugden, Smith & Jones 2000; ``g1``, ``k`` the arm's sample skewness and kurtosis), and
``B`` gets the Cornish-Fisher term ``|gamma| (2 B^2 + 1) / 6`` (Hall 1983) with ``gamma``
the skewness of ``S_hat_x - S_hat_i``; each total's third cumulant is the
without-replacement one, ``N^3 mu_3 / T^2 (N - T)(N - 2T) / ((N - 1)(N - 2))``.

Static shapes.  A stage's reads, all arms together, are laid out as one flat list of
``(arm, position)`` slots and evaluated ``block`` slots at a time (a ``while_loop``): the
work is O(rewards read + block) per stage however unequal the sizes are, and the statistics
are merged per arm with ``segment_sum``.  ``num_rewards_read`` counts the rewards read (the
paper's factor evaluations); ``num_likelihood_evals`` counts every slot computed, the masked
tail of each stage's last block included.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .permutation import NUM_ROUNDS, sized_permuted_indices
from .race import RaceResult, guard_minimum_sample, pair_moments

__all__ = ["run_race_unequal", "unequal_schedule", "unequal_num_stages", "FIRST_BATCH", "SECOND_FRACTION"]

#: App. C.3: the first batch ``m1 = 3`` and the second stage ``m_y^(2) = max(floor((N_y - 3) / 10), 1)``
FIRST_BATCH, SECOND_FRACTION = 3, 0.1


def _targets(sizes, stage, first_batch: int, second_fraction: float, xp=jnp):
    """``T_y^(stage)`` (stage counted from 1) for every size in ``sizes``."""
    sizes = xp.asarray(sizes)
    m2 = xp.maximum(xp.floor(second_fraction * xp.maximum(sizes - first_batch, 0)), 1).astype(sizes.dtype)
    later = first_batch + m2 * (2 ** (stage - 1) - 1)
    return xp.minimum(xp.where(stage <= 1, first_batch, later), sizes)


def unequal_schedule(population_size: int, first_batch: int = FIRST_BATCH,
                     second_fraction: float = SECOND_FRACTION) -> tuple[int, ...]:
    """Cumulative reads ``T^(1) < ... = N`` of one arm of size ``N`` (App. C.3).

    Example:
        >>> unequal_schedule(1000)
        (3, 102, 300, 696, 1000)
        >>> unequal_schedule(10)
        (3, 4, 6, 10)
    """
    n, out, t = int(population_size), [], 1
    if n <= 0:
        return ()
    while not out or out[-1] < n:
        out.append(int(_targets(np.array(n), t, first_batch, second_fraction, xp=np)))
        t += 1
    return tuple(out)


@functools.lru_cache(maxsize=64)
def unequal_num_stages(max_size: int, first_batch: int = FIRST_BATCH,
                       second_fraction: float = SECOND_FRACTION) -> int:
    """``t*``: the most stages any arm of size ``<= max_size`` needs (the union of Eq. 27).

    Example:
        >>> unequal_num_stages(5000)
        6
    """
    sizes = np.arange(1, max(int(max_size), 1) + 1)
    t = 1
    while np.any(_targets(sizes, t, first_batch, second_fraction, xp=np) < sizes):
        t += 1
    return t


class _State(NamedTuple):
    stage: jax.Array  # stages completed
    done: jax.Array
    nonfinite: jax.Array
    alive: jax.Array  # bool[D]
    arm: jax.Array
    count: jax.Array  # int[D] rewards read per arm
    centre: jax.Array  # [D] each arm's first reward (power sums are about it)
    sums: jax.Array  # [4, D] sum of e, e^2, e^3, e^4 with e = l - centre
    read: jax.Array  # rewards read, all arms
    computed: jax.Array  # slots computed (masked ones included)
    waiting: jax.Array  # bool[D] small arms not read until a decision could have dropped them (reward_bounds)


def run_race_unequal(
    key: jax.Array,
    reward_fn: Callable[[jax.Array, jax.Array], jax.Array],
    arm_offset: jax.Array,
    bound_param: jax.Array,
    sizes: jax.Array,
    *,
    num_arms: int,
    max_size: int,
    first_batch: int = FIRST_BATCH,
    second_fraction: float = SECOND_FRACTION,
    guard: bool = True,
    block: int = 32,
    reward_bounds=None,
) -> RaceResult:
    r"""Find ``argmax_y arm_offset_y + sum_{n < N_y} l_{y,n}`` (see the module docstring).

    Traceable and vmappable; keyword arguments are static.

    Args:
        key: PRNG key of the arms' reading orders.
        reward_fn: ``(arms int[W], indices int[W]) -> [W]``: reward ``l_{arms[k], indices[k]}``
            with ``indices[k]`` in ``[0, N_{arms[k]})`` (slots past the reads are called with
            valid indices and masked).
        arm_offset: ``[D]`` constants ``o_y`` added to the totals.
        bound_param: ``B`` (Eq. 27; ``inf`` reads everything: the exact method).
        sizes: ``int[D]`` population sizes ``N_y >= 0`` (traced), at most ``max_size``.
        num_arms, max_size: ``D`` and the largest size (static; it fixes ``t*``).
        first_batch, second_fraction: the schedule (``m1``, ``r``).
        guard: the heavy-tail guard.
        block: slots evaluated at once.
        reward_bounds: ``None`` (the paper's race) or ``(lo, hi)``, scalars or ``[D]``: every
            reward of arm ``y`` lies in ``[lo_y, hi_y]``.  Arms with ``N_y <= m1`` are then
            deferred from the first stage and dropped unread once
            ``o_y + N_y hi_y < S_hat_x - B sqrt(V_x)`` (see the module docstring); a reward
            read outside its bounds stops the race like a non-finite one.
    """
    n_arms = int(num_arms)
    t_star = unequal_num_stages(int(max_size), int(first_batch), float(second_fraction))
    sizes = jnp.asarray(sizes, jnp.int32)
    arms = jnp.arange(n_arms, dtype=jnp.int32)
    round_keys = jax.random.bits(key, (n_arms, NUM_ROUNDS), dtype=jnp.uint32)
    has = sizes > 0

    def index(arm, pos):
        return sized_permuted_indices(round_keys[arm], sizes[arm], pos)

    bounded = reward_bounds is not None
    if bounded:
        # known reward bounds: no reward is read before the first stage (each arm's power sums are
        # centred on its first values read, in merge), and arms of at most m1 rewards wait
        lo, hi = reward_bounds
        dtype = jnp.result_type(jnp.asarray(lo).dtype, jnp.asarray(hi).dtype, arm_offset.dtype, jnp.float32)
        lo = jnp.broadcast_to(jnp.asarray(lo, dtype), (n_arms,))
        hi = jnp.broadcast_to(jnp.asarray(hi, dtype), (n_arms,))
        arm_offset = arm_offset.astype(dtype)
        t_star = max(t_star, 2)
    else:
        # first stage: each arm's first reward fixes its centre (and the statistics' dtype)
        first = reward_fn(arms, index(arms, jnp.zeros((n_arms,), jnp.int32)))
        dtype = jnp.result_type(first.dtype, arm_offset.dtype, jnp.float32)
        first, arm_offset = first.astype(dtype), arm_offset.astype(dtype)
    b0 = jnp.asarray(bound_param, dtype)

    def merge(state: _State, arm, values, valid):
        values = values.astype(dtype)
        finite = jnp.isfinite(values)
        if bounded:
            finite = finite & (values >= lo[arm]) & (values <= hi[arm])
        finite = jnp.all(finite | ~valid)
        if bounded:  # an arm's first values read fix its centre (power sums about the data, not about 0)
            fresh = valid & (state.count[arm] == 0)
            first = jax.ops.segment_max(jnp.where(fresh, values, -jnp.inf), arm, num_segments=n_arms)
            state = state._replace(centre=jnp.where(jnp.isfinite(first), first, state.centre))
        e = jnp.where(valid & finite, values - state.centre[arm], 0.0)
        powers = jnp.stack([e, e * e, e ** 3, e ** 4])
        add = jax.vmap(lambda p: jax.ops.segment_sum(p, arm, num_segments=n_arms))(powers)
        got = jax.ops.segment_sum(valid.astype(jnp.int32), arm, num_segments=n_arms)
        return state._replace(sums=state.sums + add, count=state.count + got,
                              nonfinite=state.nonfinite | ~finite,
                              read=(state.read + jnp.sum(valid.astype(jnp.int32))).astype(jnp.int32),  # x64
                              computed=state.computed + values.shape[0])

    def read_stage(state: _State, target) -> _State:
        need = jnp.where(state.alive, jnp.maximum(target - state.count, 0), 0)
        ends = jnp.cumsum(need)
        starts, total = ends - need, ends[-1]
        base = state.count

        def body(carry):
            j, st = carry
            slot = j * block + jnp.arange(block, dtype=jnp.int32)
            valid = slot < total
            arm = jnp.minimum(jnp.searchsorted(ends, slot, side="right"), n_arms - 1).astype(jnp.int32)
            pos = jnp.clip(base[arm] + slot - starts[arm], 0, jnp.maximum(sizes[arm] - 1, 0))
            values = reward_fn(arm, index(arm, pos))
            return j + 1, merge(st, arm, values, valid)

        return lax.while_loop(lambda c: (c[0] * block < total) & ~c[1].nonfinite, body,
                              (jnp.array(0, jnp.int32), state))[1]

    def decide(state: _State) -> _State:
        n = sizes.astype(dtype)
        t = jnp.maximum(state.count, 1).astype(dtype)
        s1, s2 = state.sums[0], state.sums[1]
        mean = state.centre + s1 / t
        total = jnp.where(has, n * mean, 0.0) + arm_offset
        var = jnp.maximum(s2 / t - (s1 / t) ** 2, 0.0)
        full = state.count >= sizes
        fpc = jnp.where(full | (sizes <= 1), 0.0, 1.0 - (t - 1.0) / jnp.maximum(n - 1.0, 1.0))
        v = jnp.where(full, 0.0, n * n * var / t * fpc)
        if bounded:
            # an arm not read yet enters every comparison at its largest possible total, known exactly
            unread = has & (state.count == 0)
            total = jnp.where(unread, arm_offset + n * hi, total)
            full = full | unread
            v = jnp.where(unread, 0.0, v)
            known = state.alive & ~unread
            leader = jnp.argmax(jnp.where(known, total, -jnp.inf)).astype(jnp.int32)
            any_known = jnp.any(known)
        else:
            leader = jnp.argmax(jnp.where(state.alive, total, -jnp.inf)).astype(jnp.int32)
        gap = total[leader] - total
        v_pair = v[leader] + v
        b = b0
        allowed = jnp.ones((n_arms,), bool)
        if guard:
            skew, kurt = pair_moments(state.count, *state.sums)
            ok = full | (t >= guard_minimum_sample(skew, kurt))
            allowed = ok & ok[leader]
            mu3 = skew * var ** 1.5
            wr = jnp.where(full | (sizes <= 2), 0.0,
                           (n - t) * (n - 2.0 * t) / jnp.maximum((n - 1.0) * (n - 2.0), 1.0))
            k3 = n ** 3 * mu3 / (t * t) * wr
            tiny = jnp.finfo(dtype).tiny
            gamma = jnp.where(v_pair > tiny, (k3[leader] - k3) / jnp.maximum(v_pair, tiny) ** 1.5, 0.0)
            b = b0 + jnp.abs(gamma) * (2.0 * b0 * b0 + 1.0) / 6.0
        width = b * jnp.sqrt(v_pair)  # NaN for the exact race (B = inf) on a zero variance: no test
        both_full = full & full[leader]
        if bounded:
            # an unread arm's total is only an upper bound: it goes when the leader is surely above it
            # (a leader read in full: for certain, whatever B is)
            exact_pair = (both_full & ~unread) | (unread & full[leader] & (gap > 0))
            eliminated = any_known & (arms != leader) & (exact_pair | ((gap > width) & allowed))
        else:
            eliminated = (arms != leader) & (both_full | ((gap > width) & allowed))
        alive = state.alive & ~eliminated
        finished = jnp.sum(alive) == 1
        arm = jnp.where(state.nonfinite, -1, jnp.where(finished, leader, state.arm))
        waiting = state.waiting
        if bounded:  # a small arm is read once a comparison with a leader could have dropped it, and survived
            waiting = waiting & ~(any_known & allowed[leader])
        return state._replace(alive=alive, done=finished | state.nonfinite, arm=arm.astype(jnp.int32),
                              stage=state.stage + 1, waiting=waiting)

    if bounded:
        state = _State(
            stage=jnp.array(0, jnp.int32), done=jnp.array(False),
            nonfinite=~jnp.all(jnp.isfinite(lo) & jnp.isfinite(hi) & (lo <= hi)),
            alive=jnp.ones((n_arms,), bool), arm=jnp.array(-1, jnp.int32),
            count=jnp.zeros((n_arms,), jnp.int32), centre=jnp.zeros((n_arms,), dtype),
            sums=jnp.zeros((4, n_arms), dtype),
            read=jnp.array(0, jnp.int32), computed=jnp.array(0, jnp.int32),
            waiting=has & (sizes <= first_batch),
        )
    else:
        finite0 = jnp.all(jnp.isfinite(first) | ~has)
        centre = jnp.where(has & jnp.isfinite(first), first, 0.0).astype(dtype)
        state = _State(
            stage=jnp.array(0, jnp.int32), done=jnp.array(False), nonfinite=~finite0,
            alive=jnp.ones((n_arms,), bool), arm=jnp.array(-1, jnp.int32),
            count=has.astype(jnp.int32), centre=centre, sums=jnp.zeros((4, n_arms), dtype),
            read=jnp.sum(has.astype(jnp.int32)).astype(jnp.int32), computed=jnp.array(n_arms, jnp.int32),
            waiting=jnp.zeros((n_arms,), bool),
        )

    def stage_body(state):
        target = _targets(sizes, state.stage + 1, first_batch, second_fraction)
        if bounded:  # the last stage reads every arm still racing
            target = jnp.where(state.waiting & (state.stage + 1 < t_star), 0, target)
        return decide(read_stage(state, target))

    state = lax.while_loop(lambda s: ~s.done & (s.stage < t_star), stage_body, state)
    return RaceResult(
        arm=state.arm,
        num_rewards_read=state.read,
        num_stages=state.stage,
        num_points_read=state.read,
        nonfinite=state.nonfinite,
        num_points_computed=state.computed,
        num_likelihood_evals=state.computed,
        truncated=jnp.zeros((), bool),
        alive=state.alive,
    )
