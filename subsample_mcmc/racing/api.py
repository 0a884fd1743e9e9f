r"""Public entry point of the racing core: :func:`best_arm`.

Best-arm identification over a finite reward population (Sec. 2-3 of Chen &
Ghahramani 2016): given ``D`` arms with ``N`` rewards each, find
``argmax_i mu_i`` with ``mu_i = (1/N) sum_n l_{i,n} + offset_i`` reading rewards without
replacement and stopping as soon as a confidence bound separates the arms, with
error probability at most ``delta`` and never more than ``N D`` rewards read.

The ``method=`` strings (:data:`METHODS`) are the user-facing vocabulary; each is
resolved here, once, to a bound object (:class:`~.bounds.NormalBound`,
:class:`~.bounds.NormalUnionBound`, :class:`~.bounds.EBSBound`,
:class:`~.lil_ucb.LilUCBBound`, :class:`~.bounds.ExactBound`) that the race calls.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from .bounds import ConfidenceBound, EBSBound, ExactBound, NormalBound, NormalUnionBound, b_normal_union
from .control_variates import ArmControlVariates, TaylorControlVariate
from .lil_ucb import LIL_UCB_SETTINGS, LilUCBBound, lil_ucb
from .race import VARIANCES, RaceResult, run_race
from .unequal import FIRST_BATCH as UNEQUAL_FIRST_BATCH
from .unequal import run_race_unequal, unequal_num_stages

__all__ = ["best_arm", "METHODS", "METHODS_NEEDING_RANGE", "VARIANCES"]

#: the ``method=`` strings of :func:`best_arm` (the package's one list of methods)
METHODS = ("normal", "normal_union", "ebs", "lil_ucb", "exact")

_TRACES = {"count": 0}


def _trace_count() -> int:
    """How many times the jitted race has been traced (for retracing tests)."""
    return _TRACES["count"]


def _resolve_bound(method, *, normal_event: str, heavy_tail_guard: bool,
                   lil_ucb_setting: str) -> ConfidenceBound:
    """The bound object of a ``method=`` string (or ``method`` itself if it is one)."""
    if isinstance(method, ConfidenceBound):
        given = {"normal_event": (normal_event, "one_sided"),
                 "heavy_tail_guard": (bool(heavy_tail_guard), True),
                 "lil_ucb_setting": (lil_ucb_setting, "heuristic")}
        clash = [name for name, (value, default) in given.items() if value != default]
        if clash:
            raise ValueError(
                f"method is a bound object ({method!r}): set {', '.join(clash)} on the object, "
                "not as an argument of best_arm"
            )
        return method
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {METHODS} or a ConfidenceBound, got {method!r}")
    if method == "normal":
        return NormalBound(event=normal_event, heavy_tail_guard=bool(heavy_tail_guard))
    if method == "normal_union":
        return NormalUnionBound(heavy_tail_guard=bool(heavy_tail_guard))
    if method == "ebs":
        return EBSBound()
    if method == "lil_ucb":
        return LilUCBBound(setting=lil_ucb_setting)
    return ExactBound()


#: the ``method=`` strings whose bound needs the reward ranges ``C_i`` (``reward_range``) when the rewards are a
#: function or carry a control variate (as in the NumPyro kernels)
METHODS_NEEDING_RANGE = tuple(m for m in METHODS if _resolve_bound(m, normal_event="one_sided", heavy_tail_guard=True,
                                                                   lil_ucb_setting="heuristic").needs_range)


def _is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _core(key, rewards, arm_offset, bound_param, ranges, control_variate, resolution, *, reward_fn, config):
    _TRACES["count"] += 1
    (bound, variance, n_arms, n_total, first_batch, lil, max_points) = config
    if reward_fn is None:

        def block_fn(idx):
            return jnp.take(rewards, idx, axis=1)

        def pair_fn(arms, idx):
            return rewards[arms, idx]
    else:
        block_fn = reward_fn

        def pair_fn(arms, idx):
            return block_fn(idx)[arms, jnp.arange(idx.shape[0])]

    offsets = arm_offset
    index_map = None
    n_race = n_total
    extra_evals = jnp.array(0, jnp.int32)
    exact_ok = jnp.array(True)
    if control_variate is not None:
        cv = control_variate
        h_mean = cv.mean()
        n_exact = cv.exact_indices.shape[0]
        n_race = n_total - n_exact
        base_block, base_pair = block_fn, pair_fn
        # the caller's sums over the exactly-read points (ArmControlVariates.exact_sums; a data-space
        # TaylorControlVariate has none)
        known_sums = getattr(cv, "exact_sums", None)
        if n_exact > 0:
            if known_sums is not None:  # the caller summed the exactly-read points already
                exact_sum = jnp.asarray(known_sums)
                exact_ok = jnp.all(jnp.isfinite(exact_sum))
                exact_sum = jnp.where(exact_ok, exact_sum, 0.0)
            else:
                with jax.named_scope("race_exact_points"):
                    exact_rewards = base_block(cv.exact_indices)
                exact_ok = jnp.all(jnp.isfinite(exact_rewards))
                exact_sum = jnp.sum(jnp.where(exact_ok, exact_rewards, 0.0), axis=1)
            offsets = (arm_offset * n_total + exact_sum) / n_race
            index_map = cv.raced_indices
            # rewards this race computed (the caller counts the sums it passed in exact_sums)
            extra_evals = jnp.array(0 if known_sums is not None else n_exact * n_arms, jnp.int32)

        def block_fn(idx):
            return base_block(idx) - cv.values(idx) + h_mean[:, None]

        def pair_fn(arms, idx):
            h = cv.values(idx)[arms, jnp.arange(idx.shape[0])]
            return base_pair(arms, idx) - h + h_mean[arms]

    if isinstance(bound, LilUCBBound):  # Sec. 3.2: one reward at a time, not Alg. 1
        eps, beta, lam = lil
        result = lil_ucb(
            key, pair_fn, offsets, bound_param, ranges / 2.0, num_arms=n_arms,
            population_size=n_race, epsilon=eps, beta=beta, lam=lam, index_map=index_map,
        )
    else:
        result = run_race(
            key, block_fn, offsets, bound_param, ranges, num_arms=n_arms,
            population_size=n_race, first_batch=first_batch, bound=bound,
            variance="marginal" if isinstance(bound, ExactBound) else variance,
            index_map=index_map, resolution=resolution, max_points=max_points,
        )
    bad = result.nonfinite | ~exact_ok
    return result._replace(
        arm=jnp.where(bad, -1, result.arm).astype(jnp.int32),
        num_rewards_read=result.num_rewards_read + extra_evals,
        num_likelihood_evals=result.num_likelihood_evals + extra_evals,
        num_points_read=result.num_points_read + (n_total - n_race),
        num_points_computed=result.num_points_computed + (n_total - n_race),
        nonfinite=bad,
    )


_core_jit = jax.jit(_core, static_argnames=("reward_fn", "config"))


def _unequal_core(key, rewards, arm_offset, bound_param, sizes, reward_bounds, *, reward_fn, config):
    _TRACES["count"] += 1
    n_arms, max_size, first_batch, guard = config
    if reward_fn is None:
        def reward_fn(arms, idx):
            return rewards[arms, idx]
    return run_race_unequal(key, reward_fn, arm_offset, bound_param, sizes, num_arms=n_arms,
                            max_size=max_size, first_batch=first_batch, guard=guard, reward_bounds=reward_bounds)


_unequal_core_jit = jax.jit(_unequal_core, static_argnames=("reward_fn", "config"))


def _best_arm_unequal(key, rewards, bound, delta, sizes, *, first_batch, arm_offset, num_arms,
                      population_size, control_variate, check_finite, reward_bounds=None):
    """:func:`best_arm` with ``population_sizes`` (App. C.3; :mod:`.unequal`)."""
    if not isinstance(bound, (NormalBound, ExactBound)):
        raise ValueError(
            f"population_sizes is given: the unequal-population race (App. C.3, Eq. 26-27) supports "
            f"method='normal' (or 'normal_union', the same bound here) and 'exact'; got method={bound.name!r}")
    if control_variate is not None:
        raise ValueError("population_sizes is given: control variates are not supported by the unequal-population "
                         "race; pass control_variate=None")
    if callable(rewards):
        if num_arms is None or population_size is None:
            raise ValueError("rewards is a function (arms, indices) -> rewards: pass num_arms=D and "
                             "population_size=max(population_sizes) as well")
        reward_fn, reward_array = rewards, None
        n_arms, max_size = int(num_arms), int(population_size)
    else:
        reward_array = _as_float_array(rewards)
        if reward_array.ndim != 2:
            raise ValueError(f"rewards must have shape [num_arms, max(population_sizes)] (padded); "
                             f"got shape {reward_array.shape}")
        reward_fn = None
        n_arms, max_size = reward_array.shape
    if n_arms < 2:
        raise ValueError(f"need at least 2 arms, got num_arms={n_arms}")
    if not _is_tracer(sizes):
        given = np.asarray(sizes)
        if given.shape != (n_arms,) or not np.issubdtype(given.dtype, np.integer):
            raise ValueError(f"population_sizes must be {n_arms} integers (one per arm), got {sizes!r}")
        if given.min() < 0 or given.max() > max_size:
            raise ValueError(f"population_sizes must lie in [0, {max_size}] (the rewards' padded width or "
                             f"population_size), got min {given.min()} and max {given.max()}")
        if reward_array is not None and check_finite and not _is_tracer(reward_array):
            inside = np.arange(max_size)[None, :] < given[:, None]
            bad = inside & ~np.isfinite(np.asarray(reward_array))
            if bad.any():
                arm, idx = np.argwhere(bad)[0]
                raise ValueError(f"rewards contains a non-finite value (first at arm {arm}, index {idx}); "
                                 "racing needs finite rewards")
    sizes = jnp.asarray(sizes, jnp.int32)
    m1 = UNEQUAL_FIRST_BATCH if first_batch is None else first_batch
    if isinstance(m1, bool) or int(m1) != m1 or int(m1) < 2:
        raise ValueError(f"first_batch must be an integer >= 2 (a variance needs two rewards; App. C.3 uses 3), "
                         f"got {first_batch!r}")
    m1 = int(m1)
    offsets = jnp.zeros((n_arms,), jnp.float32) if arm_offset is None else _as_float_array(arm_offset)
    if offsets.shape != (n_arms,):
        raise ValueError(f"arm_offset must have shape ({n_arms},), got {offsets.shape}")
    stages = unequal_num_stages(max_size, m1)
    if reward_bounds is not None:
        reward_bounds = _check_reward_bounds(reward_bounds, n_arms)
        stages = max(stages, 2)  # arms of <= m1 rewards are read, if at all, in a second stage
        if reward_array is not None and check_finite and not any(map(_is_tracer, (reward_array, sizes,
                                                                                   *reward_bounds))):
            inside = np.arange(max_size)[None, :] < np.asarray(sizes)[:, None]
            r = np.asarray(reward_array)
            lo_, hi_ = (np.broadcast_to(np.asarray(b), (n_arms,))[:, None] for b in reward_bounds)
            out = inside & ((r < lo_) | (r > hi_))
            if out.any():
                arm, idx = np.argwhere(out)[0]
                raise ValueError(f"rewards[{arm}, {idx}] = {r[arm, idx]} lies outside reward_bounds "
                                 f"[{lo_[arm, 0]}, {hi_[arm, 0]}] (arm {arm}): pass bounds every reward obeys")
    if isinstance(bound, ExactBound) or stages <= 1:
        param = np.inf
    elif _is_tracer(delta):
        param = -jax.scipy.special.ndtri(delta / ((n_arms - 1) * (stages - 1)))
    else:
        param = b_normal_union(delta / (n_arms - 1), stages)
    guard = isinstance(bound, NormalBound) and bound.applies_tail_guard
    result = _unequal_core_jit(key, reward_array, offsets, jnp.asarray(param, jnp.float32), sizes, reward_bounds,
                               reward_fn=reward_fn, config=(n_arms, max_size, m1, guard))
    if not _is_tracer(result.nonfinite) and bool(jnp.any(result.nonfinite)):
        if reward_bounds is not None:
            raise ValueError("the rewards function returned a NaN or infinite reward, or one outside "
                             "reward_bounds=(lo, hi); the race stopped (inside jit/vmap this is reported as "
                             "arm == -1, nonfinite == True): widen reward_bounds to bounds every reward obeys")
        raise ValueError("the rewards function returned a NaN or infinite reward; the race stopped "
                         "(inside jit/vmap this is reported as arm == -1, nonfinite == True)")
    return result


def _check_reward_bounds(reward_bounds, n_arms):
    """``(lo, hi)`` as two float arrays, scalars or ``[n_arms]``, checked when concrete."""
    try:
        lo, hi = reward_bounds
    except (TypeError, ValueError):
        raise ValueError(f"reward_bounds must be a pair (lo, hi) of scalars or [{n_arms}] arrays bounding every "
                         f"reward, got {reward_bounds!r}") from None
    lo, hi = _as_float_array(lo), _as_float_array(hi)
    for name, x in (("lo", lo), ("hi", hi)):
        if x.shape not in ((), (n_arms,)):
            raise ValueError(f"reward_bounds: {name} must be a scalar or have shape ({n_arms},) (one per arm), "
                             f"got shape {x.shape}")
    if not (_is_tracer(lo) or _is_tracer(hi)):
        lo_np, hi_np = np.asarray(lo), np.asarray(hi)
        if not (np.all(np.isfinite(lo_np)) and np.all(np.isfinite(hi_np)) and np.all(lo_np <= hi_np)):
            raise ValueError(f"reward_bounds must be finite with lo <= hi (every reward in [lo, hi]), got "
                             f"lo={lo_np}, hi={hi_np}")
    return lo, hi


def _as_float_array(x):
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)
    return x


def best_arm(
    key: jax.Array,
    rewards: Union[jax.Array, Callable[[jax.Array], jax.Array]],
    *,
    method: Union[str, ConfidenceBound] = "normal",
    delta: float = 0.05,
    first_batch: Optional[int] = None,
    variance: str = "pairwise",
    reward_range=None,
    reward_bounds=None,
    control_variate: Optional[TaylorControlVariate] = None,
    num_arms: Optional[int] = None,
    population_size: Optional[int] = None,
    arm_offset=None,
    normal_event: str = "one_sided",
    lil_ucb_setting: str = "heuristic",
    check_finite: bool = True,
    heavy_tail_guard: bool = True,
    population_sizes=None,
    resolution=0.0,
    max_points: Optional[int] = None,
) -> RaceResult:
    r"""Identify ``argmax_i mu_i`` from a fraction of the rewards, with error <= ``delta``.

    ``mu_i = (1/N) sum_n l_{i,n} + arm_offset_i``: the Gumbel-max sampler of Eq. 3 puts
    ``(log f0(i) + eps_i) / N`` in ``arm_offset`` so that tiny per-arm constants never
    enter the float32 sums.

    Methods (Sec. 3 of Chen & Ghahramani 2016):

    * ``"normal"`` -- Racing-Normal, Alg. 1 with ``G_Normal`` (Eq. 9) and the exact
      ``B_Normal(delta / D', m1 / N)`` of Corollary 4 (:func:`b_normal`);
    * ``"normal_union"`` -- the same with the union-bound constant of Eq. 27;
    * ``"ebs"`` -- Racing-EBS, Alg. 1 with the empirical Bernstein-Serfling bound
      (Eq. 6-7); needs the reward ranges ``C_i``;
    * ``"lil_ucb"`` -- adapted lil'UCB (Sec. 3.2) with scale ``C_i / 2``;
    * ``"exact"`` -- read every reward (the reference the others approximate).

    Each string is resolved once to a bound object (:class:`~.bounds.NormalBound`,
    :class:`~.bounds.NormalUnionBound`, :class:`~.bounds.EBSBound`,
    :class:`~.lil_ucb.LilUCBBound`, :class:`~.bounds.ExactBound`); such an object
    may be passed as ``method`` directly.

    ``D' = D - 1`` with ``variance="pairwise"`` (``sigma_hat_{x,i}``, cost
    O(D^2 T)) and ``D' = D`` with ``"marginal"`` (``sigma_hat_i``, cost O(D T)).

    Args:
        key: a ``jax.random`` key; it fixes the order in which data are read.
        rewards: a ``[num_arms, N]`` array, or a function
            ``indices -> [num_arms, len(indices)]`` (then pass ``num_arms`` and
            ``population_size``).  A function should be a stable object (it is a
            static argument of the jitted race) or be called inside your own ``jit``.
        method: one of ``"normal"``, ``"normal_union"``, ``"ebs"``, ``"lil_ucb"``,
            ``"exact"`` (:data:`METHODS`), or a bound object; then
            ``normal_event``, ``heavy_tail_guard`` and ``lil_ucb_setting`` are the
            object's and must be left at their defaults here.
        delta: error level, in ``(0, 0.5)``.  A traced scalar is accepted (e.g.
            ``vmap`` over error levels): ``B_Normal`` then comes from a cached table
            (:func:`b_normal_traced`, ~1e-4 accurate) and the range is not checked.
        first_batch: ``m1``, the first mini-batch; default 50 (Normal) or 2 (EBS),
            capped at N.  Must lie in ``[2, N]``.
        variance: ``"pairwise"`` or ``"marginal"``.
        reward_range: ``C`` (scalar or ``[num_arms]``), the range
            ``max_n l_{i,n} - min_n l_{i,n}`` of each arm's rewards; needed by
            ``"ebs"`` and ``"lil_ucb"``.  Computed from an array when omitted (one
            O(N D) pass); required for a function or with a control variate.
        control_variate: a :class:`TaylorControlVariate` (Eq. 11); the race then
            reads ``l - h + E[h]`` and the control variate's exact points are summed
            exactly.
        num_arms, population_size: ``D`` and ``N`` when ``rewards`` is a function.
        arm_offset: ``[num_arms]`` constants added to the arm means.
        normal_event: which passage event ``B_Normal`` inverts (see
            :func:`b_normal`): ``"one_sided"`` (Eq. 5, default) or ``"two_sided"``
            (reproduces Table 1 of the paper).
        lil_ucb_setting: ``"heuristic"`` or ``"theory"`` (Jamieson et al. 2014).
        heavy_tail_guard: for the Normal methods, keep the error promise when the
            compared rewards are skewed or heavy-tailed (log-likelihood differences on
            heavy-tailed data): a comparison may eliminate an arm only once
            ``T >= 28 + 25 g1^2`` points are read (Sugden, Smith & Jones 2000, the
            rule for a without-replacement sample mean) and ``B`` gets the
            Cornish-Fisher correction ``|g1| (2B^2 + 1) / (6 sqrt(T))`` of the
            studentised mean (Hall 1983), ``g1`` being the sample skewness of the
            pair's reward differences (:func:`~subsample_mcmc.racing.race.tail_guard`).
            On by default; ``False`` is the paper's plain Racing-Normal.  A population
            whose tail is so rare that the sample never shows it (one huge reward in
            N) cannot be guarded by any sampling rule: read such points exactly
            (a control variate's ``exact_indices``).
        check_finite: scan a concrete reward array for NaN/inf before racing (one
            O(N D) NumPy pass; skipped for traced arrays, e.g. inside ``jit``).
            Rewards the race reads are always checked.
        population_sizes: ``[num_arms]`` integers ``N_y``: arms whose populations differ
            in size (App. C.3; clusters in author coreference).  Arms are then compared
            by their *totals* ``arm_offset_y + sum_{n < N_y} l_{y,n}``, each read along
            its own permutation with App. C.3's schedule (``first_batch`` default 3,
            then doubling from ``max(floor((N_y - 3) / 10), 1)``), Eq. 26's bound for
            independent arms with Eq. 27's union constant, and the heavy-tail guard
            (:mod:`~subsample_mcmc.racing.unequal`).  ``rewards`` is a ``[D, max N_y]``
            array padded past each size, or a function ``(arms, indices) -> rewards``
            (elementwise, ``indices[k] < N_{arms[k]}``; then ``population_size`` is the
            largest size).  Methods ``"normal"``/``"normal_union"`` and ``"exact"``.
        reward_bounds: with ``population_sizes``, ``(lo, hi)`` (scalars or ``[num_arms]``)
            such that every reward of arm ``y`` lies in ``[lo_y, hi_y]`` (e.g. a bounded
            pairwise factor).  Arms of at most ``first_batch`` rewards are then not read in
            the first stage: arm ``y`` is dropped unread once its largest possible total
            ``arm_offset_y + N_y hi_y`` falls below the leader's lower confidence limit
            ``S_hat_x - B sqrt(V_x)`` (one comparison per pair and stage, as in Eq. 27's
            union bound, so the error level is unchanged).  Small clusters facing a strong
            leader then cost nothing.  A reward read outside its bounds stops the race.
        resolution: ``epsilon >= 0`` in the units of ``mu``: stop once every other arm's
            confidence width against the leader is below ``epsilon`` and return the leader,
            an ``epsilon``-good arm (``mu_best - mu_arm <= epsilon``) with probability at
            least ``1 - delta`` ((epsilon, delta)-PAC; :func:`~.race.run_race`).  Where the
            arms' means carry continuous noise of bounded density (a Gumbel-max draw, the
            ``log u`` of an MH test), the returned arm then differs from the exact argmax
            with probability at most ``delta`` plus the noise's chance of landing within
            ``epsilon`` of a tie (:func:`~subsample_mcmc.kernels.mh.racing_mh_accept`), and
            no race reads much past the stage where the widths fall below ``epsilon``.
            Default 0: the exact best arm, a near-tie reads all ``N``.  Alg. 1's methods
            (not ``"lil_ucb"``, not ``population_sizes``); traced values are accepted.
        max_points: a reading budget: the race stops at the last stage boundary of the
            doubling schedule at or below ``max_points`` raced points (at least the first
            stage); a race still undecided there returns ``arm == -1`` and ``truncated ==
            True`` for the caller to decide exactly (full-data sums with the same noise: the
            race's answer at ``T = N``).  A truncated race decides nothing, so the error
            promise is unchanged (:func:`~.race.run_race`).  Worth it where a raced point
            costs many times a point of a contiguous full-data pass (gathered rows, a control
            variate, the race's statistics): past a share of ``N`` the race costs more than the
            exact answer.  Alg. 1's methods only (not ``"lil_ucb"``, not ``population_sizes``);
            ``None`` (default): no budget.

    Returns:
        :class:`RaceResult` with ``arm``, ``num_rewards_read`` (the paper's cost:
        rewards of the arms still racing), ``num_stages``, ``num_points_read``,
        ``nonfinite``, ``num_points_computed``, ``num_likelihood_evals``
        (rewards computed, ``D num_points_computed``; ``D N`` for ``"exact"``) and
        ``truncated`` (the ``max_points`` budget was reached undecided).

    Raises:
        ValueError: on bad arguments, and on non-finite rewards when they can be
        seen (a concrete array, or a concrete result).  Inside ``jit``/``vmap`` a
        non-finite reward yields ``arm == -1`` and ``nonfinite == True`` instead.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> rewards = jnp.stack([jnp.zeros(10000), jnp.full(10000, 0.5)])
        >>> rewards = rewards + jax.random.normal(jax.random.PRNGKey(1), (2, 10000))
        >>> r = best_arm(jax.random.PRNGKey(0), rewards, delta=0.01)
        >>> int(r.arm), int(r.num_rewards_read) < 2 * 10000
        (1, True)
    """
    if variance not in VARIANCES:
        raise ValueError(f"variance must be one of {VARIANCES}, got {variance!r}")
    if normal_event not in ("one_sided", "two_sided"):
        raise ValueError(f"normal_event must be 'one_sided' or 'two_sided', got {normal_event!r}")
    if lil_ucb_setting not in LIL_UCB_SETTINGS:
        raise ValueError(f"lil_ucb_setting must be one of {LIL_UCB_SETTINGS}, got {lil_ucb_setting!r}")
    bound = _resolve_bound(method, normal_event=normal_event, heavy_tail_guard=heavy_tail_guard,
                           lil_ucb_setting=lil_ucb_setting)
    traced_delta = _is_tracer(delta)
    if not traced_delta:
        if isinstance(delta, (str, bytes)):
            raise TypeError(f"delta must be a number in (0, 0.5), got the string {delta!r}; e.g. delta=0.05")
        try:
            delta = float(delta)
        except TypeError as err:
            raise TypeError(f"delta must be a float, got {delta!r}") from err
        if not (0.0 < delta < 0.5):
            raise ValueError(f"delta must lie in (0, 0.5), got {delta}; e.g. delta=0.05")

    if not _is_tracer(resolution):
        try:
            res = float(resolution)
        except TypeError as err:
            raise TypeError(f"resolution must be a float >= 0, got {resolution!r}") from err
        if not (res >= 0.0 and math.isfinite(res)):
            raise ValueError(f"resolution must be a finite number >= 0 (in the units of the arm means), got "
                             f"{resolution!r}; 0 races to the exact best arm")
        if res > 0.0 and (population_sizes is not None or isinstance(bound, LilUCBBound)):
            raise ValueError("resolution > 0 applies to Alg. 1's races (methods 'normal', 'normal_union', 'ebs', "
                             "'exact') over one population; pass resolution=0 with 'lil_ucb' or population_sizes")
    if population_sizes is not None:
        if max_points is not None:
            raise ValueError("max_points applies to races over one population; pass max_points=None with "
                             "population_sizes")
        return _best_arm_unequal(key, rewards, bound, delta, population_sizes, first_batch=first_batch,
                                 arm_offset=arm_offset, num_arms=num_arms, population_size=population_size,
                                 control_variate=control_variate, check_finite=check_finite,
                                 reward_bounds=reward_bounds)
    if reward_bounds is not None:
        raise ValueError("reward_bounds applies to races over populations of different sizes: pass "
                         "population_sizes as well, or reward_range=hi - lo for the 'ebs' and 'lil_ucb' bounds")

    # --- the reward source -------------------------------------------------------
    if callable(rewards):
        if num_arms is None or population_size is None:
            raise ValueError(
                "rewards is a function: pass num_arms=D and population_size=N as well"
            )
        reward_fn, reward_array = rewards, None
        n_arms, n_total = int(num_arms), int(population_size)
    else:
        reward_array = _as_float_array(rewards)
        if reward_array.ndim != 2:
            raise ValueError(
                f"rewards must have shape [num_arms, N]; got shape {reward_array.shape}"
            )
        n_arms, n_total = reward_array.shape
        if num_arms is not None and int(num_arms) != n_arms:
            raise ValueError(f"num_arms={num_arms} but rewards has {n_arms} rows")
        if population_size is not None and int(population_size) != n_total:
            raise ValueError(f"population_size={population_size} but rewards has {n_total} columns")
        reward_fn = None
        if check_finite and not _is_tracer(reward_array):
            bad = ~np.isfinite(np.asarray(reward_array))
            if bad.any():
                arm, idx = np.argwhere(bad)[0]
                raise ValueError(
                    f"rewards contains a non-finite value (first at arm {arm}, index {idx}); "
                    "racing needs finite rewards"
                )
    if n_arms < 2:
        raise ValueError(f"need at least 2 arms, got num_arms={n_arms}")
    if n_total < 2:
        raise ValueError(f"need a population of at least 2 rewards per arm, got N={n_total}")

    n_race = n_total
    if control_variate is not None:
        if not isinstance(control_variate, (TaylorControlVariate, ArmControlVariates)):
            raise TypeError("control_variate must be a TaylorControlVariate (see taylor_control_variate) or "
                            "ArmControlVariates (see linear_feature_proxy)")
        if control_variate.num_arms != n_arms:
            raise ValueError(
                f"control_variate has {control_variate.num_arms} arms, rewards have {n_arms}"
            )
        if control_variate.size != n_total:
            raise ValueError(
                f"control_variate was built on {control_variate.size} data points, "
                f"rewards have N={n_total}"
            )
        n_race = n_total - control_variate.exact_indices.shape[0]

    # --- first batch and schedule -------------------------------------------------
    if bound.default_first_batch is None:  # lil'UCB, exact: no schedule
        m1 = n_race
    else:
        if first_batch is None:
            m1 = min(bound.default_first_batch, n_race)
        else:
            if isinstance(first_batch, bool) or int(first_batch) != first_batch:
                raise ValueError(f"first_batch must be an integer, got {first_batch!r}")
            m1 = int(first_batch)
        if m1 < 2 or m1 > n_race:
            raise ValueError(
                f"first_batch must lie in [2, N={n_race}] (the raced population), got {m1}"
            )

    # --- offsets and ranges ------------------------------------------------------
    if arm_offset is None:
        offsets = jnp.zeros((n_arms,), jnp.float32)
    else:
        offsets = _as_float_array(arm_offset)
        if offsets.shape != (n_arms,):
            raise ValueError(f"arm_offset must have shape ({n_arms},), got {offsets.shape}")
    if reward_range is None:
        if bound.needs_range:
            if reward_array is None or control_variate is not None:
                raise ValueError(
                    f"method={bound.name!r} needs reward_range=C (the range of each arm's rewards) "
                    "when rewards is a function or a control variate is used"
                )
            ranges = jnp.max(reward_array, axis=1) - jnp.min(reward_array, axis=1)
        else:
            ranges = jnp.zeros((n_arms,), jnp.float32)
    else:
        given = _as_float_array(reward_range)
        if given.ndim > 1 or (given.ndim == 1 and given.shape[0] not in (1, n_arms)):
            raise ValueError(
                f"reward_range must be the width C = max - min of the rewards, a scalar or one per arm "
                f"([{n_arms}]), got shape {given.shape}; for rewards in [lo, hi] pass reward_range=hi - lo")
        ranges = jnp.broadcast_to(given, (n_arms,))
        if not _is_tracer(ranges) and not np.all(np.isfinite(np.asarray(ranges)) & (np.asarray(ranges) >= 0)):
            raise ValueError(f"reward_range must be the width C = max - min of the rewards (finite, >= 0), a "
                             f"scalar or one per arm; got {reward_range}; for rewards in [lo, hi] pass hi - lo")

    # --- the bound's constant (computed in Python, passed traced: no retrace) -------
    # (a traced delta, e.g. vmapped over error levels, gets closed forms / tabulated B)
    d_prime = (n_arms - 1) if variance == "pairwise" else n_arms
    lil = None
    if isinstance(bound, LilUCBBound):
        eps, beta, lam, param = bound.parameters(n_arms, delta)
        lil = (eps, beta, lam)
    else:  # 0.0 when no stage comes before the exact one (the constant is never used)
        param = bound.constant(delta / d_prime, n_race, m1)
    bound_param = jnp.asarray(param, jnp.float32)

    if max_points is not None:
        if isinstance(max_points, bool) or int(max_points) != max_points or max_points < 1:
            raise ValueError(f"max_points must be a positive integer (a budget of raced points) or None, "
                             f"got {max_points!r}")
        if isinstance(bound, LilUCBBound):
            raise ValueError("max_points applies to Alg. 1's staged races, not to method='lil_ucb'")
        max_points = int(max_points)
    config = (bound, variance, n_arms, n_total, m1, lil, max_points)
    result = _core_jit(
        key, reward_array, offsets, bound_param, ranges, control_variate, jnp.asarray(resolution, jnp.float32),
        reward_fn=reward_fn, config=config,
    )
    if not _is_tracer(result.nonfinite) and bool(jnp.any(result.nonfinite)):
        raise ValueError(
            "the rewards function returned a NaN or infinite reward; the race stopped "
            "(inside jit/vmap this is reported as arm == -1, nonfinite == True)"
        )
    return result
