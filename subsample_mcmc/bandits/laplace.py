r"""Laplace-approximate posterior for logistic (parametrised Bernoulli) bandits.

Model: ``P(r = 1 | a) = sigmoid(x_a^T z)``, prior ``z ~ N(0, prior_sd^2 I)``.  The
posterior is approximated by ``N(z_MAP, H^{-1})`` with ``H = I / prior_sd^2 + sum_s
s_s (1 - s_s) x_s x_s^T`` (Laplace).  After each reward, ``newton_steps`` Newton
iterations warm-started at the previous MAP refit ``z_MAP`` on all data so far (a
static ``[T, d]`` buffer masked to the first n rows).  Plug into
:func:`~.thompson.thompson_sampling` for Laplace-TS.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .thompson import Posterior, thompson_sampling

__all__ = ["LaplaceState", "laplace_logistic_posterior", "ts_laplace"]


class LaplaceState(NamedTuple):
    features: jax.Array  # [T, d]
    rewards: jax.Array   # [T]
    count: jax.Array
    z_map: jax.Array     # [d]


def _hessian(params, state, z):
    prior_sd = params[0]
    mask = (jnp.arange(state.rewards.shape[0]) < state.count).astype(jnp.float32)
    s = jax.nn.sigmoid(state.features @ z)
    w = mask * s * (1 - s)
    d = z.shape[0]
    h = jnp.eye(d) / prior_sd ** 2 + (state.features * w[:, None]).T @ state.features
    g = (state.features * (mask * (state.rewards - s))[:, None]).sum(0) - z / prior_sd ** 2
    return h, g


@functools.lru_cache(maxsize=None)
def laplace_logistic_posterior(newton_steps: int = 3) -> Posterior:
    """Laplace posterior of the logistic model; params ``(prior_sd,)``."""

    def init(params, key, spec):
        t, d = spec.horizon, spec.context_dim
        return LaplaceState(jnp.zeros((t, d)), jnp.zeros((t,)), jnp.int32(0), jnp.zeros((d,)))

    def sample(params, state, key, obs):
        h, _ = _hessian(params, state, state.z_map)
        chol = jnp.linalg.cholesky(h)
        eps = jax.random.normal(key, state.z_map.shape)
        z = state.z_map + jax.scipy.linalg.solve_triangular(chol.T, eps, lower=False)
        return obs @ z           # logits: same argmax as the success probabilities

    def update(params, state, key, arm, reward, obs):
        i = state.count
        state = state._replace(features=state.features.at[i].set(obs[arm]),
                               rewards=state.rewards.at[i].set(reward), count=i + 1)

        def newton(z, _):
            h, g = _hessian(params, state, z)
            return z + jnp.linalg.solve(h, g), None

        z, _ = jax.lax.scan(newton, state.z_map, None, length=newton_steps)
        return state._replace(z_map=z)

    return Posterior(f"laplace{newton_steps}", init, sample, update, (1.0,), ("prior_sd",))


def ts_laplace(prior_sd: float = 1.0, newton_steps: int = 3):
    """Thompson sampling with the Laplace posterior (logistic bandits)."""
    if prior_sd <= 0 or newton_steps < 1:
        raise ValueError("prior_sd must be > 0 and newton_steps >= 1")
    return thompson_sampling(laplace_logistic_posterior(int(newton_steps)), "ts_laplace",
                             (prior_sd,))
