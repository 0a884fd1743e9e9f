r"""The Two-Phase algorithm for parametrised Bernoulli bandits (paper 004, Sec. II).

Model (Sec. I-B): arm a has known attributes ``x_a in R^d`` and success probability
``sigmoid(x_a^T z)`` for an unknown preference ``z``.  The algorithm fixes ``d``
linearly independent *exploration arms* ``B = {b_1..b_d}`` and runs epochs
``c = 1, 2, ...``:

* **Phase 1**: pull each ``b_i`` once; after it every ``b_i`` has ``c`` pulls and an
  empirical success rate ``p_i = S_i / c``.
* **Good epoch** iff every ``0 < p_i < 1``: then ``z_hat = X_B^{-1} logit(p)`` (solve, not
  invert: Remark II.1) and the estimated best arm is ``argmax_a x_a^T z_hat`` (the
  logistic link is increasing).  **Bad epoch** otherwise: the paper lets the estimate be
  arbitrary; we exploit the exploration arm with the highest ``p_i``.
* **Phase 2**: pull that arm ``floor(f(c)) - floor(f(c-1))`` times (at least once).

The copy of the paper lost its formulas, including the scheduling function ``f``;
it must be strictly increasing and grow sub-exponentially for the finite-arm bound.
We use ``f(c) = exp(c^gamma)`` with ``gamma`` a traced parameter (default 1/2; with
``gamma = 1`` the phases grow geometrically as in UCB2).  The exploration arms are
chosen by greedy pivoting (largest residual after projecting out the chosen ones), a
well-conditioned full-rank choice.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .base import Policy

__all__ = ["TwoPhaseState", "two_phase", "exploration_arms", "phase_two_length"]


class TwoPhaseState(NamedTuple):
    successes: jax.Array  # [d] successes of each exploration arm
    epoch: jax.Array      # c (1-based)
    position: jax.Array   # next exploration arm in phase 1 (== d during phase 2)
    remaining: jax.Array  # phase-2 pulls left
    exploit: jax.Array    # arm exploited in phase 2
    good_epochs: jax.Array


def exploration_arms(features: jax.Array, dim: int) -> jax.Array:
    """``dim`` linearly independent rows of ``features [K, d]`` by greedy pivoting."""
    residual = features
    chosen = []
    for _ in range(dim):
        norms = jnp.sum(residual ** 2, axis=1)
        for c in chosen:
            norms = norms.at[c].set(-1.0)
        i = jnp.argmax(norms)
        chosen.append(i)
        v = residual[i] / jnp.sqrt(jnp.maximum(norms[i], 1e-12))
        residual = residual - jnp.outer(residual @ v, v)
    return jnp.stack(chosen).astype(jnp.int32)


def phase_two_length(epoch, gamma):
    """``max(1, floor(f(c)) - floor(f(c-1)))`` with ``f(c) = exp(c^gamma)``."""
    c = jnp.asarray(epoch, jnp.float32)
    f = lambda x: jnp.floor(jnp.exp(jnp.power(x, gamma)))
    return jnp.maximum(1.0, f(c) - f(c - 1.0)).astype(jnp.int32)


def _init(params, key, spec):
    d = spec.context_dim
    return TwoPhaseState(jnp.zeros((d,), jnp.float32), jnp.int32(1), jnp.int32(0), jnp.int32(0),
                         jnp.int32(0), jnp.int32(0))


def _select(params, state, key, t, obs):
    d = state.successes.shape[0]
    basis = exploration_arms(obs, d)
    return jnp.where(state.position < d, basis[jnp.minimum(state.position, d - 1)],
                     state.exploit).astype(jnp.int32)


def _update(params, state, key, t, arm, reward, obs):
    (gamma,) = params
    d = state.successes.shape[0]
    basis = exploration_arms(obs, d)
    in_phase1 = state.position < d
    successes = jnp.where(in_phase1, state.successes.at[jnp.minimum(state.position, d - 1)]
                          .add(reward), state.successes)
    position = jnp.where(in_phase1, state.position + 1, state.position)
    # end of phase 1: estimate z and choose the arm for phase 2
    p = successes / state.epoch.astype(jnp.float32)
    good = jnp.all((p > 0) & (p < 1))
    logits = jnp.log(jnp.clip(p, 1e-6, 1 - 1e-6)) - jnp.log1p(-jnp.clip(p, 1e-6, 1 - 1e-6))
    z_hat = jnp.linalg.solve(obs[basis], logits)
    best = jnp.where(good, jnp.argmax(obs @ z_hat), basis[jnp.argmax(p)]).astype(jnp.int32)
    starts_phase2 = in_phase1 & (position == d)
    remaining = jnp.where(starts_phase2, phase_two_length(state.epoch, gamma),
                          jnp.where(in_phase1, state.remaining, state.remaining - 1))
    ends_epoch = (~in_phase1) & (remaining == 0)
    return TwoPhaseState(
        successes,
        jnp.where(ends_epoch, state.epoch + 1, state.epoch),
        jnp.where(ends_epoch, 0, position).astype(jnp.int32),
        remaining.astype(jnp.int32),
        jnp.where(starts_phase2, best, state.exploit).astype(jnp.int32),
        state.good_epochs + (starts_phase2 & good).astype(jnp.int32))


def two_phase(gamma: float = 0.5) -> Policy:
    """The Two-Phase algorithm (paper 004, Sec. II) with scheduling ``f(c) =
    exp(c^gamma)``, ``gamma in (0, 1]``.  Use with
    :func:`~.environments.logistic_bernoulli` (``obs`` = the ``[K, d]`` attributes)."""
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must lie in (0, 1], got {gamma}")
    return Policy("two_phase", _init, _select, _update, (float(gamma),), ("gamma",))
