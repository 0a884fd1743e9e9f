"""Bandit environments (distributions over problems), all pure JAX and ``vmap``-able.

Every factory returns an :class:`~subsample_mcmc.bandits.base.Environment`; factories are
memoised so that the same arguments give the same object (one compiled simulation).

* :func:`bernoulli` -- K Bernoulli arms, means uniform on [0, 1] (the distribution
  ``D_P`` of Maes, Wehenkel & Ernst, Sec. 6.1) or fixed.
* :func:`truncated_gaussian` -- ``D'_P`` of the same section: each arm has a mean and a
  standard deviation uniform on [0, 1] and rewards ``N(m, s^2)`` truncated to [0, 1],
  drawn *by rejection* (redraw until the value falls in [0, 1]).
* :func:`gaussian` -- Gaussian arms with fixed means, or means ``N(prior_mean,
  prior_sd^2)`` (the independent Gaussian bandit of Lu & Van Roy, Sec. 5.1).
* :func:`mots_gaussian` -- the N-arm Gaussian bandit of Jin et al. used in Sec. 7 of
  Karbasi et al.: best arm mean 1, others ``1 - epsilon``, unit variance.
* :func:`linear_gaussian` -- Example 1 of Lu & Van Roy: ``R = theta^T a + W``,
  ``theta ~ N(0, prior_sd^2 I)``, a fixed set of K actions in R^d.
* :func:`linear_contextual` -- Sec. 3/6 of Karbasi et al.: fresh contexts
  ``b_a(t)`` (``||b|| <= 1``) every round, ``r = b^T mu + sigma eta``, ``||mu|| = 1``.
* :func:`neural` -- the single-neuron (``max(0, theta^T a)``) and two-layer
  (``W2^T max(0, W1 a)``) ReLU bandits of Lu & Van Roy, Sec. 5.2.
* :func:`logistic_bernoulli` -- parametrised Bernoulli arms ``p_a = 1 / (1 +
  exp(-x_a^T z))`` with known attributes ``x_a`` and unknown preference ``z`` (the
  model of the Two-Phase paper, Sec. I-B).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm

from .base import Environment

__all__ = [
    "bernoulli", "truncated_gaussian", "gaussian", "mots_gaussian", "linear_gaussian",
    "linear_contextual", "neural", "logistic_bernoulli", "truncated_gaussian_mean",
    "ENVIRONMENTS", "make_environment",
]

_DUMMY = jnp.zeros(())


def _check_arms(num_arms):
    if not isinstance(num_arms, int) or num_arms < 1:
        raise ValueError(f"num_arms must be a positive integer, got {num_arms!r}")


class MeansProblem(NamedTuple):
    means: jax.Array  # [K]


class TruncGaussProblem(NamedTuple):
    locs: jax.Array    # [K] mean of the untruncated Gaussian
    scales: jax.Array  # [K] its standard deviation
    means: jax.Array   # [K] arm means used for the regret (see ``regret_means``)


class FeatureProblem(NamedTuple):
    actions: jax.Array  # [K, d] action / arm features (fixed during an episode)
    weights: jax.Array  # model parameters (pytree leaf or tuple)


def _obs_dummy(problem, key, t):
    return _DUMMY


def _means(problem, obs):
    return problem.means


@functools.lru_cache(maxsize=None)
def _bernoulli(num_arms: int, means: tuple | None) -> Environment:
    fixed = None if means is None else jnp.asarray(means, jnp.float32)

    def sample_problem(key):
        if fixed is not None:
            return MeansProblem(fixed)
        return MeansProblem(jax.random.uniform(key, (num_arms,)))

    def sample_reward(problem, key, obs, arm):
        return (jax.random.uniform(key) < problem.means[arm]).astype(jnp.float32)

    return Environment("bernoulli", num_arms, 0, sample_problem, _obs_dummy, _means,
                       sample_reward, (0.0, 1.0))


def bernoulli(num_arms: int = 2, means=None) -> Environment:
    """Bernoulli arms; means uniform on [0, 1] per problem (``D_P`` of Maes et al.,
    Sec. 6.1) unless ``means`` fixes them."""
    _check_arms(num_arms)
    if means is not None:
        means = tuple(float(m) for m in means)
        if len(means) != num_arms or not all(0.0 <= m <= 1.0 for m in means):
            raise ValueError(f"means must be {num_arms} probabilities in [0, 1], got {means}")
    return _bernoulli(num_arms, means)


def truncated_gaussian_mean(loc, scale):
    r"""Mean of ``N(loc, scale^2)`` truncated to [0, 1]:
    ``loc + scale (phi(a) - phi(b)) / (Phi(b) - Phi(a))`` with ``a = -loc/scale``,
    ``b = (1 - loc)/scale``."""
    scale = jnp.maximum(scale, 1e-6)
    a, b = (0.0 - loc) / scale, (1.0 - loc) / scale
    z = norm.cdf(b) - norm.cdf(a)
    return jnp.clip(loc + scale * (norm.pdf(a) - norm.pdf(b)) / z, 0.0, 1.0)


def _sample_truncated(key, loc, scale):
    """Rejection sampler of Maes et al. (Sec. 6.1): draw ``N(loc, scale^2)`` until the
    value lies in [0, 1].  With ``loc`` in [0, 1] each draw is accepted with probability
    >= 1/2, so the expected number of draws is <= 2."""

    def cond(carry):
        return ~carry[1]

    def body(carry):
        _, _, k, i = carry
        x = loc + scale * jax.random.normal(jax.random.fold_in(k, i))
        return x, (x >= 0.0) & (x <= 1.0), k, i + 1

    x, _, _, _ = jax.lax.while_loop(cond, body, (jnp.float32(0.0), jnp.bool_(False), key,
                                                 jnp.int32(0)))
    return x


@functools.lru_cache(maxsize=None)
def _truncated_gaussian(num_arms: int, regret_means: str) -> Environment:
    def sample_problem(key):
        k1, k2 = jax.random.split(key)
        locs = jax.random.uniform(k1, (num_arms,))
        scales = jax.random.uniform(k2, (num_arms,))
        means = locs if regret_means == "location" else truncated_gaussian_mean(locs, scales)
        return TruncGaussProblem(locs, scales, means)

    def sample_reward(problem, key, obs, arm):
        return _sample_truncated(key, problem.locs[arm], problem.scales[arm])

    return Environment("truncated_gaussian", num_arms, 0, sample_problem, _obs_dummy,
                       _means, sample_reward, (0.0, 1.0))


def truncated_gaussian(num_arms: int = 2, regret_means: str = "location") -> Environment:
    """``D'_P`` of Maes et al. (Sec. 6.1): per arm, a location ``m`` and a standard
    deviation ``s`` uniform on [0, 1]; rewards ``N(m, s^2)`` truncated to [0, 1] by
    rejection.

    ``regret_means`` says which arm means the pseudo-regret ``mu* - mu_{b_t}`` uses:

    * ``"location"`` (default): the Gaussian's location ``m``, the convention that
      reproduces the Gaussian column of Table 1 of Maes et al. (e.g. UCB1-Normal, which
      alternates arms at T = 10, has regret ``5 E|m_1 - m_2| = 5/3``; the table reports
      1.65, while the truncated means would give 0.78);
    * ``"truncated"``: the truncated distribution's true mean
      (:func:`truncated_gaussian_mean`), the textbook definition of regret.
    """
    _check_arms(num_arms)
    if regret_means not in ("location", "truncated"):
        raise ValueError(f"regret_means must be 'location' or 'truncated', got {regret_means!r}")
    return _truncated_gaussian(num_arms, regret_means)


@functools.lru_cache(maxsize=None)
def _gaussian(num_arms, means, noise_sd, prior_mean, prior_sd):
    fixed = None if means is None else jnp.asarray(means, jnp.float32)

    def sample_problem(key):
        if fixed is not None:
            return MeansProblem(fixed)
        return MeansProblem(prior_mean + prior_sd * jax.random.normal(key, (num_arms,)))

    def sample_reward(problem, key, obs, arm):
        return problem.means[arm] + noise_sd * jax.random.normal(key)

    return Environment("gaussian", num_arms, 0, sample_problem, _obs_dummy, _means,
                       sample_reward, None)


def gaussian(num_arms: int = 2, means=None, noise_sd: float = 1.0, prior_mean: float = 0.0,
             prior_sd: float = 1.0) -> Environment:
    """Gaussian arms ``r ~ N(theta_k, noise_sd^2)``; ``theta_k`` fixed (``means``) or drawn
    i.i.d. ``N(prior_mean, prior_sd^2)`` per problem (Lu & Van Roy, Sec. 5.1 uses
    ``N(0, 1)`` means and unit noise)."""
    _check_arms(num_arms)
    if noise_sd <= 0 or prior_sd < 0:
        raise ValueError(f"noise_sd must be > 0 and prior_sd >= 0, got {noise_sd}, {prior_sd}")
    if means is not None:
        means = tuple(float(m) for m in means)
        if len(means) != num_arms:
            raise ValueError(f"means must have {num_arms} entries, got {len(means)}")
    return _gaussian(num_arms, means, float(noise_sd), float(prior_mean), float(prior_sd))


def mots_gaussian(num_arms: int = 50, epsilon: float = 0.2) -> Environment:
    """Sec. 7 of Karbasi et al. (after Jin et al. 2020): arm 0 has mean 1, the other
    ``num_arms - 1`` arms mean ``1 - epsilon``; unit-variance Gaussian rewards."""
    if not 0 < epsilon:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    return gaussian(num_arms, means=[1.0] + [1.0 - epsilon] * (num_arms - 1))


def _linear_mean(problem, obs):
    """``mu_k = a_k^T theta`` for every action (row) of ``obs``."""
    return obs @ problem.weights


@functools.lru_cache(maxsize=None)
def _linear_reward(noise_sd):
    """``r = a^T theta + W``, ``W ~ N(0, noise_sd^2)``."""
    def sample_reward(problem, key, obs, arm):
        return obs[arm] @ problem.weights + noise_sd * jax.random.normal(key)

    return sample_reward


def _uniform_actions(key, num_arms, dim):
    """Each coordinate uniform on [-1, 1] except the last, set to 1 (Lu & Van Roy 5.2)."""
    a = jax.random.uniform(key, (num_arms, dim), minval=-1.0, maxval=1.0)
    return a.at[:, -1].set(1.0)


@functools.lru_cache(maxsize=None)
def _linear_gaussian(num_arms, dim, prior_sd, noise_sd, identity):
    def sample_problem(key):
        k1, k2 = jax.random.split(key)
        if identity:
            actions = jnp.eye(num_arms, dtype=jnp.float32)
        else:
            actions = jax.random.normal(k1, (num_arms, dim)) / jnp.sqrt(dim)
        return FeatureProblem(actions, prior_sd * jax.random.normal(k2, (dim,)))

    def observe(problem, key, t):
        return problem.actions

    return Environment("linear_gaussian", num_arms, dim, sample_problem, observe,
                       _linear_mean, _linear_reward(noise_sd), None)


def linear_gaussian(num_arms: int = 10, dim: int = 5, prior_sd: float = 1.0,
                    noise_sd: float = 1.0, identity_actions: bool = False) -> Environment:
    """Example 1 of Lu & Van Roy: ``theta ~ N(0, prior_sd^2 I_d)``, a fixed set of K
    actions ``a_k ~ N(0, I_d / d)`` (or the identity, which is the independent Gaussian
    bandit), rewards ``theta^T a + W``, ``W ~ N(0, noise_sd^2)``."""
    _check_arms(num_arms)
    if identity_actions:
        dim = num_arms
    if dim < 1 or prior_sd <= 0 or noise_sd <= 0:
        raise ValueError("dim must be >= 1 and prior_sd, noise_sd > 0")
    return _linear_gaussian(num_arms, int(dim), float(prior_sd), float(noise_sd),
                            bool(identity_actions))


@functools.lru_cache(maxsize=None)
def _linear_contextual(num_arms, dim, noise_sd):
    def unit_ball(key, shape):
        k1, k2 = jax.random.split(key)
        x = jax.random.normal(k1, shape + (dim,))
        x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
        return x * jax.random.uniform(k2, shape + (1,)) ** (1.0 / dim)

    def sample_problem(key):
        mu = jax.random.normal(key, (dim,))
        return FeatureProblem(jnp.zeros((num_arms, dim)), mu / jnp.linalg.norm(mu))

    def observe(problem, key, t):
        return unit_ball(key, (num_arms,))

    return Environment("linear_contextual", num_arms, dim, sample_problem, observe,
                       _linear_mean, _linear_reward(noise_sd), None)


def linear_contextual(num_arms: int = 10, dim: int = 5, noise_sd: float = 0.1) -> Environment:
    """Linear contextual bandit of Karbasi et al. (Sec. 3, 6): every round each arm shows
    a context ``b_a(t)`` uniform in the unit ball; ``r = b^T mu + noise_sd * eta`` with
    ``mu`` uniform on the unit sphere."""
    _check_arms(num_arms)
    if dim < 1 or noise_sd <= 0:
        raise ValueError("dim must be >= 1 and noise_sd > 0")
    return _linear_contextual(num_arms, int(dim), float(noise_sd))


def relu_network(weights, actions, leaky: float = 0.0):
    """Mean reward of the ReLU bandits of Lu & Van Roy (Sec. 5.2): ``max(0, a^T theta)``
    for a single neuron (``weights`` a vector) and ``W2^T max(0, W1 a)`` for two layers
    (``weights = (W1 [D, d], W2 [D])``).  ``leaky`` gives the agents' leaky ReLU
    ``max(leaky x, x)``."""
    act = (lambda x: jnp.maximum(x, leaky * x)) if leaky else jax.nn.relu
    if isinstance(weights, (tuple, list)):
        w1, w2 = weights
        return act(actions @ w1.T) @ w2
    return act(actions @ weights)


@functools.lru_cache(maxsize=None)
def _neural(num_arms, dim, hidden, prior_var, noise_var):
    sd = float(prior_var) ** 0.5

    def sample_problem(key):
        ka, k1, k2 = jax.random.split(key, 3)
        actions = _uniform_actions(ka, num_arms, dim)
        if hidden == 0:
            return FeatureProblem(actions, sd * jax.random.normal(k1, (dim,)))
        return FeatureProblem(actions, (sd * jax.random.normal(k1, (hidden, dim)),
                                        sd * jax.random.normal(k2, (hidden,))))

    def observe(problem, key, t):
        return problem.actions

    def mean_rewards(problem, obs):
        return relu_network(problem.weights, obs)

    def sample_reward(problem, key, obs, arm):
        return relu_network(problem.weights, obs[arm]) + noise_var ** 0.5 * jax.random.normal(key)

    name = "neural_single" if hidden == 0 else "neural_two_layer"
    return Environment(name, num_arms, dim, sample_problem, observe, mean_rewards,
                       sample_reward, None)


def neural(num_arms: int = 100, dim: int = 100, hidden: int = 0, prior_var: float | None = None,
           noise_var: float = 100.0) -> Environment:
    """ReLU bandits of Lu & Van Roy (Sec. 5.2).  ``hidden=0``: single neuron
    ``max(0, theta^T a)``, ``theta ~ N(0, 10 I)``; ``hidden=D``: two-layer network
    ``W2^T max(0, W1 a)`` with ``N(0, 1)`` weights.  Actions uniform on ``[-1, 1]^d`` with
    last coordinate 1; noise variance 100.  Paper sizes: K = d = 100, D = 50."""
    _check_arms(num_arms)
    if prior_var is None:
        prior_var = 10.0 if hidden == 0 else 1.0
    if dim < 1 or hidden < 0 or prior_var <= 0 or noise_var <= 0:
        raise ValueError("need dim >= 1, hidden >= 0, prior_var > 0 and noise_var > 0")
    return _neural(num_arms, int(dim), int(hidden), float(prior_var), float(noise_var))


@functools.lru_cache(maxsize=None)
def _logistic(num_arms, dim, preference_sd):
    def sample_problem(key):
        k1, k2 = jax.random.split(key)
        x = jax.random.normal(k1, (num_arms, dim)) / jnp.sqrt(dim)
        # the first d arms are the standard basis, so a full-rank exploration set exists
        x = x.at[:dim].set(jnp.eye(dim))
        return FeatureProblem(x, preference_sd * jax.random.normal(k2, (dim,)))

    def observe(problem, key, t):
        return problem.actions

    def mean_rewards(problem, obs):
        return jax.nn.sigmoid(obs @ problem.weights)

    def sample_reward(problem, key, obs, arm):
        return (jax.random.uniform(key) < jax.nn.sigmoid(obs[arm] @ problem.weights)).astype(
            jnp.float32)

    return Environment("logistic_bernoulli", num_arms, dim, sample_problem, observe,
                       mean_rewards, sample_reward, (0.0, 1.0))


def logistic_bernoulli(num_arms: int = 20, dim: int = 3, preference_sd: float = 1.0) -> Environment:
    """Parametrised Bernoulli arms of the Two-Phase paper (Sec. I-B): arm a has known
    attributes ``x_a in R^d`` and success probability ``sigmoid(x_a^T z)`` with an
    unknown preference vector ``z ~ N(0, preference_sd^2 I)``.  The first ``d`` arms are
    the standard basis (a full-rank exploration set); the others ``N(0, I/d)``."""
    _check_arms(num_arms)
    if not 1 <= dim <= num_arms:
        raise ValueError(f"dim must lie in [1, num_arms], got {dim}")
    return _logistic(num_arms, int(dim), float(preference_sd))


ENVIRONMENTS = {
    "bernoulli": bernoulli,
    "truncated_gaussian": truncated_gaussian,
    "gaussian": gaussian,
    "mots_gaussian": mots_gaussian,
    "linear_gaussian": linear_gaussian,
    "linear_contextual": linear_contextual,
    "neural": neural,
    "logistic_bernoulli": logistic_bernoulli,
}


def make_environment(name: str, **kwargs) -> Environment:
    """Build a registered environment by name (``ENVIRONMENTS``)."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"unknown environment/distribution {name!r}; "
                         f"choose from {sorted(ENVIRONMENTS)}")
    return ENVIRONMENTS[name](**kwargs)
