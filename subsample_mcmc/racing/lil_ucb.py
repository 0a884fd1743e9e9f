r"""Adapted lil'UCB for a finite reward population (Sec. 3.2 of Chen & Ghahramani 2016).

lil'UCB (Jamieson, Malloy, Nowak & Bubeck 2014, Fig. 1) pulls, one reward at a
time, the arm with the largest upper confidence bound

    U_i = mu_hat_i + (1 + beta)(1 + sqrt(eps)) sqrt( 2 sigma_i^2 (1 + eps)
              log( log((1 + eps) T_i) / delta' ) / T_i ),

and stops when some arm has been pulled much more than all others together,
``T_i >= 1 + lambda sum_{j != i} T_j``, returning ``argmax_i T_i``.  The adaptation to
a finite population of N rewards per arm (Prop. 2):

1. each arm reads its own rewards *without replacement*, arms independent of each
   other (one keyed permutation per arm);
2. once ``T_i = N`` the mean of arm ``i`` is exact and its bound is ``mu_hat_i``;
3. the race also stops when the arm with the highest bound is exact, returning it.

So no arm is read more than N times and at most ``N D`` rewards are read.

Parameter settings (Jamieson et al. 2014):

* ``"heuristic"`` (Sec. 5 there, used by Chen & Ghahramani): ``eps = 0``,
  ``beta = 1/2``, ``lambda = 1 + 10 / D``, ``delta' = delta / 5``;
* ``"theory"`` (Thm. 2): ``eps = 0.01``, ``beta = 1``, ``lambda = ((2+beta)/beta)^2 = 9``,
  and ``delta'`` solving ``4 sqrt(c_eps delta') + 4 c_eps delta' = delta`` with
  ``c_eps = (2+eps)/eps (1/log(1+eps))^(1+eps)``, so that Thm. 2 guarantees error
  at most ``delta``.

The scale ``sigma_i`` is ``C_i / 2`` for rewards of range ``C_i`` (bounded variables
are ``C/2``-sub-Gaussian), as in the paper's experiments.  ``log`` of the inner
logarithm is floored at 1 (``log_+``) so that ``eps = 0`` is well defined at ``T = 1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, ClassVar, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax import lax

from .bounds import ConfidenceBound, _array_module
from .permutation import IndexStream, index_stream, permuted_indices
from .race import RaceResult

__all__ = ["lil_ucb", "lil_ucb_parameters", "lil_ucb_radius", "LilUCBBound", "LIL_UCB_SETTINGS"]

LIL_UCB_SETTINGS = ("heuristic", "theory")
_EPSILON_BETA = {"heuristic": (0.0, 0.5), "theory": (0.01, 1.0)}


def lil_ucb_parameters(setting: str, num_arms: int, delta):
    """``(epsilon, beta, lambda, delta')`` for a setting of Jamieson et al. (2014).

    ``delta`` may be a Python float or a (traced) JAX scalar.
    """
    sqrt = math.sqrt if isinstance(delta, (float, int)) else jnp.sqrt
    if setting == "heuristic":
        eps, beta = _EPSILON_BETA[setting]
        return eps, beta, 1.0 + 10.0 / num_arms, delta / 5.0
    if setting == "theory":
        eps, beta = _EPSILON_BETA[setting]
        c_eps = (2.0 + eps) / eps * (1.0 / math.log(1.0 + eps)) ** (1.0 + eps)
        s = 0.5 * (sqrt(1.0 + delta) - 1.0)  # 4 s + 4 s^2 = delta, s = sqrt(c delta')
        return eps, beta, ((2.0 + beta) / beta) ** 2, s * s / c_eps
    raise ValueError(f"lil_ucb setting must be one of {LIL_UCB_SETTINGS}, got {setting!r}")


def lil_ucb_radius(delta_param, count, sigma, epsilon: float, beta: float):
    r"""The confidence radius of lil'UCB (Jamieson et al. 2014, Fig. 1)::

        (1 + beta)(1 + sqrt(eps)) sqrt( 2 sigma^2 (1 + eps) log( log_+((1 + eps) T) / delta' ) / T ),

    with ``log_+(x) = log(max(x, e))`` (so that ``eps = 0`` is defined at ``T = 1``).

    Args:
        delta_param: ``delta'`` (:func:`lil_ucb_parameters`).
        count: ``T_i``, the pulls of the arm (NumPy or JAX).
        sigma: the sub-Gaussian scale ``sigma_i`` (``C_i / 2``).
        epsilon, beta: the settings of :func:`lil_ucb_parameters`.
    """
    xp = _array_module(delta_param, count, sigma)
    t = xp.asarray(count).astype(xp.asarray(sigma).dtype)
    scale = (1.0 + beta) * (1.0 + math.sqrt(epsilon))
    inner = xp.log(xp.maximum((1.0 + epsilon) * t, math.e))
    return scale * sigma * xp.sqrt(2.0 * (1.0 + epsilon) * xp.log(inner / delta_param) / t)


@dataclass(frozen=True)
class LilUCBBound(ConfidenceBound):
    r"""The confidence bound of adapted lil'UCB (Sec. 3.2; Jamieson et al. 2014).

    :meth:`constant` is ``delta'`` of the setting (:func:`lil_ucb_parameters`);
    :meth:`width` is :func:`lil_ucb_radius` with ``sigma = C / 2`` (rewards of range
    ``C`` are ``C/2``-sub-Gaussian), zero at ``T = N`` (adaptation 2).  Used by
    :func:`lil_ucb`, not by Alg. 1.

    Attributes:
        setting: ``"heuristic"`` or ``"theory"``.
    """

    setting: str = "heuristic"
    name: ClassVar[str] = "lil_ucb"
    needs_range: ClassVar[bool] = True
    default_first_batch: ClassVar[Optional[int]] = None

    def __post_init__(self):
        if self.setting not in LIL_UCB_SETTINGS:
            raise ValueError(f"lil_ucb setting must be one of {LIL_UCB_SETTINGS}, got {self.setting!r}")

    def parameters(self, num_arms: int, delta):
        """``(epsilon, beta, lambda, delta')`` (:func:`lil_ucb_parameters`)."""
        return lil_ucb_parameters(self.setting, num_arms, delta)

    def constant(self, delta, population_size: int, first_batch: int):
        """``delta'`` of the setting (it does not depend on the number of arms)."""
        return self.parameters(2, delta)[3]

    def width(self, constant, count, sd, reward_range, population_size: int):
        """The lil'UCB radius with ``sigma = C / 2`` (``sd`` is not used)."""
        eps, beta = _EPSILON_BETA[self.setting]
        xp = _array_module(constant, count, reward_range)
        count = xp.asarray(count)
        radius = lil_ucb_radius(constant, count, xp.asarray(reward_range) / 2.0, eps, beta)
        return xp.where(count >= population_size, 0.0, radius)


class _State(NamedTuple):
    done: jax.Array
    nonfinite: jax.Array
    arm: jax.Array
    pulls: jax.Array  # int32[D]
    sums: jax.Array  # [D] sums of rewards minus shift (Kahan-compensated)
    compensation: jax.Array  # [D] Kahan compensation terms
    iterations: jax.Array


def lil_ucb(
    key: jax.Array,
    reward_fn: Callable[[jax.Array, jax.Array], jax.Array],
    arm_offset: jax.Array,
    delta_param: jax.Array,
    sigma: jax.Array,
    *,
    num_arms: int,
    population_size: int,
    epsilon: float,
    beta: float,
    lam: float,
    index_map: Optional[jax.Array] = None,
) -> RaceResult:
    """Run adapted lil'UCB once.  Traceable; keyword arguments are static.

    Args:
        reward_fn: ``(arms [k], indices [k]) -> rewards [k]``, the reward of arm
            ``arms[j]`` at data point ``indices[j]``.
        arm_offset: ``[D]`` constants added to each arm's mean.
        delta_param: the confidence parameter ``delta'`` of the bound.
        sigma: ``[D]`` sub-Gaussian scales.
    """
    n_pop, n_arms = int(population_size), int(num_arms)
    keys = jax.random.split(key, n_arms)
    round_keys = jax.vmap(lambda k: index_stream(k, n_pop).round_keys)(keys)
    split = index_stream(keys[0], n_pop).split
    arange = jnp.arange(n_arms)

    def index_of(arm, position):
        stream = IndexStream(round_keys[arm], n_pop, split)
        idx = permuted_indices(stream, position)
        return idx if index_map is None else index_map[idx]

    first_idx = jax.vmap(index_of)(arange, jnp.zeros((n_arms,), jnp.int32))
    first = reward_fn(arange, first_idx)
    finite0 = jnp.all(jnp.isfinite(first))
    shift = jnp.where(finite0, first, 0.0)

    def ucb(state):
        t = state.pulls.astype(shift.dtype)
        mean = (state.sums - state.compensation) / t + shift + arm_offset
        conf = lil_ucb_radius(delta_param, state.pulls, sigma, epsilon, beta)
        return jnp.where(state.pulls >= n_pop, mean, mean + conf)

    def cond(state):
        return ~state.done

    def body(state):
        bound = ucb(state)
        best = jnp.argmax(bound).astype(jnp.int32)
        total = jnp.sum(state.pulls)
        lil_stop = jnp.any(state.pulls >= 1 + lam * (total - state.pulls))
        exact_stop = state.pulls[best] >= n_pop
        stop = lil_stop | exact_stop
        arm = jnp.where(exact_stop, best, jnp.argmax(state.pulls).astype(jnp.int32))
        pos = jnp.minimum(state.pulls[best], n_pop - 1)
        reward = reward_fn(best[None], index_of(best, pos[None]))[0]
        finite = jnp.isfinite(reward)
        take = ~stop & finite
        nonfinite = ~stop & ~finite
        # Kahan summation: up to N float32 additions per arm must not lose the gap
        y = jnp.where(take, reward - shift[best], 0.0) - state.compensation[best]
        t_sum = state.sums[best] + y
        comp = (t_sum - state.sums[best]) - y
        sums = state.sums.at[best].set(t_sum)
        compensation = state.compensation.at[best].set(jnp.where(take, comp, state.compensation[best]))
        pulls = state.pulls.at[best].add(take.astype(jnp.int32))
        return _State(
            done=stop | nonfinite,
            nonfinite=nonfinite,
            arm=jnp.where(nonfinite, -1, jnp.where(stop, arm, -1)).astype(jnp.int32),
            pulls=pulls,
            sums=sums,
            compensation=compensation,
            iterations=state.iterations + take.astype(jnp.int32),
        )

    init = _State(
        done=~finite0,
        nonfinite=~finite0,
        arm=jnp.array(-1, jnp.int32),
        pulls=jnp.ones((n_arms,), jnp.int32),
        sums=jnp.zeros((n_arms,), shift.dtype),
        compensation=jnp.zeros((n_arms,), shift.dtype),
        iterations=jnp.array(n_arms, jnp.int32),
    )
    final = lax.while_loop(cond, body, init)
    total = jnp.sum(final.pulls).astype(jnp.int32)
    return RaceResult(
        arm=final.arm,
        num_rewards_read=total,
        num_stages=final.iterations,
        num_points_read=jnp.max(final.pulls).astype(jnp.int32),
        nonfinite=final.nonfinite,
        num_points_computed=total,  # a reward function evaluates every arm at each pull
        num_likelihood_evals=total * n_arms,
        truncated=jnp.zeros((), bool),
        alive=jnp.ones((n_arms,), bool),
    )
