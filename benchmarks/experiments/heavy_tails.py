r"""The heavy-tail battery: does a race keep its error promise on skewed, heavy-tailed rewards?

Racing-Normal (Eq. 9 of Chen & Ghahramani 2016) treats a stage's standardised mean
gap as Normal.  Per-datum log-likelihood *differences* on heavy-tailed data are
strongly skewed (a bulk of small differences of one sign, rare large ones of the
other) and the first few dozen points show neither the tail nor the true variance,
so the plain bound errs far more often than ``delta`` (issue: Student-t ``nu`` choice,
2.3% wrong at ``delta = 0.001``).  The battery measures the error of a race against
the exact Gumbel-max draw with the same noise on populations built to break it:

* log-likelihood arms of four families on heavy-tailed data --
  ``student_t`` (degrees of freedom ``nu`` of ``StudentT(nu, 0, 0.8)`` on
  ``0.8 t_4`` data), ``cauchy`` (location of ``Cauchy(loc, 1)`` on Cauchy data),
  ``logistic`` (location of ``Logistic(loc, 1)`` on ``t_2`` data: differences with
  infinite variance), ``normal`` (mean of ``Normal(mu, 1)`` on ``t_2.5`` data);
* synthetic populations, normalised per arm as in the synthetic experiment
  (:func:`~experiments.synthetic.make_problem`): ``lognormal``
  (``LogNormal(0, 2.5)``), ``contaminated`` (Normal bulk, 1% of rewards at +-60
  standard deviations), ``pareto`` (tail index 1.5, infinite variance).

Each cell (family, ``D`` in {2, 6, 30}, ``delta``) runs many races on one fixed
population; the error is tested against ``delta`` with a Clopper-Pearson interval.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from subsample_mcmc.racing import clopper_pearson

from .synthetic import Problem, run_setting

__all__ = ["FAMILIES", "make_heavy_problem", "run_cell"]

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


def run_cell(problem: Problem, *, delta: float, num_races: int, seed: int = 0,
             heavy_tail_guard: bool = True, variance: str = "pairwise", tie_share: float = 0.0) -> dict:
    """Racing-Normal on one battery cell: errors against the exact draw, cost.

    Adds ``exceeds`` (the whole 99% Clopper-Pearson interval of the error rate lies
    above ``delta``) to :func:`~experiments.synthetic.run_setting`'s record.
    """
    rec = run_setting(problem, method="normal", delta=delta, variance=variance,
                      num_races=num_races, seed=seed, batch_size=None,
                      heavy_tail_guard=heavy_tail_guard, tie_share=tie_share)
    lo, hi = clopper_pearson(rec["errors"], num_races, level=0.99)
    rec.update(family=problem.distribution, error_ci99=(lo, hi), exceeds=bool(lo > delta))
    return rec
