r"""Meta-learning of index policies (Maes, Wehenkel & Ernst, Sec. 3-4).

* :func:`power_policy` -- the Power-P index of Eq. 8: ``index(H, k) = sum_{i,j,k,l <= P}
  theta_{ijkl} v1^i v2^j v3^k v4^l`` with ``v1 = sqrt(ln t)``, ``v2 = 1/sqrt(t_k)``,
  ``v3 = rbar_k``, ``v4 = sigma_k``: 16 parameters for P = 1, 81 for P = 2.
* :func:`evaluate_candidates` -- ``Delta(pi_theta)`` of Eq. 7 for a whole population of
  parameter vectors in one jitted ``vmap(candidates) x vmap(problems) x vmap(runs) x
  scan(time)`` program, with common random numbers across candidates.
* :func:`eda` -- Alg. 2 (univariate-Gaussian EDA / cross-entropy): ``n_p = max(8d,
  40)`` candidates per iteration, refit the mean and variance of each coordinate on the
  ``b = n_p / 4`` best, 100 iterations, return the best candidate ever evaluated.
* :func:`learn_policy` -- Alg. 2 on a sample of training problems (Sec. 6.1: N = 100
  problems, each ``Delta`` averaging 100 runs per problem).  Tuning a generic policy's
  hyper-parameters is the same call with the policy's defaults as initial means.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .base import Environment, Policy
from .index import index_policy
from .simulate import bandit_jit, check_horizon, compile_options, run_episode

__all__ = ["power_exponents", "power_features", "power_policy", "evaluate_candidates",
           "eda", "EDAResult", "learn_policy", "ucb1_as_power1", "win_percentage"]


@functools.lru_cache(maxsize=None)
def power_exponents(degree: int) -> np.ndarray:
    """``[(P+1)^4, 4]`` exponents ``(i, j, k, l)`` in lexicographic order."""
    return np.array(list(itertools.product(range(degree + 1), repeat=4)), np.float32)


def power_features(degree, tk, mean, sd, t):
    """``phi(H, k)`` of Sec. 4.1: ``[K, (P+1)^4]`` monomials of ``(sqrt(ln t),
    1/sqrt(t_k), rbar_k, sigma_k)`` (``0^0 = 1``)."""
    v = jnp.stack([jnp.broadcast_to(jnp.sqrt(jnp.log(t)), tk.shape), 1.0 / jnp.sqrt(tk),
                   mean, sd], axis=-1)                                 # [K, 4]
    e = jnp.asarray(power_exponents(degree))                           # [d, 4]
    return jnp.prod(jnp.where(e[None] == 0, 1.0, v[:, None, :] ** e[None]), axis=-1)


def _power_table(x, degree):
    """``[..., P+1]`` powers ``x^0 .. x^P`` by repeated multiplication."""
    out = [jnp.ones_like(x)]
    for _ in range(degree):
        out.append(out[-1] * x)
    return jnp.stack(out, axis=-1)


@functools.lru_cache(maxsize=None)
def _power_index(degree):
    def index(params, tk, mean, sd, t):
        # sum_{ijkl} theta_ijkl v1^i v2^j v3^k v4^l as one contraction (no pow calls)
        p = degree + 1
        v1 = _power_table(jnp.broadcast_to(jnp.sqrt(jnp.log(t)), tk.shape), degree)
        v2 = _power_table(1.0 / jnp.sqrt(tk), degree)
        v3 = _power_table(mean, degree)
        v4 = _power_table(sd, degree)
        return jnp.einsum("ki,kj,kl,km,ijlm->k", v1, v2, v3, v4, params.reshape(p, p, p, p))

    return index


def power_policy(degree: int = 1, theta=None) -> Policy:
    """Power-P index policy (Eq. 8 of Maes et al.) inside Alg. 1; ``theta`` (the
    ``(P+1)^4`` parameters, lexicographic in ``(i, j, k, l)``) defaults to zeros."""
    if degree not in (1, 2, 3):
        raise ValueError(f"degree must be 1, 2 or 3, got {degree!r}")
    d = (degree + 1) ** 4
    theta = np.zeros(d, np.float32) if theta is None else np.asarray(theta, np.float32)
    if theta.shape != (d,):
        raise ValueError(f"theta must have shape ({d},) for Power-{degree}, got {theta.shape}")
    names = tuple(f"theta_{i}{j}{k}{l}" for i, j, k, l in power_exponents(degree).astype(int))
    return dataclasses.replace(index_policy(f"power{degree}", _power_index(degree)),
                               default_params=theta, param_names=names)


def ucb1_as_power1(C: float = 2.0) -> np.ndarray:
    """Power-1 parameters equal to UCB1: ``rbar + sqrt(C) sqrt(ln t) / sqrt(t_k)``."""
    theta = np.zeros(16, np.float32)
    e = power_exponents(1).astype(int).tolist()
    theta[e.index([0, 0, 1, 0])] = 1.0
    theta[e.index([1, 1, 0, 0])] = np.sqrt(C)
    return theta


# ------------------------------------------------------------------- evaluation

@functools.lru_cache(maxsize=None)
def _candidate_runner(functions, env, horizon, num_runs, options=None):
    policy = Policy("inner", *functions)

    def one(params, key, problem):
        return run_episode(policy, env, horizon, params, key, problem=problem,
                           curve=False).regret

    def per_candidate(params, problems, run_keys):
        # run_keys: [N, R]
        return jax.vmap(lambda pb, ks: jax.vmap(lambda k: one(params, k, pb))(ks))(
            problems, run_keys).mean(axis=1)                           # [N]

    def run(thetas, problems, run_keys):
        return jax.vmap(per_candidate, in_axes=(0, None, None))(thetas, problems, run_keys)

    return bandit_jit(run, options)


def evaluate_candidates(policy: Policy, env: Environment, horizon: int, thetas, problems,
                        key, num_runs: int = 1, chunk: int = 64) -> np.ndarray:
    """``[n, N]`` mean regret (over ``num_runs`` runs) of each candidate parameter vector
    (rows of ``thetas``, a pytree with a leading candidate axis) on each training problem.
    All candidates see the same run keys (common random numbers)."""
    horizon = check_horizon(env, horizon)
    n_problems = jax.tree_util.tree_leaves(problems)[0].shape[0]
    run_keys = jax.random.split(key, n_problems * num_runs).reshape(
        (n_problems, num_runs) + jax.random.split(key, 1).shape[1:])
    run = _candidate_runner(policy.functions, env, horizon, int(num_runs), compile_options())
    n = jax.tree_util.tree_leaves(thetas)[0].shape[0]
    out = []
    for s in range(0, n, chunk):
        part = jax.tree_util.tree_map(lambda x: x[s:s + chunk], thetas)
        out.append(np.asarray(run(part, problems, run_keys)))
    return np.concatenate(out)


# ------------------------------------------------------------------- EDA

class EDAResult(NamedTuple):
    best_theta: np.ndarray      # lowest observed objective (Alg. 2, line 18)
    best_value: float
    history: np.ndarray         # [iterations] best objective of each iteration
    mean: np.ndarray            # final Gaussian means
    std: np.ndarray             # final Gaussian standard deviations
    evaluations: int
    seconds: float


def eda(objective: Callable[[np.ndarray, jax.Array], np.ndarray], dim: int, key,
        iterations: int = 100, population: Optional[int] = None, elite: Optional[int] = None,
        init_mean=None, init_std=None, callback=None) -> EDAResult:
    r"""Alg. 2 of Maes et al.: univariate marginal Gaussian EDA.

    Start from ``N(mu_p, sigma_p^2)`` with ``mu = 0, sigma = 1`` (or ``init_mean``, the
    defaults of a generic policy being tuned); each iteration samples ``n_p`` candidates,
    evaluates ``objective(thetas [n_p, d], key) -> [n_p]`` (lower is better), and refits
    ``mu_p, sigma_p^2`` (maximum likelihood, ``1/b``) on the ``b`` best.  Defaults:
    ``n_p = max(8d, 40)``, ``b = n_p / 4``.  Returns the best candidate ever observed.
    """
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    population = max(8 * dim, 40) if population is None else int(population)
    elite = population // 4 if elite is None else int(elite)
    if not 1 <= elite <= population:
        raise ValueError(f"elite must lie in [1, population], got {elite}")
    mean = np.zeros(dim) if init_mean is None else np.asarray(init_mean, float).copy()
    std = np.ones(dim) if init_std is None else np.broadcast_to(
        np.asarray(init_std, float), (dim,)).copy()
    best_theta, best_value = None, np.inf
    history = []
    t0 = time.perf_counter()
    for it in range(iterations):
        key, k_sample, k_eval = jax.random.split(key, 3)
        z = np.asarray(jax.random.normal(k_sample, (population, dim)))
        thetas = (mean + std * z).astype(np.float32)
        values = np.asarray(objective(thetas, k_eval), float)
        order = np.argsort(values)
        if values[order[0]] < best_value:
            best_value, best_theta = float(values[order[0]]), thetas[order[0]].copy()
        elite_thetas = thetas[order[:elite]]
        mean = elite_thetas.mean(axis=0)
        std = np.sqrt(((elite_thetas - mean) ** 2).mean(axis=0))
        history.append(float(values[order[0]]))
        if callback is not None:
            callback(it, values, mean, std)
    return EDAResult(best_theta, best_value, np.array(history), mean, std,
                     population * iterations, time.perf_counter() - t0)


def learn_policy(policy: Policy, env: Environment, horizon: int, key, num_problems: int = 100,
                 num_runs: int = 100, iterations: int = 100, population=None, elite=None,
                 init_mean=None, init_std=None, verbose: bool = False) -> EDAResult:
    """Solve Eq. 7 with Alg. 2 for a policy whose ``params`` is one flat vector
    (Power-P, or a generic policy's hyper-parameters for the *tuned* rows of Table 1).

    Training set: ``num_problems`` problems drawn once from ``env`` (Sec. 6.1: N = 100);
    ``Delta(pi_theta)`` averages ``num_runs`` runs on each (paper: 100), with fresh run
    keys every iteration shared by all candidates.  ``init_mean`` defaults to
    ``policy.default_params`` (zeros for Power-P, the literature's values for generic
    policies, as in Sec. 6.1).
    """
    dim = int(np.size(np.asarray(policy.default_params)))
    if dim == 0:
        raise ValueError(f"policy {policy.name!r} has no numerical parameters to learn")
    k_problems, k_eda = jax.random.split(key)
    problems = jax.vmap(env.sample_problem)(jax.random.split(k_problems, num_problems))
    if init_mean is None:
        init_mean = np.asarray(policy.default_params, float).reshape(dim)
    tuple_params = isinstance(policy.default_params, tuple)

    def objective(thetas, k):
        cand = tuple(jnp.asarray(thetas[:, i]) for i in range(dim)) if tuple_params \
            else jnp.asarray(thetas)
        return evaluate_candidates(policy, env, horizon, cand, problems, k,
                                   num_runs=num_runs).mean(axis=1)

    cb = None
    if verbose:
        def cb(it, values, mean, std):
            print(f"  EDA iteration {it + 1}: best {values.min():.4f}  median "
                  f"{np.median(values):.4f}  mean sigma {std.mean():.3g}", flush=True)
    return eda(objective, dim, k_eda, iterations, population, elite, init_mean, init_std, cb)


def win_percentage(policy: Policy, reference: Policy, env: Environment, horizon: int, key,
                   num_problems: int = 10_000, num_runs: int = 100, params=None) -> float:
    """Table 2 of Maes et al.: percentage of test problems on which ``policy``'s expected
    regret (mean of ``num_runs`` runs) is below ``reference``'s (same problems)."""
    from .simulate import simulate

    a = simulate(policy, env, horizon, key, num_problems, num_runs=num_runs, params=params)
    b = simulate(reference, env, horizon, key, num_problems, num_runs=num_runs)
    return float(100.0 * np.mean(a.regret.mean(axis=1) < b.regret.mean(axis=1)))
