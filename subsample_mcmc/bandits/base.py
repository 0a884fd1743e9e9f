"""Core types of the bandit layer: environments and policies as pure function bundles.

A *policy* is a triple of pure functions over a NamedTuple state (BlackJAX style)::

    state = policy.init(params, key, spec)
    arm   = policy.select(params, state, key, t, obs)
    state = policy.update(params, state, key, t, arm, reward, obs)

``t`` is the 1-indexed round being played (``t = 1 .. T``), ``obs`` is what the
environment shows before the round (the ``[K, d]`` arm features of a linear or neural
bandit, a dummy scalar for a plain multi-armed bandit) and ``params`` is a pytree of
hyper-parameters kept *outside* the closure so that it can be traced: the same compiled
code then runs a policy for thousands of hyper-parameter vectors (``vmap`` over
``params``), which is what the meta-learning of Maes, Wehenkel & Ernst (Alg. 2) needs.

An *environment* is a distribution over problems plus the per-round mechanics::

    problem = env.sample_problem(key)          # e.g. arm means drawn from a prior
    obs     = env.observe(problem, key, t)      # contexts / arm features
    mu      = env.mean_rewards(problem, obs)    # [K] expected rewards (for regret)
    r       = env.sample_reward(problem, key, obs, arm)

Both are frozen dataclasses hashed by identity, so that the simulator can cache one
compiled program per (policy, environment, horizon).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["BanditSpec", "Environment", "Policy", "argmax_random_ties"]


class BanditSpec(NamedTuple):
    """Static facts a policy may rely on: ``num_arms`` K, ``horizon`` T and the
    feature dimension ``context_dim`` (0 for a context-free bandit)."""

    num_arms: int
    horizon: int
    context_dim: int = 0


@dataclasses.dataclass(frozen=True, eq=False)
class Environment:
    """A distribution over bandit problems and the per-round reward mechanics.

    Attributes:
        name: registry name.
        num_arms: the number of arms K.
        context_dim: dimension of each arm's feature vector in ``obs`` (0 if none).
        sample_problem: ``key -> problem`` (a pytree; fixed problems ignore the key).
        observe: ``(problem, key, t) -> obs``.
        mean_rewards: ``(problem, obs) -> [K]`` expected rewards, used for the
            pseudo-regret ``mu* - mu_{b_t}`` (Eq. 1 of Maes et al.).
        sample_reward: ``(problem, key, obs, arm) -> reward``.
        reward_range: ``(low, high)`` when rewards are bounded, else ``None``.
    """

    name: str
    num_arms: int
    context_dim: int
    sample_problem: Callable[[jax.Array], Any]
    observe: Callable[[Any, jax.Array, jax.Array], jax.Array]
    mean_rewards: Callable[[Any, jax.Array], jax.Array]
    sample_reward: Callable[[Any, jax.Array, jax.Array, jax.Array], jax.Array]
    reward_range: Any = None

    def spec(self, horizon: int) -> BanditSpec:
        return BanditSpec(self.num_arms, int(horizon), self.context_dim)


@dataclasses.dataclass(frozen=True, eq=False)
class Policy:
    """A bandit policy as a pure ``(init, select, update)`` triple.

    Attributes:
        name: registry name.
        init: ``(params, key, spec) -> state``.
        select: ``(params, state, key, t, obs) -> arm`` (int32 scalar).
        update: ``(params, state, key, t, arm, reward, obs) -> state``.
        default_params: the paper's default hyper-parameters (a pytree of floats).
        param_names: names of the entries of ``default_params`` (for errors and EDA).
    """

    name: str
    init: Callable
    select: Callable
    update: Callable
    default_params: Any = ()
    param_names: tuple = ()

    @property
    def functions(self) -> tuple:
        """``(init, select, update)``: what compiled code depends on (params are traced)."""
        return (self.init, self.select, self.update)

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"Policy({self.name!r})"


def argmax_random_ties(key: jax.Array, values: jax.Array) -> jax.Array:
    """``argmax`` with ties broken uniformly at random (Alg. 1 of Maes et al.).

    NaN entries never win unless every entry is NaN (then arm 0 is returned).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> int(argmax_random_ties(jax.random.PRNGKey(0), jnp.array([1.0, 3.0, 3.0, 2.0]))) in (1, 2)
        True
    """
    values = jnp.where(jnp.isnan(values), -jnp.inf, values)
    best = jnp.max(values)
    noise = jax.random.uniform(key, values.shape)
    return jnp.argmax(jnp.where(values >= best, noise, -1.0)).astype(jnp.int32)
