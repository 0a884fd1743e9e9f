r"""Vectorised simulation: ``lax.scan`` over rounds, ``vmap`` over problems and runs.

One episode (:func:`run_episode`) draws a problem (or takes one), initialises the policy
and scans ``t = 1 .. T``::

    k_t = fold_in(k_run, t);  k_obs, k_sel, k_rew, k_upd = split(k_t, 4)
    obs = env.observe(problem, k_obs, t);  a = policy.select(params, state, k_sel, t, obs)
    r = env.sample_reward(problem, k_rew, obs, a);  state = policy.update(..., k_upd, ...)

and records the *expected* instantaneous regret ``max_k mu_k(obs) - mu_a(obs)``.  Its sum
is the pseudo-regret whose expectation is Eq. 1 of Maes et al. (``sum_k E[T_k](mu* -
mu_k)``): same mean as ``T mu* - sum r_t``, lower variance.

:func:`simulate` runs ``num_problems x num_runs`` episodes in one jitted, vmapped call
(problems drawn from the environment's prior; runs share their problem), and returns
per-episode regrets, their mean and standard error, the mean regret curve with its
pointwise standard error, and the number of batch queries of batched policies.  The key
schedule is the same in :func:`run_episode_loop` (a plain Python loop over rounds, the
reference and the benchmark baseline): both give identical trajectories for a key.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .base import Environment, Policy

__all__ = ["EpisodeResult", "SimulationResult", "run_episode", "run_episode_loop",
           "simulate", "episode_keys", "check_horizon", "play_round", "fast_compile",
           "compile_options", "bandit_jit"]

# XLA's cheapest compilation (LLVM -O0, no expensive passes): about 3x faster to compile
# the scan programs here, several times slower to run.  For compile-dominated runs.
FAST_COMPILE_OPTIONS = (("xla_backend_optimization_level", 0),
                        ("xla_llvm_disable_expensive_passes", True))
_COMPILE = {"options": None}


@contextlib.contextmanager
def fast_compile(enabled: bool = True):
    """Within the block, the programs this package compiles (:func:`simulate`,
    :func:`run_episode_loop`, the EDA's and the formula search's runners) use
    :data:`FAST_COMPILE_OPTIONS`.  Results are the same computations; small runs (unit
    tests, notebooks at CI size), whose time is mostly XLA compilation, get ~3x faster,
    large runs slower.  Compiled programs are cached per setting."""
    old = _COMPILE["options"]
    _COMPILE["options"] = FAST_COMPILE_OPTIONS if enabled else None
    try:
        yield
    finally:
        _COMPILE["options"] = old


def compile_options():
    """The current compiler options (a hashable tuple of pairs, or None)."""
    return _COMPILE["options"]


def bandit_jit(fn, options=None):
    """``jax.jit(fn)`` with ``options`` (from :func:`compile_options`) as XLA compiler
    options."""
    return jax.jit(fn, compiler_options=dict(options)) if options else jax.jit(fn)


class EpisodeResult(NamedTuple):
    regret: jax.Array       # [T] expected instantaneous regret (or scalar total if final)
    arms: jax.Array         # [T] arms played (empty when curve=False)
    rewards: jax.Array      # [T] rewards observed (empty when curve=False)
    num_batches: jax.Array  # number of batch queries (= T for a sequential policy)


class SimulationResult(NamedTuple):
    regret: np.ndarray        # [P, R] total pseudo-regret per episode
    mean: float               # mean over episodes
    stderr: float             # standard error of the mean (problems are the i.i.d. unit)
    curve: Optional[np.ndarray]        # [T] mean cumulative regret
    curve_stderr: Optional[np.ndarray]  # [T] its pointwise standard error
    num_batches: np.ndarray   # [P, R]


def check_horizon(env: Environment, horizon) -> int:
    """Validate ``horizon`` (an integer >= the number of arms, so that the
    initialisation round of Alg. 1 fits); raise ``ValueError`` naming it otherwise."""
    if not isinstance(horizon, (int, np.integer)) or horizon < env.num_arms:
        raise ValueError(f"horizon must be an integer >= the number of arms "
                         f"({env.num_arms}), got {horizon!r}")
    return int(horizon)


def _num_batches(state, horizon):
    n = getattr(state, "num_batches", None)
    return jnp.asarray(horizon, jnp.int32) if n is None else n.astype(jnp.int32)


def _step_keys(k_run, t):
    return jax.random.split(jax.random.fold_in(k_run, t), 4)


def play_round(policy: Policy, env: Environment, params, state, problem, k_run, t):
    r"""Round ``t`` of an episode (the key schedule of the module docstring): observe,
    select ``a_t``, draw ``r_t``, update.  Returns ``(state, mu* - mu_{a_t}, a_t, r_t)``,
    the instantaneous term of the pseudo-regret (Eq. 1 of Maes et al.)."""
    k_obs, k_sel, k_rew, k_upd = _step_keys(k_run, t)
    obs = env.observe(problem, k_obs, t)
    arm = policy.select(params, state, k_sel, t, obs)
    reward = env.sample_reward(problem, k_rew, obs, arm)
    mu = env.mean_rewards(problem, obs)
    state = policy.update(params, state, k_upd, t, arm, reward, obs)
    return state, jnp.max(mu) - mu[arm], arm, reward


def episode_keys(key):
    """``key -> (k_problem, k_init, k_run)``, the split used by every episode."""
    return jax.random.split(key, 3)


def run_episode(policy: Policy, env: Environment, horizon: int, params, key, problem=None,
                curve: bool = True) -> EpisodeResult:
    """One episode, ``lax.scan`` over ``t = 1..T`` (traceable; ``vmap`` it freely).

    Args:
        policy, env: the policy triple and the environment.
        horizon: T (static).
        params: the policy's hyper-parameters (traced pytree).
        key: a PRNG key; ``episode_keys(key)`` gives problem, init and run keys.
        problem: an environment problem; drawn from ``env.sample_problem`` if None.
        curve: record ``[T]`` regrets, arms and rewards (else only the total regret).
    """
    k_problem, k_init, k_run = episode_keys(key)
    if problem is None:
        problem = env.sample_problem(k_problem)
    spec = env.spec(horizon)
    state0 = policy.init(params, k_init, spec)

    def step(carry, t):
        state, total = carry
        state, inst, arm, reward = play_round(policy, env, params, state, problem, k_run, t)
        out = (inst, arm, reward) if curve else ()
        return (state, total + inst), out

    (state, total), out = jax.lax.scan(step, (state0, jnp.float32(0.0)),
                                       jnp.arange(1, horizon + 1, dtype=jnp.int32))
    nb = _num_batches(state, horizon)
    if curve:
        return EpisodeResult(out[0], out[1], out[2], nb)
    empty = jnp.zeros((0,))
    return EpisodeResult(total, empty, empty, nb)


def run_episode_loop(policy: Policy, env: Environment, horizon: int, params, key,
                     problem=None) -> EpisodeResult:
    """The same episode as :func:`run_episode` with a Python loop over rounds (each round
    a separately jitted step).  Reference implementation and benchmark baseline."""
    k_problem, k_init, k_run = episode_keys(key)
    if problem is None:
        problem = env.sample_problem(k_problem)
    state = policy.init(params, k_init, env.spec(horizon))
    step = _loop_step(policy, env)
    regrets, arms, rewards = [], [], []
    for t in range(1, horizon + 1):
        state, inst, arm, reward = step(params, state, problem, k_run, jnp.int32(t))
        regrets.append(inst)
        arms.append(arm)
        rewards.append(reward)
    return EpisodeResult(jnp.stack(regrets), jnp.stack(arms), jnp.stack(rewards),
                         _num_batches(state, horizon))


def _loop_step(policy, env):
    return _loop_step_cached(policy.functions, env, compile_options())


@functools.lru_cache(maxsize=None)
def _loop_step_cached(functions, env, options=None):
    policy = Policy("inner", *functions)

    def step(params, state, problem, k_run, t):
        return play_round(policy, env, params, state, problem, k_run, t)

    return bandit_jit(step, options)


@functools.lru_cache(maxsize=None)
def _batched(functions, env, horizon, curve, num_runs, options=None):
    policy = Policy("inner", *functions)

    def one(params, key, problem_key):
        problem = env.sample_problem(problem_key)
        res = run_episode(policy, env, horizon, params, key, problem=problem, curve=curve)
        regret = jnp.cumsum(res.regret) if curve else res.regret
        return regret, res.num_batches

    def per_problem(params, key):
        k_problem, k_runs = jax.random.split(key)
        keys = jax.random.split(k_runs, num_runs)
        return jax.vmap(one, in_axes=(None, 0, None))(params, keys, k_problem)

    def run(params, keys):
        return jax.vmap(per_problem, in_axes=(None, 0))(params, keys)

    return bandit_jit(run, options)


def simulate(policy: Policy, env: Environment, horizon: int, key, num_problems: int = 1000,
             num_runs: int = 1, params: Any = None, curve: bool = False,
             chunk_size: Optional[int] = None) -> SimulationResult:
    """Run ``policy`` on ``num_problems`` problems from ``env`` (``num_runs`` episodes each)
    in one jitted ``vmap``-over-problems, ``vmap``-over-runs, ``scan``-over-time program.

    Args:
        policy, env: what to simulate.
        horizon: T >= number of arms.
        key: PRNG key; problem ``i`` uses ``split(key, num_problems)[i]``.
        num_problems, num_runs: P problems, R runs per problem.
        params: policy hyper-parameters (default ``policy.default_params``).
        curve: also return the mean cumulative regret curve ``[T]``.
        chunk_size: evaluate problems in chunks of this size (bounds memory for curves).

    Returns:
        :class:`SimulationResult`; ``stderr`` treats problems as the i.i.d. unit (runs of
        one problem are averaged first), the Monte Carlo error of ``E_P E[R_T]``.

    Example:
        >>> import jax
        >>> from subsample_mcmc.bandits import make_environment, parse_policy
        >>> res = simulate(parse_policy("ucb1"), make_environment("bernoulli"), horizon=50,
        ...                key=jax.random.PRNGKey(0), num_problems=20)
        >>> res.regret.shape, res.mean >= 0.0
        ((20, 1), True)
    """
    horizon = check_horizon(env, horizon)
    if not isinstance(num_problems, (int, np.integer)) or num_problems < 1:
        raise ValueError(f"num_problems must be a positive integer, got {num_problems!r}")
    if not isinstance(num_runs, (int, np.integer)) or num_runs < 1:
        raise ValueError(f"num_runs must be a positive integer, got {num_runs!r}")
    if params is None:
        params = policy.default_params
    params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), params)
    run = _batched(policy.functions, env, horizon, bool(curve), int(num_runs),
                   compile_options())
    keys = jax.random.split(key, num_problems)
    chunk = num_problems if chunk_size is None else int(chunk_size)
    regrets, batches = [], []
    for start in range(0, num_problems, chunk):
        r, b = run(params, keys[start:start + chunk])
        regrets.append(np.asarray(r))
        batches.append(np.asarray(b))
    regret = np.concatenate(regrets)
    nb = np.concatenate(batches)
    if curve:
        per_problem = regret.mean(axis=1)             # [P, T]
        curve_mean = per_problem.mean(axis=0)
        curve_se = per_problem.std(axis=0, ddof=1) / np.sqrt(num_problems) if num_problems > 1 \
            else np.zeros_like(curve_mean)
        total = regret[:, :, -1]
    else:
        curve_mean = curve_se = None
        total = regret
    per_problem_total = total.mean(axis=1)
    se = float(per_problem_total.std(ddof=1) / np.sqrt(num_problems)) if num_problems > 1 else 0.0
    return SimulationResult(total, float(total.mean()), se, curve_mean, curve_se, nb)
