"""Bandit algorithms in JAX: environments, index and Thompson-type policies, batching,
ensembles, meta-learning, and a vectorised simulator.

A sibling of the MCMC layers (see ``DESIGN.md``): it may use :mod:`subsample_mcmc.racing`
but never NumPyro internals.  Every policy is a pure ``(init, select, update)`` triple
over a NamedTuple state (:class:`~.base.Policy`), so one code path runs it over
thousands of problems with ``vmap`` and over time with ``lax.scan``
(:func:`~.simulate.simulate`).

Modules: :mod:`.environments`, :mod:`.index` (UCB family, KL-UCB, eps_n-greedy),
:mod:`.thompson` (TS with pluggable posteriors, MOTS, dynamic/static batching),
:mod:`.ensemble` (ensemble sampling, neural agents), :mod:`.laplace`, :mod:`.racing_ts`
(TS for the logistic bandit with RacingMH posterior draws), :mod:`.two_phase`,
:mod:`.meta` (Power-P, EDA), :mod:`.formulas` (symbolic search, racing identification),
:mod:`.simulate`, :mod:`.cli`.
"""

from . import (ensemble, environments, formulas, index, laplace, meta, racing_ts, thompson,
               two_phase)
from .base import BanditSpec, Environment, Policy, argmax_random_ties
from .environments import ENVIRONMENTS, make_environment
from .registry import POLICIES, make_policy, parse_policy, register_policy
from .simulate import SimulationResult, run_episode, run_episode_loop, simulate

__all__ = [
    "ensemble", "environments", "formulas", "index", "laplace", "meta", "racing_ts", "thompson",
    "two_phase", "BanditSpec", "Environment", "Policy",
    "argmax_random_ties", "ENVIRONMENTS", "make_environment", "POLICIES", "make_policy",
    "parse_policy", "register_policy", "SimulationResult", "run_episode",
    "run_episode_loop", "simulate",
]
