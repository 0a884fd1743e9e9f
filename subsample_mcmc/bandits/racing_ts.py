r"""Thompson sampling for the logistic bandit with posterior draws from RacingMH.

Model (parametrised Bernoulli arms with logistic link, paper 004 Sec. I-B): arm ``a``
has known attributes ``x_a in R^d`` and pays 1 with probability ``sigmoid(x_a^T z)``;
prior ``z ~ N(0, s0^2 I)``.  After ``n`` rounds with history ``(x_i, y_i)_{i<n}`` the
posterior is

.. math::  \pi_n(z) \propto \exp\Big(-\frac{|z|^2}{2 s_0^2} + \sum_{i<n} l_i(z)\Big),
           \qquad l_i(z) = y_i\, x_i^T z - \log(1 + e^{x_i^T z})

(:func:`~.laplace.logistic_log_likelihood`).  Thompson sampling plays
``argmax_a x_a^T z`` with ``z ~ pi_n`` (Sec. 4 of Karbasi et al.; the logits have the
same argmax as the success probabilities).  This posterior draws ``z`` from a Markov
chain instead of exactly: after each reward, ``steps`` racing MH transitions
(:func:`subsample_mcmc.kernels.mh.build_kernel`, the two-arm race of Eq. 12 of Chen &
Ghahramani), warm-started at the previous draw, target ``pi_n``.  The race decides each
accept/reject from a fraction of the history, so the likelihood evaluations per
decision grow sublinearly in ``n`` (exact MH reads ``n`` per step with the current
sum cached, ``2 n`` without).

Static shapes (jit/vmap): the history is a ``[T, d]`` buffer with a count ``n``.  The
race population must be static, so the buffer is raced in *levels*: population sizes
``P_j = min(2^j, T)`` with ``P_0 >= 64``; at count ``n`` the chain runs on the prefix
of the smallest ``P_j >= n`` (a ``lax.switch`` branch), the per-datum log-likelihood
being masked to 0 on the ``P_j - n < P_j / 2`` empty slots, so the race's target
``(1/P_j) sum_{i<P_j} l_i`` is exactly ``(1/P_j) sum_{i<n} l_i``.  Under ``vmap`` over
problems the branches are evaluated together (a select), which costs wall time but not
the counts reported, which are those of the branch taken.

Control variate and preconditioner: a second-order Taylor proxy (Bardenet et al.
2017; :mod:`subsample_mcmc.kernels.proxy`) ``h_i(z) = l_i(\hat z) + g_i^T D +
\tfrac12 D^T H_i D``, ``D = z - \hat z``, whose sums ``G = sum g_i`` and ``H = sum
H_i`` are updated in O(d^2) per round (autodiff of ``l_i`` through
:func:`~subsample_mcmc.kernels.proxy.taylor_proxy`); the reference ``\hat z`` is moved
to the current draw (and ``G, H`` recomputed, ``n`` evaluations) whenever ``n``
reaches a power of two, i.e. O(1) evaluations per round amortised.  With
``proxy=True`` the race reads the residuals ``l_i - h_i``.  The proposal is
preconditioned by the Laplace-type covariance at the reference
(:func:`~subsample_mcmc.kernels.laplace.laplace_approximation` with the Hessian
``nabla^2 log p(\hat z) + H = -I / s_0^2 + H``)

.. math::  \Sigma = (I / s_0^2 - H)^{-1}:

``inverse_mass_matrix = diag(Sigma)`` and ``step_size = step_scale`` (random walk:
``x' = x + eps Sigma_diag^{1/2} xi``, :func:`~subsample_mcmc.kernels.proposals.random_walk`).

State counters ``mh_evals`` (what the MH steps computed, both arms, padding included:
an upper bound on the data read), ``proxy_evals`` and ``accepted`` let a benchmark
report the cost per round against ``n``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..kernels import mh
from ..kernels.laplace import laplace_approximation
from ..kernels.proxy import TaylorProxy, taylor_proxy
from ..racing.race import _run_at_most_once
from ..racing import METHODS
from .laplace import log_prior, logistic_log_likelihood
from .thompson import Posterior, thompson_sampling

__all__ = ["RacingLogisticState", "racing_logistic_posterior", "ts_racing",
           "population_levels", "logistic_log_likelihood", "add_observation",
           "mh_transitions", "episode_costs"]

_MIN_LEVEL = 64
#: the methods of :data:`subsample_mcmc.racing.METHODS` this posterior accepts: not
#: ``"ebs"`` / ``"lil_ucb"``, which need the range of the rewards (unknown for
#: log-likelihood differences)
_SUPPORTED_METHODS = tuple(m for m in METHODS if m in ("normal", "normal_union", "exact"))
_TRANSITIONS = {}


class RacingLogisticState(NamedTuple):
    features: jax.Array     # [T, d] x_i of the arms played
    rewards: jax.Array      # [T] y_i in {0, 1}
    count: jax.Array        # n, filled slots
    z: jax.Array            # [d] current chain state: the next Thompson draw
    reference: jax.Array    # [d] Taylor proxy centre z_hat
    grad_sum: jax.Array     # [d] G = sum_i grad l_i(z_hat)
    hess_sum: jax.Array     # [d, d] H = sum_i hess l_i(z_hat)
    refresh_at: jax.Array   # next n at which z_hat moves (powers of two)
    mh_evals: jax.Array     # cumulative MH likelihood evaluations (both arms, padded)
    proxy_evals: jax.Array  # cumulative per-datum evaluations spent on G, H
    accepted: jax.Array     # cumulative accepted MH moves
    steps_done: jax.Array   # cumulative MH transitions


def population_levels(horizon: int, min_level: int = _MIN_LEVEL) -> tuple:
    """Static race populations ``P_j = min(2^j, T)``, ``P_0 = min(2^ceil(log2 m), T)``
    with ``m = min_level``; the chain at count ``n`` races over the smallest
    ``P_j >= n`` (at most half of it empty).

    Args:
        horizon: ``T``, the buffer length (>= 2).
        min_level: ``m`` (>= 2).

    Returns:
        The increasing tuple of the ``P_j``, the last one ``T``.

    Raises:
        ValueError: ``horizon < 2`` or ``min_level < 2``.
    """
    horizon = int(horizon)
    if horizon < 2:
        raise ValueError(f"horizon must be >= 2 for a racing posterior, got {horizon}")
    if int(min_level) < 2:
        raise ValueError(f"min_level must be >= 2, got {min_level}")
    levels, p = [], 1 << int(np.ceil(np.log2(min_level)))
    while p < horizon:
        levels.append(p)
        p *= 2
    levels.append(horizon)
    return tuple(levels)


def _sums(features, rewards, count, reference):
    """``(G, H)`` of the history buffer at ``reference`` (autodiff of the masked
    :func:`~.laplace.logistic_log_likelihood`, :func:`~subsample_mcmc.kernels.proxy.taylor_proxy`:
    one pass over the ``T`` slots)."""
    proxy = taylor_proxy(logistic_log_likelihood(features, rewards, count), reference, rewards.shape[0])
    return proxy.grad_sum, proxy.hess_sum


def _inverse_mass(prior_sd, state):
    r"""``diag(Sigma)``, ``Sigma = (I / s_0^2 - H)^{-1}``: the covariance of the Laplace
    approximation (:func:`~subsample_mcmc.kernels.laplace.laplace_approximation`) whose
    Hessian at the reference is that of the log prior plus the proxy's ``H``."""
    hessian = jax.hessian(log_prior(prior_sd))(state.reference) + state.hess_sum
    scale_tril = laplace_approximation(state.reference, hessian).scale_tril
    return jnp.sum(scale_tril * scale_tril, axis=1)


@functools.lru_cache(maxsize=None)
def _transition_fn(levels, steps, proposal, use_proxy, method, delta, grad_batch_size):
    """``(params, state, key) -> state``: ``steps`` racing MH moves on the current
    history, in the ``lax.switch`` branch of the smallest level >= n."""
    race = {} if method == "exact" else {"delta": delta}

    def branch(population):
        kernel = mh.build_kernel(proposal, method=method, grad_batch_size=min(grad_batch_size, population),
                                 **race)

        def run(params, state, key):
            prior_sd, step_scale = params[0], params[1]
            feats, ys = state.features[:population], state.rewards[:population]
            log_lik = logistic_log_likelihood(feats, ys, state.count)
            proxy = TaylorProxy(state.reference, state.grad_sum, state.hess_sum) \
                if use_proxy else None
            minv = _inverse_mass(prior_sd, state)
            log_p = log_prior(prior_sd)

            def one(carry, k):
                mh_state, evals, acc = carry
                mh_state, info = kernel(k, mh_state, log_p, log_lik, population, step_scale,
                                        inverse_mass_matrix=minv, proxy=proxy)
                return (mh_state, evals + info.num_likelihood_evals.astype(jnp.float32),
                        acc + info.accepted.astype(jnp.float32)), None

            (mh_state, evals, acc), _ = jax.lax.scan(
                one, (mh.init(state.z), jnp.float32(0), jnp.float32(0)), jax.random.split(key, steps))
            return mh_state.position, evals, acc

        return run

    branches = [branch(p) for p in levels]
    level_array = np.asarray(levels)

    def transition(params, state, key):
        j = jnp.clip(jnp.sum(jnp.asarray(level_array) < state.count), 0, len(levels) - 1)
        z, evals, acc = jax.lax.switch(j, branches, params, state, key)
        return state._replace(z=z, mh_evals=state.mh_evals + evals,
                              accepted=state.accepted + acc,
                              steps_done=state.steps_done + steps)

    return transition


def add_observation(state: RacingLogisticState, x, y) -> RacingLogisticState:
    r"""Append ``(x, y)`` to the history (slot ``n``) and update the proxy sums,
    ``G += g_n(\hat z)``, ``H += H_n(\hat z)`` (one evaluation, autodiff of
    :func:`~.laplace.logistic_log_likelihood` through
    :func:`~subsample_mcmc.kernels.proxy.taylor_proxy`); when the new ``n`` reaches
    ``refresh_at`` (1, 2, 4, ...), move ``\hat z`` to the current draw and recompute
    ``G, H`` over the history (``n`` evaluations, O(1) per round amortised).  The first
    half of a round's ``update``; no MH move.

    Args:
        state: the posterior state.
        x: ``[d]`` attributes of the arm played.
        y: its reward, 0 or 1.

    Returns:
        The state with ``n + 1`` data.
    """
    i = state.count
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    g, h = _sums(x[None], y[None], 1, state.reference)
    state = state._replace(features=state.features.at[i].set(x),
                           rewards=state.rewards.at[i].set(y), count=i + 1,
                           grad_sum=state.grad_sum + g, hess_sum=state.hess_sum + h,
                           proxy_evals=state.proxy_evals + 1.0)
    refresh = state.count >= state.refresh_at
    # the full pass runs only in refresh rounds (a real branch, also under vmap): the
    # other rounds cost one evaluation, as counted in proxy_evals
    g_new, h_new = _run_at_most_once(
        refresh, lambda _: _sums(state.features, state.rewards, state.count, state.z),
        (state.grad_sum, state.hess_sum))
    return state._replace(
        reference=jnp.where(refresh, state.z, state.reference),
        grad_sum=g_new,
        hess_sum=h_new,
        refresh_at=jnp.where(refresh, 2 * state.refresh_at, state.refresh_at),
        proxy_evals=state.proxy_evals + jnp.where(refresh, state.count, 0).astype(jnp.float32))


def mh_transitions(posterior: Posterior, params, state: RacingLogisticState, key):
    """Run one round's ``steps`` racing MH transitions on ``state``'s history (no new
    datum): the chain of :func:`racing_logistic_posterior` as a stand-alone sampler,
    e.g. to check its draws against a reference posterior on a fixed history.

    Args:
        posterior: a posterior made by :func:`racing_logistic_posterior`.
        params: ``(prior_sd, step_scale)``.
        state: the posterior state (history, chain position, proxy).
        key: PRNG key of the round.

    Returns:
        The state after the ``steps`` transitions (counters updated).

    Raises:
        ValueError: ``posterior`` was not made by :func:`racing_logistic_posterior`.
    """
    if posterior not in _TRANSITIONS:
        raise ValueError("posterior must come from racing_logistic_posterior")
    return _TRANSITIONS[posterior](params, state, key)


@functools.lru_cache(maxsize=None)
def _racing_posterior(steps, proposal, use_proxy, method, delta, grad_batch_size, min_level):
    cache = {}

    def transition(params, state, key):
        levels = population_levels(state.rewards.shape[0], min_level)
        if levels not in cache:
            cache[levels] = _transition_fn(levels, steps, proposal, use_proxy, method, delta,
                                           grad_batch_size)
        return cache[levels](params, state, key)

    def init(params, key, spec):
        t, d = spec.horizon, spec.context_dim
        if d < 1:
            raise ValueError("the racing logistic posterior needs arm features "
                             "(context_dim >= 1), e.g. environments.logistic_bernoulli")
        population_levels(t, min_level)
        prior_sd = params[0]
        z0 = prior_sd * jax.random.normal(key, (d,))          # a prior draw: round 1 is TS
        zero = jnp.float32(0.0)
        return RacingLogisticState(
            jnp.zeros((t, d), jnp.float32), jnp.zeros((t,), jnp.float32), jnp.int32(0), z0,
            jnp.zeros((d,), jnp.float32), jnp.zeros((d,), jnp.float32),
            jnp.zeros((d, d), jnp.float32), jnp.int32(1), zero, zero, zero, zero)

    def sample(params, state, key, obs):
        return obs @ state.z

    def update(params, state, key, arm, reward, obs):
        return transition(params, add_observation(state, obs[arm], reward), key)

    name = f"racing_{proposal}_{method}{'_proxy' if use_proxy else ''}_{steps}"
    post = Posterior(name, init, sample, update, (1.0, 1.2), ("prior_sd", "step_scale"))
    _TRANSITIONS[post] = transition
    return post


def racing_logistic_posterior(steps: int = 3, proposal: str = "random_walk",
                              proxy: bool = True, method: str = "normal",
                              delta: float = 0.05, grad_batch_size: int = 32,
                              min_level: int = _MIN_LEVEL) -> Posterior:
    r"""Posterior draws of the logistic bandit's ``z`` from a warm-started racing MH chain.

    Params ``(prior_sd, step_scale)`` (traced; defaults ``(1, 1.2)``).

    Args:
        steps: MH transitions per round (each after appending the round's reward).
        proposal: ``"random_walk"`` or ``"langevin"``
            (of :data:`~subsample_mcmc.kernels.proposals.PROPOSALS`; Langevin reads the
            mini-batch gradient of ``grad_batch_size`` data, with the proxy's exact
            gradient as control variate when ``proxy``), preconditioned by
            ``diag((I/s0^2 - H)^{-1})``.
        proxy: race the residuals ``l_i - h_i`` of the Taylor proxy (recommended: the
            residuals are ``O(|D|^3)``, so a race stops at its first mini-batch).
        method: the race's bound, ``"normal"`` or ``"normal_union"``, or ``"exact"``
            (exact MH on every datum, the reference chain: ``P_j`` evaluations per
            step, plus ``P_j`` at the round's first step, whose current sum is not
            known); the names of :data:`subsample_mcmc.racing.METHODS` (``"ebs"`` and
            ``"lil_ucb"`` need the rewards' range, unknown here).
        delta: the race's error level per MH decision, in (0, 0.5).
        grad_batch_size: Langevin mini-batch size.
        min_level: the smallest race population ``P_0`` (:func:`population_levels`);
            fewer levels compile faster and, under ``vmap``, evaluate fewer branches,
            at the price of more padding while ``n < P_0``.

    Returns:
        A :class:`~.thompson.Posterior` (cached: equal arguments give the same object,
        so its compiled programs are shared).

    Raises:
        ValueError: naming the argument out of range.
    """
    if isinstance(steps, bool) or int(steps) != steps or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if proposal not in ("random_walk", "langevin"):
        raise ValueError(f"proposal must be 'random_walk' or 'langevin', got {proposal!r}")
    if method not in _SUPPORTED_METHODS:
        raise ValueError(f"method must be one of {_SUPPORTED_METHODS} (of subsample_mcmc.racing.METHODS; "
                         f"'ebs' and 'lil_ucb' need a reward range), got {method!r}")
    if not 0.0 < float(delta) < 0.5:
        raise ValueError(f"delta must lie in (0, 0.5), got {delta}")
    if int(grad_batch_size) < 1:
        raise ValueError(f"grad_batch_size must be >= 1, got {grad_batch_size}")
    if isinstance(min_level, bool) or int(min_level) != min_level or min_level < 2:
        raise ValueError(f"min_level must be an integer >= 2, got {min_level!r}")
    return _racing_posterior(int(steps), proposal, bool(proxy), method, float(delta),
                             int(grad_batch_size), int(min_level))


def ts_racing(prior_sd: float = 1.0, step_scale: float = 1.2, steps: int = 3,
              proposal: str = "random_walk", proxy: bool = True, method: str = "normal",
              delta: float = 0.05, min_level: int = _MIN_LEVEL):
    """Thompson sampling for the logistic bandit with RacingMH posterior draws.

    Args:
        prior_sd: ``s_0`` (default parameter of the policy).
        step_scale: the random walk's or Langevin move's ``eps`` (default parameter).
        steps, proposal, proxy, method, delta, min_level: as in
            :func:`racing_logistic_posterior`; ``method="exact"`` gives the exact-MH
            chain.

    Returns:
        A :class:`~.base.Policy` (:func:`~.thompson.thompson_sampling`).

    Raises:
        ValueError: naming the argument out of range.
    """
    if not prior_sd > 0:
        raise ValueError(f"prior_sd must be > 0, got {prior_sd}")
    if not step_scale > 0:
        raise ValueError(f"step_scale must be > 0, got {step_scale}")
    post = racing_logistic_posterior(steps, proposal, proxy, method, delta,
                                     min_level=min_level)
    return thompson_sampling(post, f"ts_{post.name}", (float(prior_sd), float(step_scale)))


def episode_costs(policy, env, horizon: int, key, params=None):
    r"""Run one episode of a :func:`ts_racing` policy (the same keys as
    :func:`~.simulate.run_episode`); ``vmap`` it over keys for many problems.

    Args:
        policy: a :func:`ts_racing` policy.
        env: a logistic bandit environment (:func:`~.environments.logistic_bernoulli`).
        horizon: ``T``.
        key: the episode's PRNG key.
        params: the policy's parameters (default: its defaults).

    Returns:
        Per-round arrays ``[T]``: ``regret`` (``mu* - mu_{a_t}``), ``mh_evals``
        (likelihood evaluations of the round's MH steps, ``MHInfo.num_likelihood_evals``:
        both arms, padding included), ``proxy_evals`` (evaluations spent on the proxy
        sums), ``accepted`` (MH moves accepted) and ``history`` (``n`` after the round).

    Raises:
        ValueError: ``policy`` is not a :func:`ts_racing` policy.
    """
    from .simulate import episode_keys, play_round

    params = policy.default_params if params is None else params
    params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), params)
    k_problem, k_init, k_run = episode_keys(key)
    problem = env.sample_problem(k_problem)
    state0 = policy.init(params, k_init, env.spec(horizon))
    if not isinstance(state0, RacingLogisticState):
        raise ValueError(f"policy {policy.name!r} is not a ts_racing policy")

    def step(state, t):
        new, inst, _, _ = play_round(policy, env, params, state, problem, k_run, t)
        return new, dict(regret=inst, mh_evals=new.mh_evals - state.mh_evals,
                         proxy_evals=new.proxy_evals - state.proxy_evals,
                         accepted=new.accepted - state.accepted, history=new.count)

    _, out = jax.lax.scan(step, state0, jnp.arange(1, horizon + 1, dtype=jnp.int32))
    return out
