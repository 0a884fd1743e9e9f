r"""Checks of a race's error promise on populations built to test it.

A race (:func:`subsample_mcmc.racing.sample_discrete`) promises that its draw differs
from the exact Gumbel-max draw with the same noise with probability at most ``delta``.
These helpers build fixed reward populations, run many races on each and count the
races whose answer differs from the exact ``argmax_i sum_n l_{i,n} + eps_i``
(computed in float64), with a Clopper-Pearson interval on the error rate.  The test
suite and the benchmarks use them; a user can run them on populations of their own
(any ``[D, N]`` array of per-datum rewards wrapped in :class:`Problem`).

**Synthetic populations** (:func:`make_problem`; Sec. 5.1 / App. C.1 of Chen &
Ghahramani 2016).

``D`` arms with ``N`` rewards each are drawn from Normal(0, 1), Uniform[0, 1] or
LogNormal(0, 2), then *normalised* per arm to mean ``log p_i / N`` and standard
deviation ``sigma``, so that ``p(X = i) ∝ exp(sum_n l_{i,n}) = p_i`` is a fixed
distribution and ``sigma`` alone sets the difficulty (0.1 very hard, 1e-4 easy,
1e-5 very easy at N = 1e5).  We take ``p_i ∝ i`` (``i = 1..D``).  Each race draws
Gumbel noise and identifies ``argmax_i sum_n l_{i,n} + eps_i`` (Eq. 3); it errs when
it returns another arm than the exact argmax computed in float64 for the same
noise.  Reported: the error rate with its Clopper-Pearson interval
(:func:`subsample_mcmc.racing.clopper_pearson`), and the
fraction of the ``N D`` rewards read.

**The heavy-tail battery** (:func:`make_heavy_problem`, :func:`run_cell`): does a race keep
its error promise on skewed, heavy-tailed rewards?  Racing-Normal (Eq. 9 of Chen & Ghahramani 2016) treats a stage's standardised mean
gap as Normal.  Per-datum log-likelihood *differences* on heavy-tailed data are
strongly skewed (a bulk of small differences of one sign, rare large ones of the
other) and the first few dozen points show neither the tail nor the true variance,
so the plain bound errs far more often than ``delta``.  The battery measures the error of a
race against the exact Gumbel-max draw with the same noise on populations built to break it:

* log-likelihood arms of four families on heavy-tailed data --
  ``student_t`` (degrees of freedom ``nu`` of ``StudentT(nu, 0, 0.8)`` on
  ``0.8 t_4`` data), ``cauchy`` (location of ``Cauchy(loc, 1)`` on Cauchy data),
  ``logistic`` (location of ``Logistic(loc, 1)`` on ``t_2`` data: differences with
  infinite variance), ``normal`` (mean of ``Normal(mu, 1)`` on ``t_2.5`` data);
* synthetic populations, normalised per arm as in the synthetic experiment
  (:func:`make_problem`): ``lognormal``
  (``LogNormal(0, 2.5)``), ``contaminated`` (Normal bulk, 1% of rewards at +-60
  standard deviations), ``pareto`` (tail index 1.5, infinite variance).

Each cell (family, ``D`` in {2, 6, 30}, ``delta``) runs many races on one fixed
population; the error is tested against ``delta`` with a Clopper-Pearson interval.
"""

from __future__ import annotations

import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize, stats

from .racing import clopper_pearson, sample_discrete
from .racing.bounds import NormalBound

__all__ = ["DISTRIBUTIONS", "FAMILIES", "INFINITE_FAMILIES", "make_infinite_problem", "Problem", "make_problem", "make_heavy_problem", "run_setting", "run_cell"]

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


@functools.lru_cache(maxsize=64)
def _compiled_runner(method, variance, num_arms, population_size, first_batch, batch_size,
                     heavy_tail_guard=True, tie_share=0.0):
    """One jitted runner per static configuration: data and delta are arguments,
    so sweeping problems and error levels does not recompile."""
    options = dict(method=method, variance=variance, heavy_tail_guard=heavy_tail_guard, tie_share=tie_share)
    if first_batch is not None:
        options["first_batch"] = first_batch

    def run(keys, rewards, ranges, delta):
        extra = {"reward_range": ranges} if method in ("ebs", "lil_ucb") else {}

        def one(key):
            s = sample_discrete(key, jnp.zeros(num_arms), rewards, delta=delta, **options, **extra)
            return s.value, s.race.num_rewards_read, s.gumbel

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
    batch_size: int | None = 64,
    first_batch: int | None = None,
    heavy_tail_guard: bool = True,
    tie_share: float = 0.0,
) -> dict:
    """Run ``num_races`` independent races on ``problem``; return errors and cost.

    ``tie_share`` is :func:`~subsample_mcmc.racing.sample_discrete`'s (the kernels' default
    is 0.5).  ``errors_to_lower`` counts the errors that returned a lower arm index than
    the exact draw (on an ordered parameter grid: the direction of the errors).

    Races run through ``lax.map`` with ``batch_size`` races vmapped at a time (a
    batch costs what its slowest race costs; the batch bounds memory).  The
    reported ``seconds`` include compilation on the first call of a configuration.

    ``batch_size=None`` runs the races strictly one after another (``lax.map``
    without ``vmap``), so each race costs what it reads, independently of the
    others.
    """
    rewards = problem.rewards
    d, n = rewards.shape
    ranges = jnp.max(rewards, 1) - jnp.min(rewards, 1)
    keys = jax.random.split(jax.random.PRNGKey(seed), num_races)
    bs = None if batch_size is None else min(batch_size, num_races)
    run = _compiled_runner(method, variance, d, n, first_batch, bs, bool(heavy_tail_guard), float(tie_share))
    t0 = time.perf_counter()
    arms, evals, gumbel = jax.block_until_ready(run(keys, rewards, ranges, jnp.float32(delta)))
    seconds = time.perf_counter() - t0
    exact = np.argmax(problem.totals[None, :] + np.asarray(gumbel, np.float64), axis=1)
    arms = np.asarray(arms)
    errors = int(np.sum(arms != exact))
    lo, hi = clopper_pearson(errors, num_races)
    return dict(
        method=method, variance=variance, delta=delta, num_arms=d, population_size=n,
        distribution=problem.distribution, sigma=problem.sigma, races=num_races,
        errors=errors, error_rate=errors / num_races, error_ci=(lo, hi),
        errors_to_lower=int(np.sum(arms < exact)),
        heavy_tail_guard=bool(heavy_tail_guard), tie_share=float(tie_share),
        fraction_read=float(np.mean(np.asarray(evals)) / (n * d)),
        seconds=seconds,
    )


# ----------------------------------------------------------------------------------
# The heavy-tail battery
# ----------------------------------------------------------------------------------

FAMILIES = ("student_t", "cauchy", "logistic", "normal", "lognormal", "contaminated", "pareto")

#: per-datum sigma of the synthetic families (the race then reads a few % to all of N)
_SYNTHETIC_SIGMA = 1e-3


def _grid(centre: float, spacing: float, num_arms: int) -> np.ndarray:
    return centre + spacing * (np.arange(num_arms) - (num_arms - 1) / 2)


def make_heavy_problem(family: str, num_arms: int, population_size: int, seed: int = 0) -> Problem:
    """``[num_arms, N]`` float32 rewards of one battery cell, with float64 totals.

    Log-likelihood families return ``l_{i,n} = log p(x_n | theta_i)`` on a parameter
    grid around the truth; the exact draw is ``argmax_i sum_n l_{i,n} + eps_i``.
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    rng = np.random.default_rng(seed)
    n, d = int(population_size), int(num_arms)
    if family == "student_t":
        x = 0.8 * rng.standard_t(4, n)
        nus = {2: np.array([4.0, 5.0]), 6: np.array([2.0, 3, 4, 5, 6, 8])}.get(d, np.linspace(1, 30, d))
        rewards = stats.t.logpdf(x[None, :], nus[:, None], 0.0, 0.8)
    elif family == "cauchy":
        x = rng.standard_cauchy(n)
        rewards = stats.cauchy.logpdf(x[None, :], _grid(0.0, 15.0 / np.sqrt(n), d)[:, None], 1.0)
    elif family == "logistic":
        x = rng.standard_t(2, n)
        rewards = stats.logistic.logpdf(x[None, :], _grid(0.0, 15.0 / np.sqrt(n), d)[:, None], 1.0)
    elif family == "normal":
        x = rng.standard_t(2.5, n)
        rewards = stats.norm.logpdf(x[None, :], _grid(0.0, 10.0 / np.sqrt(n), d)[:, None], 1.0)
    else:
        shape = (d, n)
        if family == "lognormal":
            raw = rng.lognormal(0.0, 2.5, shape)
        elif family == "contaminated":
            raw = rng.standard_normal(shape)
            hit = rng.random(shape) < 0.01
            raw = np.where(hit, 60.0 * rng.choice([-1.0, 1.0], shape), raw)
        else:  # pareto, tail index 1.5
            raw = rng.pareto(1.5, shape)
        raw = (raw - raw.mean(1, keepdims=True)) / raw.std(1, keepdims=True)
        p = np.arange(1, d + 1, dtype=np.float64)
        p /= p.sum()
        rewards = _SYNTHETIC_SIGMA * raw + np.log(p)[:, None] / n
    rewards = np.asarray(rewards, np.float32)
    totals = rewards.astype(np.float64).sum(1)
    probs = np.exp(totals - totals.max())
    return Problem(rewards, totals, probs / probs.sum(), float("nan"), family)


#: difference populations of infinite variance (tail index of the per-datum differences in brackets):
#: Pareto differences directly (``pareto_a``: one-sided, tail index ``a``), and log-likelihood
#: differences of a family on heavy-tailed data ``t_nu``: a Normal or Student-t(30) scale grid gives
#: differences quadratic in ``y`` (tail index ``nu / 2``), a logistic scale grid differences linear in
#: ``|y|`` (tail index ``nu``).
INFINITE_FAMILIES = ("pareto_1.1", "pareto_1.5", "pareto_2.0", "pareto_2.5",
                     "normal_scale_t2.05", "normal_scale_t3", "student30_scale_t2.5", "logistic_scale_t2.05")


def make_infinite_problem(family: str, num_arms: int, population_size: int, seed: int = 0,
                          sigma: float = 1e-5, spacing: float = 1.0) -> Problem:
    """``[num_arms, N]`` float32 rewards whose per-datum differences have tail index 1.03 to 2.5.

    ``pareto_a``: arm ``i > 0``'s rewards are ``sigma`` times Pareto(``a``) draws normalised to mean 0
    and sd 1 (arm 0's are 0: one-sided Pareto differences), plus ``log p_i / N`` (``p_i`` proportional to ``i + 1``), as the synthetic families of
    :func:`make_heavy_problem`.  ``<family>_scale_t<nu>``: ``l_{i,n} = log p(y_n | 0, s_i)`` for
    ``y ~ t_nu`` and scales around the full-data maximum-likelihood scale ``s*``,
    ``log s_i = log s* + spacing (i - (D - 1) / 2) / sqrt(N)``: a near-tie that the bulk of the data decides one way and the
    few largest ``|y|`` the other.
    """
    if family not in INFINITE_FAMILIES:
        raise ValueError(f"family must be one of {INFINITE_FAMILIES}, got {family!r}")
    rng = np.random.default_rng(seed)
    n, d = int(population_size), int(num_arms)
    name, _, tail = family.partition("_")
    if name == "pareto":
        raw = rng.pareto(float(tail), (d, n))
        raw = (raw - raw.mean(1, keepdims=True)) / raw.std(1, keepdims=True)
        raw[0] = 0.0  # the differences to arm 0 are the Pareto draws themselves
        p = np.arange(1, d + 1, dtype=np.float64)
        p /= p.sum()
        rewards = sigma * raw + np.log(p)[:, None] / n
    else:
        nu = float(tail.split("_t")[1])
        y = rng.standard_t(nu, n)
        def loglik(s):
            if name == "normal":
                return stats.norm.logpdf(y[None, :], 0.0, s)
            if name == "student30":
                return stats.t.logpdf(y[None, :], 30.0, 0.0, s)
            return stats.logistic.logpdf(y[None, :], 0.0, s)

        fit = optimize.minimize_scalar(lambda ls: -float(loglik(np.exp(ls)).sum()), bounds=(-5.0, 5.0),
                                       method="bounded")
        rewards = loglik(np.exp(fit.x + _grid(0.0, spacing / np.sqrt(n), d))[:, None])
    rewards = np.asarray(rewards, np.float32)
    totals = rewards.astype(np.float64).sum(1)
    probs = np.exp(totals - totals.max())
    return Problem(rewards, totals, probs / probs.sum(), float(sigma), family)


def run_cell(problem: Problem, *, delta: float, num_races: int, seed: int = 0,
             heavy_tail_guard: bool = True, variance: str = "pairwise", tie_share: float = 0.0,
             tail_index_guard: bool = True) -> dict:
    """Racing-Normal on one battery cell: errors against the exact draw, cost.

    ``tail_index_guard``: the option of :class:`~subsample_mcmc.racing.bounds.NormalBound`
    (on by default, as there).  Adds ``exceeds`` (the whole 99% Clopper-Pearson interval of the
    error rate lies above ``delta``) to :func:`run_setting`'s record.
    """
    method = NormalBound(tail_index_guard=tail_index_guard) if heavy_tail_guard else "normal"
    rec = run_setting(problem, method=method, delta=delta, variance=variance,
                      num_races=num_races, seed=seed, batch_size=None,
                      heavy_tail_guard=heavy_tail_guard, tie_share=tie_share)
    rec["method"] = "normal"
    rec["tail_index_guard"] = bool(tail_index_guard and heavy_tail_guard)
    lo, hi = clopper_pearson(rec["errors"], num_races, level=0.99)
    rec.update(family=problem.distribution, error_ci99=(lo, hi), exceeds=bool(lo > delta))
    return rec
