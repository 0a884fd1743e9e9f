r"""Ensemble sampling (Lu & Van Roy 2017) and the neural-bandit baselines of their Sec. 5.2.

Ensemble sampling (Alg. 1) keeps M models fitted to *perturbed* data and a *perturbed*
prior, plays greedily w.r.t. one model drawn uniformly at random each round, and updates
every model.  Each is a :class:`~.thompson.Posterior`, so :func:`thompson_sampling` over
it is ensemble sampling.

* :func:`gaussian_ensemble_posterior` -- independent Gaussian arms (Sec. 5.1): per arm
  and model, ``theta_{m,k} = (theta0_{m,k}/s0^2 + sum (r + W_m)/s^2) / (1/s0^2 +
  n_k/s^2)`` with ``theta0 ~ N(mu0, s0^2)``, ``W_m ~ N(0, s^2)``.
* :func:`linear_ensemble_posterior` -- the linear-Gaussian incremental update of Sec. 3:
  ``Sigma_{t+1} = (Sigma_t^{-1} + A A^T / s^2)^{-1}`` (Sherman-Morrison here) and
  ``theta_{t+1,m} = Sigma_{t+1}(Sigma_t^{-1} theta_{t,m} + A (R + W_{t+1,m}) / s^2)``.
  For a deterministic action sequence the models are i.i.d. posterior draws.
* :func:`neural_agent` -- M ReLU networks (single neuron or two layers, leaky
  ReLU ``max(0.01x, x)`` inside the agents), each trained after every round by a few
  optax steps on minibatches of the loss (Sec. 3 / 5.2)
  ``L_m(theta) = (1/s^2) sum_tau (R_tau + W_{tau,m} - g_theta(A_tau))^2 +
  (1/lambda) ||theta - theta0_m||^2`` (divided by the number of data for the step).
  ``kind="eps_greedy"`` (one unperturbed network, fixed or annealed epsilon) and
  ``kind="dropout"`` (one two-layer network with dropout on the hidden units, a fresh
  mask per decision: Gal & Ghahramani's approximate TS) are the paper's baselines.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .base import Policy
from .environments import relu_network
from .thompson import Posterior, thompson_sampling

__all__ = [
    "gaussian_ensemble_posterior", "linear_ensemble_posterior",
    "ensemble_gaussian", "ensemble_linear", "neural_agent", "GaussianEnsembleState",
    "LinearEnsembleState", "NeuralState",
]


def _check_models(num_models):
    if not isinstance(num_models, int) or num_models < 1:
        raise ValueError(f"num_models must be a positive integer, got {num_models!r}")


# --------------------------------------------------------------- independent Gaussian

class GaussianEnsembleState(NamedTuple):
    precision: jax.Array  # [K]    1/s0^2 + n_k/s^2
    natural: jax.Array    # [M, K] precision * theta_{m,k}


@functools.lru_cache(maxsize=None)
def gaussian_ensemble_posterior(num_models: int) -> Posterior:
    """Ensemble of ``num_models`` perturbed conjugate fits of independent Gaussian arms
    (Lu & Van Roy Sec. 5.1); params ``(prior_mean, prior_sd, noise_sd)``."""
    _check_models(num_models)

    def init(params, key, spec):
        mu0, s0, s = params
        theta0 = mu0 + s0 * jax.random.normal(key, (num_models, spec.num_arms))
        prec = jnp.full((spec.num_arms,), 1.0 / s0 ** 2)
        return GaussianEnsembleState(prec, theta0 * prec)

    def sample(params, state, key, obs):
        m = jax.random.randint(key, (), 0, num_models)
        return state.natural[m] / state.precision

    def update(params, state, key, arm, reward, obs):
        s = params[2]
        w = s * jax.random.normal(key, (num_models,))
        return GaussianEnsembleState(state.precision.at[arm].add(1.0 / s ** 2),
                                     state.natural.at[:, arm].add((reward + w) / s ** 2))

    return Posterior(f"gaussian_ensemble{num_models}", init, sample, update, (0.0, 1.0, 1.0),
                     ("prior_mean", "prior_sd", "noise_sd"))


def ensemble_gaussian(num_models: int, prior_mean=0.0, prior_sd=1.0, noise_sd=1.0) -> Policy:
    """Ensemble sampling on independent Gaussian arms (Lu & Van Roy Sec. 5.1, Fig. 1)."""
    if prior_sd <= 0 or noise_sd <= 0:
        raise ValueError("prior_sd and noise_sd must be > 0")
    return thompson_sampling(gaussian_ensemble_posterior(num_models), f"es_gaussian_{num_models}",
                             (prior_mean, prior_sd, noise_sd))


# --------------------------------------------------------------- linear Gaussian

class LinearEnsembleState(NamedTuple):
    cov: jax.Array      # [d, d] Sigma_t
    natural: jax.Array  # [M, d] Sigma_t^{-1} theta_{t,m}


@functools.lru_cache(maxsize=None)
def linear_ensemble_posterior(num_models: int) -> Posterior:
    """Linear-Gaussian ensemble of Lu & Van Roy Sec. 3; params ``(prior_sd, noise_sd)``
    (prior ``N(0, prior_sd^2 I)``).  ``Sigma`` by Sherman-Morrison, O(d^2 + M d) a round."""
    _check_models(num_models)

    def init(params, key, spec):
        s0 = params[0]
        d = spec.context_dim
        theta0 = s0 * jax.random.normal(key, (num_models, d))
        return LinearEnsembleState(s0 ** 2 * jnp.eye(d, dtype=jnp.float32), theta0 / s0 ** 2)

    def sample(params, state, key, obs):
        m = jax.random.randint(key, (), 0, num_models)
        return obs @ (state.cov @ state.natural[m])

    def update(params, state, key, arm, reward, obs):
        s = params[1]
        a = obs[arm]
        sa = state.cov @ a
        cov = state.cov - jnp.outer(sa, sa) / (s ** 2 + a @ sa)
        w = s * jax.random.normal(key, (num_models,))
        natural = state.natural + (reward + w)[:, None] * a[None, :] / s ** 2
        return LinearEnsembleState(cov, natural)

    return Posterior(f"linear_ensemble{num_models}", init, sample, update, (1.0, 1.0),
                     ("prior_sd", "noise_sd"))


def ensemble_linear(num_models: int, prior_sd=1.0, noise_sd=1.0) -> Policy:
    """Ensemble sampling for the linear-Gaussian bandit (Lu & Van Roy Example 1, Sec. 3)."""
    if prior_sd <= 0 or noise_sd <= 0:
        raise ValueError("prior_sd and noise_sd must be > 0")
    return thompson_sampling(linear_ensemble_posterior(num_models), f"es_linear_{num_models}",
                             (prior_sd, noise_sd))


# --------------------------------------------------------------- neural networks

class NeuralState(NamedTuple):
    weights: Any        # pytree, leading axis M
    anchors: Any        # theta0_m, the perturbed prior means
    opt_state: Any      # optax state, leading axis M
    arms: jax.Array     # [T] actions played
    rewards: jax.Array  # [T]
    noise: jax.Array    # [T, M] perturbations W_{t,m}
    count: jax.Array    # number of data


def _init_weights(key, num_models, dim, hidden, prior_sd):
    if hidden == 0:
        return prior_sd * jax.random.normal(key, (num_models, dim))
    k1, k2 = jax.random.split(key)
    return (prior_sd * jax.random.normal(k1, (num_models, hidden, dim)),
            prior_sd * jax.random.normal(k2, (num_models, hidden)))


def _forward(weights, actions, mask=None):
    if mask is None:
        return relu_network(weights, actions, leaky=0.01)
    w1, w2 = weights
    h = jnp.maximum(actions @ w1.T, 0.01 * (actions @ w1.T)) * mask
    return h @ w2


@functools.lru_cache(maxsize=None)
def _neural_functions(kind, num_models, hidden, steps, batch_size, learning_rate, optimizer):
    import optax

    if optimizer == "adam":
        opt = optax.adam(learning_rate)
    elif optimizer == "sgd":
        opt = optax.sgd(learning_rate)
    else:
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    perturb = kind == "ensemble"

    def init(params, key, spec):
        prior_var = params[0]
        k1, k2 = jax.random.split(key)
        anchors = _init_weights(k1, num_models, spec.context_dim, hidden, jnp.sqrt(prior_var))
        opt_state = jax.vmap(opt.init)(anchors)
        t = spec.horizon
        return NeuralState(anchors, anchors, opt_state, jnp.zeros((t,), jnp.int32),
                           jnp.zeros((t,), jnp.float32), jnp.zeros((t, num_models), jnp.float32),
                           jnp.int32(0))

    def loss(weights, anchor, actions, targets, prior_var, noise_var, n, mask):
        pred = _forward(weights, actions, mask)
        fit = jnp.mean((targets - pred) ** 2) / noise_var
        reg = sum(jnp.sum((w - a) ** 2) for w, a in zip(jax.tree_util.tree_leaves(weights),
                                                          jax.tree_util.tree_leaves(anchor)))
        return fit + reg / (prior_var * n)

    def update(params, state, key, t, arm, reward, obs):
        prior_var, noise_var = params[0], params[1]
        k_noise, k_train = jax.random.split(key)
        w = jnp.sqrt(noise_var) * jax.random.normal(k_noise, (num_models,)) if perturb \
            else jnp.zeros((num_models,))
        i = state.count
        state = state._replace(arms=state.arms.at[i].set(arm),
                               rewards=state.rewards.at[i].set(reward),
                               noise=state.noise.at[i].set(w), count=i + 1)
        n = state.count

        def sgd_step(carry, k):
            weights, opt_state = carry
            kb, kd = jax.random.split(k)
            idx = jax.random.randint(kb, (num_models, batch_size), 0, n)
            acts = obs[state.arms[idx]]                                   # [M, B, d]
            targets = state.rewards[idx] + jnp.take_along_axis(
                state.noise[idx], jnp.arange(num_models)[:, None, None], axis=2)[..., 0]
            if kind == "dropout":
                keep = 1.0 - params[2]
                masks = jax.random.bernoulli(kd, keep, (num_models, batch_size, hidden)) / keep
            else:
                masks = None

            def one(wm, am, om, xm, ym, mm):
                g = jax.grad(loss)(wm, am, xm, ym, prior_var, noise_var, n.astype(jnp.float32), mm)
                upd, om = opt.update(g, om, wm)
                return optax.apply_updates(wm, upd), om

            if masks is None:
                weights, opt_state = jax.vmap(lambda a, b, c, x, y: one(a, b, c, x, y, None))(
                    weights, state.anchors, opt_state, acts, targets)
            else:
                weights, opt_state = jax.vmap(one)(weights, state.anchors, opt_state, acts,
                                                   targets, masks)
            return (weights, opt_state), None

        (weights, opt_state), _ = jax.lax.scan(sgd_step, (state.weights, state.opt_state),
                                               jax.random.split(k_train, steps))
        return state._replace(weights=weights, opt_state=opt_state)

    def select(params, state, key, t, obs):
        k1, k2, k3 = jax.random.split(key, 3)
        if kind == "ensemble":
            m = jax.random.randint(k1, (), 0, num_models)
            pred = _forward(jax.tree_util.tree_map(lambda w: w[m], state.weights), obs)
            return jnp.argmax(pred).astype(jnp.int32)
        weights = jax.tree_util.tree_map(lambda w: w[0], state.weights)
        if kind == "dropout":
            keep = 1.0 - params[2]
            mask = jax.random.bernoulli(k1, keep, (hidden,)) / keep
            return jnp.argmax(_forward(weights, obs, mask)).astype(jnp.int32)
        # eps-greedy: params[2] = epsilon (fixed) or c of eps_t = c / (c + t) (annealed)
        pred = _forward(weights, obs)
        eps = params[2] if kind == "eps_greedy" else params[2] / (params[2] + t)
        explore = jax.random.uniform(k2) < eps
        return jnp.where(explore, jax.random.randint(k3, (), 0, obs.shape[0]),
                         jnp.argmax(pred)).astype(jnp.int32)

    return init, select, update


def neural_agent(kind: str = "ensemble", num_models: int = 10, hidden: int = 0,
                 prior_var: float = 10.0, noise_var: float = 100.0, epsilon: float = 0.05,
                 dropout: float = 0.5, steps: int = 3, batch_size: int = 64,
                 learning_rate: float = 1e-2, optimizer: str = "adam") -> Policy:
    """Agents for the ReLU bandits of Lu & Van Roy Sec. 5.2 (use with
    :func:`~.environments.neural` of the same ``hidden``).

    Args:
        kind: ``"ensemble"`` (ensemble sampling with ``num_models`` perturbed networks),
            ``"eps_greedy"`` (one network, fixed ``epsilon``), ``"eps_annealed"`` (one
            network, ``eps_t = epsilon / (epsilon + t)``, ``epsilon`` > 0 a time scale),
            ``"dropout"`` (one two-layer network, dropout probability ``dropout``).
        hidden: 0 for the single neuron, D for the two-layer network.
        prior_var, noise_var: ``lambda`` and ``sigma_z^2`` of the loss (paper: 10/1 and
            100).
        steps, batch_size: optimiser steps per round and minibatch size (paper: 3, 64).
        learning_rate, optimizer: the optax optimiser (``"adam"`` or ``"sgd"``).
    """
    kinds = ("ensemble", "eps_greedy", "eps_annealed", "dropout")
    if kind not in kinds:
        raise ValueError(f"kind must be one of {kinds}, got {kind!r}")
    _check_models(num_models)
    if kind != "ensemble":
        num_models = 1
    if kind == "dropout" and hidden == 0:
        raise ValueError("dropout needs a hidden layer: pass hidden > 0")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
    if prior_var <= 0 or noise_var <= 0:
        raise ValueError("prior_var and noise_var must be > 0")
    if epsilon < 0 or (kind == "eps_greedy" and epsilon > 1):
        raise ValueError(f"epsilon out of range: {epsilon}")
    if steps < 1 or batch_size < 1 or learning_rate <= 0:
        raise ValueError("steps, batch_size and learning_rate must be positive")
    init, select, update = _neural_functions(kind, int(num_models), int(hidden), int(steps),
                                             int(batch_size), float(learning_rate), optimizer)
    third = dropout if kind == "dropout" else epsilon
    name = {"ensemble": f"es_neural_{num_models}", "eps_greedy": f"eps_greedy_{epsilon}",
            "eps_annealed": f"eps_annealed_{epsilon}", "dropout": f"dropout_{dropout}"}[kind]
    return Policy(name, init, select, update, (float(prior_var), float(noise_var), float(third)),
                  ("prior_var", "noise_var", "dropout" if kind == "dropout" else "epsilon"))

