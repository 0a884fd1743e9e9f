"""Bandit algorithms in JAX: environments, index and Thompson-type policies, batching,
ensembles, meta-learning, and a vectorised simulator.

A sibling of the MCMC layers (see ``DESIGN.md``): it may use :mod:`subsample_mcmc.racing`
but never NumPyro internals.  Every policy is a pure ``(init, select, update)`` triple
over a NamedTuple state (:class:`~.base.Policy`), so one code path runs it over
thousands of problems with ``vmap`` and over time with ``lax.scan``
(:func:`~.simulate.simulate`).
"""

from . import environments, index, thompson
from .base import BanditSpec, Environment, Policy, argmax_random_ties
from .environments import ENVIRONMENTS, make_environment
from .registry import POLICIES, make_policy, parse_policy, register_policy
from .simulate import SimulationResult, run_episode, run_episode_loop, simulate

__all__ = [
    "environments", "index", "thompson", "BanditSpec", "Environment", "Policy",
    "argmax_random_ties", "ENVIRONMENTS", "make_environment", "POLICIES", "make_policy",
    "parse_policy", "register_policy", "SimulationResult", "run_episode",
    "run_episode_loop", "simulate",
]
