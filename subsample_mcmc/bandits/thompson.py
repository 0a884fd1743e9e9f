r"""Thompson sampling with a pluggable posterior approximation, MOTS, and batching.

Thompson sampling (TS) plays ``argmax_a theta_a`` with ``theta ~ p(theta | H_{t-1})``.
Here a *posterior approximation* is a triple over a NamedTuple state::

    state  = posterior.init(params, key, spec)
    sample = posterior.sample(params, state, key, obs)     # [K] sampled mean rewards
    state  = posterior.update(params, state, key, arm, reward, obs)

and :func:`thompson_sampling` turns any of them into a :class:`Policy`.  Implemented:

* conjugate: :func:`beta_posterior` (Beta(1,1) prior, Bernoulli likelihood; rewards in
  [0, 1] enter through a coin with bias r, Remark 4.4 of Karbasi et al.),
  :func:`gaussian_posterior` (``N(mu0, s0^2)`` prior, ``N(theta, s^2)`` likelihood;
  ``mu0 = 0, s0 = s = 1`` is the ``N(mu_hat, 1/(k+1))`` of Agrawal & Goyal used by
  Karbasi et al. Sec. 4), :func:`linear_posterior` (``N(B^{-1} f, v^2 B^{-1})``,
  ``B = lambda I + sum b b^T``; TS-C of Agrawal & Goyal 2013 / Alg. 2 of Karbasi et al.);
* MOTS and MOTS-J (Jin et al. 2021, Sec. 5 of Karbasi et al.): :func:`mots_posterior`;
* ensembles (:mod:`.ensemble`), a Laplace approximation (:mod:`.laplace`), and draws
  from this package's RacingMH kernel for the logistic bandit
  (:func:`~.racing_ts.racing_logistic_posterior`: a few racing MH transitions per round,
  warm-started at the previous draw, on a static history buffer).

Any other posterior only needs to provide ``init/sample/update`` with these signatures.

Batching (Karbasi, Mirrokni & Shadravan 2021) is a wrapper over *any* policy
(:func:`dynamic_batch`, Alg. 1-3; :func:`static_batch`, the Static-TS baselines of
Sec. 7): the wrapped policy selects from an *observed* state that only changes when a
batch is queried, while a *pending* state absorbs every reward at once.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from .base import Policy, argmax_random_ties

__all__ = [
    "Posterior", "thompson_sampling", "beta_posterior", "gaussian_posterior",
    "linear_posterior", "mots_posterior", "ts_beta", "ts_gaussian", "mots", "mots_j",
    "ts_linear", "ts_contextual", "dynamic_batch", "static_batch", "BatchState",
    "StaticBatchState",
]


@dataclasses.dataclass(frozen=True, eq=False)
class Posterior:
    """A posterior approximation: ``init(params, key, spec)``, ``sample(params, state,
    key, obs) -> [K]`` sampled mean rewards, ``update(params, state, key, arm, reward,
    obs)``.  ``initial_round``: play every arm once before sampling (MOTS)."""

    name: str
    init: Callable
    sample: Callable
    update: Callable
    default_params: Any = ()
    param_names: tuple = ()
    initial_round: bool = False


@functools.lru_cache(maxsize=None)
def _ts_functions(posterior: Posterior):
    def init(params, key, spec):
        return posterior.init(params, key, spec)

    def select(params, state, key, t, obs):
        k1, k2 = jax.random.split(key)
        theta = posterior.sample(params, state, k1, obs)
        arm = argmax_random_ties(k2, theta)
        if posterior.initial_round:
            counts = state.counts
            arm = jnp.where(jnp.any(counts == 0), jnp.argmax(counts == 0), arm)
        return arm.astype(jnp.int32)

    def update(params, state, key, t, arm, reward, obs):
        return posterior.update(params, state, key, arm, reward, obs)

    return init, select, update


def thompson_sampling(posterior: Posterior, name: str | None = None, params=None) -> Policy:
    """Thompson sampling over ``posterior``: ``a_t = argmax_a theta_a``, ``theta ~``
    ``posterior.sample`` (Sec. 4 of Karbasi et al.; Alg. 1 of Lu & Van Roy with an
    ensemble posterior)."""
    init, select, update = _ts_functions(posterior)
    return Policy(name or f"ts_{posterior.name}", init, select, update,
                  posterior.default_params if params is None else tuple(params),
                  posterior.param_names)


# --------------------------------------------------------------------------- conjugate

class CountState(NamedTuple):
    counts: jax.Array   # [K] k_a
    sums: jax.Array     # [K] sum of rewards (Beta: successes)
    horizon: jax.Array  # T (MOTS's confidence range needs it)


def _count_init(params, key, spec):
    z = jnp.zeros((spec.num_arms,), jnp.float32)
    return CountState(z, z, jnp.float32(spec.horizon))


def _beta_sample(params, state, key, obs):
    successes = state.sums
    failures = state.counts - state.sums
    return jax.random.beta(key, successes + 1.0, failures + 1.0)


def _beta_update(params, state, key, arm, reward, obs):
    coin = (jax.random.uniform(key) < reward).astype(jnp.float32)
    return state._replace(counts=state.counts.at[arm].add(1.0), sums=state.sums.at[arm].add(coin))


def _gauss_sample(params, state, key, obs):
    prior_mean, prior_sd, noise_sd = params
    precision = 1.0 / prior_sd ** 2 + state.counts / noise_sd ** 2
    mean = (prior_mean / prior_sd ** 2 + state.sums / noise_sd ** 2) / precision
    return mean + jax.random.normal(key, mean.shape) / jnp.sqrt(precision)


def _sum_update(params, state, key, arm, reward, obs):
    return state._replace(counts=state.counts.at[arm].add(1.0), sums=state.sums.at[arm].add(reward))


_BETA = Posterior("beta", _count_init, _beta_sample, _beta_update)
_GAUSS = Posterior("gaussian", _count_init, _gauss_sample, _sum_update, (0.0, 1.0, 1.0),
                   ("prior_mean", "prior_sd", "noise_sd"))


def beta_posterior() -> Posterior:
    """Beta(S_a + 1, F_a + 1) posterior of a Bernoulli arm (uniform prior); a reward
    ``r in [0, 1]`` is first turned into a coin with bias ``r`` (Remark 4.4, Karbasi et
    al.), which is exact for binary rewards."""
    return _BETA


def gaussian_posterior() -> Posterior:
    """Conjugate Gaussian posterior of each arm's mean: prior ``N(mu0, s0^2)``, likelihood
    ``N(theta_a, s^2)``: precision ``1/s0^2 + k_a/s^2``, mean ``(mu0/s0^2 + S_a/s^2) /
    precision``.  Params ``(mu0, s0, s) = (0, 1, 1)`` give Agrawal & Goyal's
    ``N(S_a/(k_a+1), 1/(k_a+1))`` (Sec. 4 of Karbasi et al.)."""
    return _GAUSS


def ts_beta() -> Policy:
    """TS with Beta priors (Karbasi et al. Sec. 4, Agrawal & Goyal 2012)."""
    return thompson_sampling(_BETA, "ts_beta")


def ts_gaussian(prior_mean=0.0, prior_sd=1.0, noise_sd=1.0) -> Policy:
    """TS with Gaussian priors (:func:`gaussian_posterior`)."""
    if prior_sd <= 0 or noise_sd <= 0:
        raise ValueError(f"prior_sd and noise_sd must be > 0, got {prior_sd}, {noise_sd}")
    return thompson_sampling(_GAUSS, "ts_gaussian", (prior_mean, prior_sd, noise_sd))


# --------------------------------------------------------------------------- MOTS

def _mots_sample(jin: bool):
    def sample(params, state, key, obs):
        rho, alpha = params
        k = jnp.maximum(state.counts, 1.0)
        num_arms = state.counts.shape[0]
        mean = state.sums / k
        log_plus = jnp.maximum(jnp.log(state.horizon / (num_arms * k)), 0.0)
        tau = mean + jnp.sqrt(alpha / k * log_plus)          # confidence range, Sec. 5
        if jin:
            # J(mu, 1/k): density |x - mu| k/2 exp(-k (x - mu)^2 / 2), a two-sided Rayleigh
            k1, k2 = jax.random.split(key)
            u = jax.random.uniform(k1, mean.shape, minval=1e-12, maxval=1.0)
            sign = jnp.where(jax.random.bernoulli(k2, 0.5, mean.shape), 1.0, -1.0)
            theta = mean + sign * jnp.sqrt(-2.0 * jnp.log(u) / k)
        else:
            theta = mean + jax.random.normal(key, mean.shape) / jnp.sqrt(rho * k)
        return jnp.minimum(theta, tau)                        # Eq. 4

    return sample


_MOTS = Posterior("mots", _count_init, _mots_sample(False), _sum_update, (0.9999, 2.0),
                  ("rho", "alpha"), initial_round=True)
_MOTS_J = Posterior("mots_j", _count_init, _mots_sample(True), _sum_update, (0.9999, 2.0),
                    ("rho", "alpha"), initial_round=True)


def mots_posterior(jin: bool = False) -> Posterior:
    r"""Minimax-optimal TS (Jin et al. 2021; Sec. 5 of Karbasi et al., Eq. 3-4): after one
    play of each arm, ``theta_a ~ N(mu_hat_a, 1/(rho k_a))`` (MOTS) or ``J(mu_hat_a,
    1/k_a)`` (MOTS-J, density ``|x-mu| / (2 s^2) exp(-(x-mu)^2 / (2 s^2))``), clipped at
    ``tau_a = mu_hat_a + sqrt(alpha / k_a log+(T / (N k_a)))``.  ``rho = 0.9999``,
    ``alpha = 2`` as in Sec. 7."""
    return _MOTS_J if jin else _MOTS


def mots(rho: float = 0.9999, alpha: float = 2.0) -> Policy:
    """MOTS (:func:`mots_posterior`); ``rho in (1/2, 1)``, ``alpha > 0``."""
    if not 0.5 < rho <= 1.0 or alpha <= 0:
        raise ValueError(f"need rho in (1/2, 1] and alpha > 0, got rho={rho}, alpha={alpha}")
    return thompson_sampling(_MOTS, "mots", (rho, alpha))


def mots_j(alpha: float = 2.0) -> Policy:
    """MOTS-J (:func:`mots_posterior` with ``jin=True``)."""
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    return thompson_sampling(_MOTS_J, "mots_j", (1.0, alpha))


# --------------------------------------------------------------------------- linear

class LinearState(NamedTuple):
    precision: jax.Array  # [d, d]  B = lambda I + sum b b^T
    moment: jax.Array     # [d]     f = sum b r
    horizon: jax.Array


def _linear_init(params, key, spec):
    lam = params[0]
    d = spec.context_dim
    return LinearState(lam * jnp.eye(d, dtype=jnp.float32), jnp.zeros((d,), jnp.float32),
                       jnp.float32(spec.horizon))


def _linear_scale(kind):
    def scale(params, state):
        if kind == "exact":
            return params[1]
        sigma, delta = params[1], params[2]
        d = state.moment.shape[0]
        return sigma * jnp.sqrt(9.0 * d * jnp.log(state.horizon / delta))
    return scale


def _linear_sample(kind):
    scale_fn = _linear_scale(kind)

    def sample(params, state, key, obs):
        chol = jnp.linalg.cholesky(state.precision)                       # B = L L^T
        mean = jax.scipy.linalg.cho_solve((chol, True), state.moment)
        z = jax.random.normal(key, mean.shape)
        theta = mean + scale_fn(params, state) * jax.scipy.linalg.solve_triangular(
            chol.T, z, lower=False)                                       # cov v^2 B^-1
        return obs @ theta

    return sample


def _linear_update(params, state, key, arm, reward, obs):
    b = obs[arm]
    return state._replace(precision=state.precision + jnp.outer(b, b),
                          moment=state.moment + b * reward)


_LINEAR = Posterior("linear", _linear_init, _linear_sample("exact"), _linear_update,
                    (1.0, 1.0), ("lambda", "noise_sd"))
_LINEAR_C = Posterior("contextual", _linear_init, _linear_sample("ts_c"), _linear_update,
                      (1.0, 0.01, 0.5), ("lambda", "sigma", "delta"))


def linear_posterior(kind: str = "exact") -> Posterior:
    r"""Gaussian posterior of a linear reward model ``r = b^T mu + noise``:
    ``mu ~ N(B^{-1} f, v^2 B^{-1})``, ``B = lambda I + sum_s b_s b_s^T``, ``f = sum_s b_s
    r_s``.  ``kind="exact"``: params ``(lambda, v) = (noise_sd^2 / prior_sd^2, noise_sd)``
    is the exact posterior under ``mu ~ N(0, prior_sd^2 I)`` (Lu & Van Roy, Example 1).
    ``kind="ts_c"``: params ``(lambda, sigma, delta)``, ``v = sigma sqrt(9 d ln(T /
    delta))`` (Sec. 6 of Karbasi et al., after Agrawal & Goyal 2013)."""
    if kind not in ("exact", "ts_c"):
        raise ValueError(f"kind must be 'exact' or 'ts_c', got {kind!r}")
    return _LINEAR if kind == "exact" else _LINEAR_C


def ts_linear(prior_sd: float = 1.0, noise_sd: float = 1.0) -> Policy:
    """Exact TS for the linear-Gaussian bandit (Lu & Van Roy, Example 1)."""
    if prior_sd <= 0 or noise_sd <= 0:
        raise ValueError("prior_sd and noise_sd must be > 0")
    return thompson_sampling(_LINEAR, "ts_linear", ((noise_sd / prior_sd) ** 2, noise_sd))


def ts_contextual(sigma: float = 0.01, delta: float = 0.5) -> Policy:
    """TS-C for linear contextual bandits (Agrawal & Goyal 2013; Alg. 2 of Karbasi et al.
    without batching), ``v = sigma sqrt(9 d ln(T/delta))``."""
    if sigma <= 0 or not 0 < delta < 1:
        raise ValueError(f"need sigma > 0 and delta in (0, 1), got {sigma}, {delta}")
    return thompson_sampling(_LINEAR_C, "ts_contextual", (1.0, sigma, delta))


# --------------------------------------------------------------------------- batching

class BatchState(NamedTuple):
    observed: Any           # inner state the policy selects from (last queried batch)
    pending: Any            # inner state with every reward so far
    picks: jax.Array        # [K] k_a, selections of each arm
    level: jax.Array        # [K] l_a
    num_batches: jax.Array  # batch queries so far


class StaticBatchState(NamedTuple):
    observed: Any
    pending: Any
    num_batches: jax.Array


@functools.lru_cache(maxsize=None)
def _dynamic_functions(policy_functions):
    policy = Policy("inner", *policy_functions)
    def init(params, key, spec):
        s = policy.init(params, key, spec)
        z = jnp.zeros((spec.num_arms,), jnp.int32)
        return BatchState(s, s, z, z, jnp.int32(0))

    def select(params, state, key, t, obs):
        return policy.select(params, state.observed, key, t, obs)

    def update(params, state, key, t, arm, reward, obs):
        pending = policy.update(params, state.pending, key, t, arm, reward, obs)
        picks = state.picks.at[arm].add(1)
        query = picks[arm] >= 2 ** state.level[arm]          # Alg. 1, lines 5-13
        observed = jax.tree_util.tree_map(lambda p, o: jnp.where(query, p, o), pending,
                                          state.observed)
        return BatchState(observed, pending, picks,
                          state.level.at[arm].add(query.astype(jnp.int32)),
                          state.num_batches + query.astype(jnp.int32))

    return init, select, update


def dynamic_batch(policy: Policy) -> Policy:
    r"""Dynamic doubling batches of Karbasi et al. (Alg. 1 B-TS, Alg. 2 B-TS-C, Alg. 3
    B-MOTS): ``k_a += 1`` when a is selected; while ``k_a < 2^{l_a}`` the action joins
    the batch, otherwise ``l_a += 1`` and the batch (this action included) is queried,
    after which the posterior the policy samples from absorbs all its rewards.  A query
    happens whenever some ``k_a`` reaches a power of two, so there are at most
    ``K (floor(log2 T) + 1)`` batches (Theorem 4.1: O(N log T)).  Wraps *any* policy."""
    init, select, update = _dynamic_functions(policy.functions)
    return Policy(f"b_{policy.name}", init, select, update, policy.default_params,
                  policy.param_names)


@functools.lru_cache(maxsize=None)
def _static_functions(policy_functions):
    policy = Policy("inner", *policy_functions)
    def init(params, key, spec):
        s = policy.init(params[1:], key, spec)
        return StaticBatchState(s, s, jnp.int32(0))

    def select(params, state, key, t, obs):
        return policy.select(params[1:], state.observed, key, t, obs)

    def update(params, state, key, t, arm, reward, obs):
        pending = policy.update(params[1:], state.pending, key, t, arm, reward, obs)
        size = jnp.maximum(jnp.round(params[0]), 1.0)
        query = (jnp.mod(jnp.asarray(t, jnp.float32), size) == 0)
        observed = jax.tree_util.tree_map(lambda p, o: jnp.where(query, p, o), pending,
                                          state.observed)
        return StaticBatchState(observed, pending, state.num_batches + query.astype(jnp.int32))

    return init, select, update


def static_batch(policy: Policy, batch_size: int) -> Policy:
    """Static batches of equal size (the Static-TS / Static-MOTS baselines of Sec. 7 of
    Karbasi et al.): the observed state is refreshed after rounds ``B, 2B, ...``.  The
    batch size is the first entry of ``params`` (traced), then the inner policy's."""
    if not isinstance(batch_size, (int,)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    init, select, update = _static_functions(policy.functions)
    return Policy(f"static_{policy.name}", init, select, update,
                  (float(batch_size),) + tuple(policy.default_params),
                  ("batch_size",) + tuple(policy.param_names))
