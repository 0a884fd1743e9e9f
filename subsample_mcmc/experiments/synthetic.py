r"""The synthetic experiment of Sec. 5.1 / App. C.1 of Chen & Ghahramani (2016).

``D`` arms with ``N`` rewards each are drawn from Normal(0, 1), Uniform[0, 1] or
LogNormal(0, 2), then *normalised* per arm to mean ``log p_i / N`` and standard
deviation ``sigma``, so that ``p(X = i) ∝ exp(sum_n l_{i,n}) = p_i`` is a fixed
distribution and ``sigma`` alone sets the difficulty (0.1 very hard, 1e-4 easy,
1e-5 very easy at N = 1e5).  We take ``p_i ∝ i`` (``i = 1..D``).  Each race draws
Gumbel noise and identifies ``argmax_i sum_n l_{i,n} + eps_i`` (Eq. 3); it errs when
it returns another arm than the exact argmax computed in float64 for the same
noise.  Reported: the error rate with its Clopper-Pearson interval, and the
fraction of the ``N D`` rewards read.
"""

from __future__ import annotations

import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from ..racing import sample_discrete

__all__ = ["DISTRIBUTIONS", "make_problem", "Problem", "run_setting", "clopper_pearson"]

DISTRIBUTIONS = ("normal", "uniform", "lognormal")


class Problem(NamedTuple):
    rewards: jax.Array  # float32 [D, N]
    totals: np.ndarray  # float64 [D]: sum_n l_{i,n} of the float32 rewards
    probabilities: np.ndarray  # p_i
    sigma: float
    distribution: str


def make_problem(seed: int, num_arms: int, population_size: int, distribution: str, sigma: float) -> Problem:
    """Rewards of the synthetic experiment (see the module docstring)."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
    rng = np.random.default_rng(seed)
    shape = (num_arms, population_size)
    if distribution == "normal":
        raw = rng.standard_normal(shape)
    elif distribution == "uniform":
        raw = rng.uniform(0.0, 1.0, shape)
    else:
        raw = rng.lognormal(0.0, 2.0, shape)
    raw = (raw - raw.mean(1, keepdims=True)) / raw.std(1, keepdims=True)
    p = np.arange(1, num_arms + 1, dtype=np.float64)
    p /= p.sum()
    rewards = (sigma * raw + np.log(p)[:, None] / population_size).astype(np.float32)
    totals = rewards.astype(np.float64).sum(1)
    return Problem(jnp.asarray(rewards), totals, p, float(sigma), distribution)


def clopper_pearson(errors: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval of a binomial proportion."""
    a = 1.0 - level
    lo = 0.0 if errors == 0 else stats.beta.ppf(a / 2, errors, trials - errors + 1)
    hi = 1.0 if errors == trials else stats.beta.ppf(1 - a / 2, errors + 1, trials - errors)
    return float(lo), float(hi)


@functools.lru_cache(maxsize=64)
def _compiled_runner(method, variance, num_arms, population_size, first_batch, batch_size):
    """One jitted runner per static configuration: data and delta are arguments,
    so sweeping problems and error levels does not recompile."""
    options = dict(method=method, variance=variance)
    if first_batch is not None:
        options["first_batch"] = first_batch

    def run(keys, rewards, ranges, delta):
        extra = {"reward_range": ranges} if method in ("ebs", "lil_ucb") else {}

        def one(key):
            s = sample_discrete(key, jnp.zeros(num_arms), rewards, delta=delta, **options, **extra)
            return s.value, s.race.num_evaluations, s.gumbel

        return jax.lax.map(one, keys, batch_size=batch_size)

    return jax.jit(run)


def run_setting(
    problem: Problem,
    *,
    method: str,
    delta: float,
    variance: str = "pairwise",
    num_races: int = 1000,
    seed: int = 0,
    batch_size: int = 64,
    first_batch: int | None = None,
) -> dict:
    """Run ``num_races`` independent races on ``problem``; return errors and cost.

    Races run through ``lax.map`` with ``batch_size`` races vmapped at a time (a
    batch costs what its slowest race costs; the batch bounds memory).  The
    reported ``seconds`` include compilation on the first call of a configuration.
    """
    rewards = problem.rewards
    d, n = rewards.shape
    ranges = jnp.max(rewards, 1) - jnp.min(rewards, 1)
    keys = jax.random.split(jax.random.PRNGKey(seed), num_races)
    run = _compiled_runner(method, variance, d, n, first_batch, min(batch_size, num_races))
    t0 = time.perf_counter()
    arms, evals, gumbel = jax.block_until_ready(run(keys, rewards, ranges, jnp.float32(delta)))
    seconds = time.perf_counter() - t0
    exact = np.argmax(problem.totals[None, :] + np.asarray(gumbel, np.float64), axis=1)
    errors = int(np.sum(np.asarray(arms) != exact))
    lo, hi = clopper_pearson(errors, num_races)
    return dict(
        method=method, variance=variance, delta=delta, num_arms=d, population_size=n,
        distribution=problem.distribution, sigma=problem.sigma, races=num_races,
        errors=errors, error_rate=errors / num_races, error_ci=(lo, hi),
        fraction_read=float(np.mean(np.asarray(evals)) / (n * d)),
        seconds=seconds,
    )
