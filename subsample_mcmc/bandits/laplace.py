r"""Laplace-approximate posterior for logistic (parametrised Bernoulli) bandits.

Model (paper 004, Sec. I-B): arm ``a`` has known attributes ``x_a in R^d`` and pays 1
with probability ``sigmoid(x_a^T z)``; prior ``z ~ N(0, s_0^2 I)``.  After ``n`` rounds
with history ``(x_i, y_i)_{i<n}`` the log posterior is, up to a constant,

.. math::  \log \pi_n(z) = -\frac{|z|^2}{2 s_0^2} + \sum_{i<n} l_i(z), \qquad
           l_i(z) = y_i\, x_i^T z - \log(1 + e^{x_i^T z}),

and the Laplace approximation (Tierney & Kadane 1986;
:func:`~subsample_mcmc.kernels.laplace.laplace_approximation`) is

.. math::  \pi_n \approx N(\hat z, P^{-1}), \qquad P = -\nabla^2 \log \pi_n(\hat z),

``\hat z`` the MAP.  Gradient and Hessian are autodiff of :func:`log_posterior` (no
derivative written by hand).  After each reward, ``newton_steps`` Newton iterations
``z <- z - [\nabla^2 \log\pi_n(z)]^{-1} \nabla \log\pi_n(z)`` warm-started at the
previous MAP refit ``\hat z`` on all data so far, held in a static ``[T, d]`` buffer
masked to its first ``n`` rows.  Plug into :func:`~.thompson.thompson_sampling` for
Laplace-TS.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from ..kernels.laplace import laplace_approximation
from .thompson import Posterior, thompson_sampling

__all__ = ["LaplaceState", "laplace_logistic_posterior", "ts_laplace", "logistic_log_likelihood",
           "log_prior", "log_posterior"]


class LaplaceState(NamedTuple):
    features: jax.Array  # [T, d]
    rewards: jax.Array   # [T]
    count: jax.Array
    z_map: jax.Array     # [d]


def logistic_log_likelihood(features: jax.Array, rewards: jax.Array, count) -> Callable:
    r"""Per-datum masked log-likelihoods of the logistic bandit's history buffer.

    Args:
        features: ``[T, d]`` attributes ``x_i`` of the arms played (slots ``i >= n``
            unused).
        rewards: ``[T]`` rewards ``y_i in {0, 1}``.
        count: ``n``, the filled slots.

    Returns:
        ``(z, indices) -> [len(indices)]``: ``m_i (y_i x_i^T z - log(1 + e^{x_i^T z}))``
        with the mask ``m_i = 1[i < n]`` (the ``log_likelihood_fn`` signature of
        :mod:`subsample_mcmc.kernels`), so sums over the whole buffer are sums over the
        history.
    """

    def log_lik(z, idx):
        s = features[idx] @ z
        mask = (idx < count).astype(s.dtype)
        return mask * (rewards[idx] * s - jax.nn.softplus(s))

    return log_lik


def log_prior(prior_sd) -> Callable:
    """``z -> -|z|^2 / (2 s_0^2)``: the ``N(0, s_0^2 I)`` log prior up to a constant."""

    def log_p(z):
        return -0.5 * jnp.sum(z * z) / prior_sd ** 2

    return log_p


def log_posterior(features: jax.Array, rewards: jax.Array, count, prior_sd) -> Callable:
    r"""``z -> log pi_n(z) = -|z|^2 / (2 s_0^2) + sum_{i<n} l_i(z)`` (up to a constant) on
    the masked buffer (:func:`logistic_log_likelihood`).

    Args:
        features, rewards, count: the history buffer.
        prior_sd: ``s_0``.

    Returns:
        The log posterior, a scalar function of ``z [d]`` (one pass over the ``T`` slots).
    """
    log_lik = logistic_log_likelihood(features, rewards, count)
    log_p = log_prior(prior_sd)
    slots = jnp.arange(rewards.shape[0])

    def log_post(z):
        return log_p(z) + jnp.sum(log_lik(z, slots))

    return log_post


def _newton(log_post: Callable, z: jax.Array, steps: int) -> jax.Array:
    """``steps`` plain Newton iterations on ``log_post`` from ``z`` (autodiff gradient and
    Hessian; the log posterior is strictly concave, so each Hessian is negative definite)."""
    grad, hess = jax.grad(log_post), jax.hessian(log_post)

    def step(z, _):
        return z - jnp.linalg.solve(hess(z), grad(z)), None

    z, _ = jax.lax.scan(step, z, None, length=steps)
    return z


@functools.lru_cache(maxsize=None)
def laplace_logistic_posterior(newton_steps: int = 3) -> Posterior:
    r"""Laplace posterior of the logistic model; params ``(prior_sd,)``.

    ``sample`` draws ``z = \hat z + L \xi``, ``\xi ~ N(0, I)``, ``L L^T = P^{-1}`` the
    Cholesky factor of :func:`~subsample_mcmc.kernels.laplace.laplace_approximation` at
    the current MAP, and returns the logits ``x_a^T z`` (same argmax as the success
    probabilities).  ``update`` appends the round's ``(x, y)`` and runs ``newton_steps``
    Newton iterations from the previous MAP.
    """

    def _log_post(params, state):
        return log_posterior(state.features, state.rewards, state.count, params[0])

    def init(params, key, spec):
        t, d = spec.horizon, spec.context_dim
        return LaplaceState(jnp.zeros((t, d)), jnp.zeros((t,)), jnp.int32(0), jnp.zeros((d,)))

    def sample(params, state, key, obs):
        log_post = _log_post(params, state)
        laplace = laplace_approximation(state.z_map, jax.hessian(log_post)(state.z_map))
        z = laplace.mode + laplace.scale_tril @ jax.random.normal(key, state.z_map.shape)
        return obs @ z

    def update(params, state, key, arm, reward, obs):
        i = state.count
        state = state._replace(features=state.features.at[i].set(obs[arm]),
                               rewards=state.rewards.at[i].set(reward), count=i + 1)
        return state._replace(z_map=_newton(_log_post(params, state), state.z_map, newton_steps))

    return Posterior(f"laplace{newton_steps}", init, sample, update, (1.0,), ("prior_sd",))


def ts_laplace(prior_sd: float = 1.0, newton_steps: int = 3):
    """Thompson sampling with the Laplace posterior (logistic bandits).

    Args:
        prior_sd: ``s_0``, the prior standard deviation of each coordinate of ``z``.
        newton_steps: Newton iterations per round (warm-started).

    Returns:
        A :class:`~.base.Policy` (:func:`~.thompson.thompson_sampling`).

    Raises:
        ValueError: ``prior_sd <= 0`` or ``newton_steps < 1``.
    """
    if prior_sd <= 0 or newton_steps < 1:
        raise ValueError("prior_sd must be > 0 and newton_steps >= 1")
    return thompson_sampling(laplace_logistic_posterior(int(newton_steps)), "ts_laplace",
                             (prior_sd,))
