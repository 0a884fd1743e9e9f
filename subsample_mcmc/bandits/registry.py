"""Registry of policies by name, and a ``name:key=value:...`` parser for the CLI."""

from __future__ import annotations

from typing import Callable, Dict

from . import ensemble, index, laplace, racing_ts, thompson, two_phase
from .base import Policy

__all__ = ["POLICIES", "make_policy", "parse_policy", "register_policy"]

POLICIES: Dict[str, Callable[..., Policy]] = {
    # index policies, Maes et al. Sec. 2.2 / 6.1
    "ucb1": index.ucb1,
    "ucb1_tuned": index.ucb1_tuned,
    "ucb1_tuned_std": index.ucb1_tuned_std,
    "ucb1_normal": index.ucb1_normal,
    "ucb2": index.ucb2,
    "ucb_v": index.ucb_v,
    "kl_ucb": index.kl_ucb,
    "eps_greedy": index.eps_greedy,
    "greedy": index.greedy,
    # Thompson sampling family, Karbasi et al.
    "ts_beta": thompson.ts_beta,
    "ts_gaussian": thompson.ts_gaussian,
    "mots": thompson.mots,
    "mots_j": thompson.mots_j,
    "ts_linear": thompson.ts_linear,
    "ts_contextual": thompson.ts_contextual,
    "b_ts_beta": lambda: thompson.dynamic_batch(thompson.ts_beta()),
    "b_ts_gaussian": lambda **kw: thompson.dynamic_batch(thompson.ts_gaussian(**kw)),
    "b_mots": lambda **kw: thompson.dynamic_batch(thompson.mots(**kw)),
    "b_mots_j": lambda **kw: thompson.dynamic_batch(thompson.mots_j(**kw)),
    "b_ts_contextual": lambda **kw: thompson.dynamic_batch(thompson.ts_contextual(**kw)),
    # ensemble sampling, Lu & Van Roy
    "es_gaussian": lambda num_models=10, **kw: ensemble.ensemble_gaussian(int(num_models), **kw),
    "es_linear": lambda num_models=10, **kw: ensemble.ensemble_linear(int(num_models), **kw),
    # logistic (parametrised Bernoulli) bandits
    "ts_laplace": laplace.ts_laplace,
    "ts_racing": racing_ts.ts_racing,
    "two_phase": two_phase.two_phase,
}


def register_policy(name: str, factory: Callable[..., Policy]) -> None:
    """Add a policy factory to :data:`POLICIES`."""
    POLICIES[name] = factory


def make_policy(name: str, **params) -> Policy:
    """Build a registered policy; unknown names and bad parameters raise ``ValueError``
    naming the argument."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose from {sorted(POLICIES)}")
    try:
        return POLICIES[name](**params)
    except TypeError as exc:
        raise ValueError(f"bad parameters {params} for policy {name!r}: {exc}") from None


def parse_policy(text: str) -> Policy:
    """``"kl_ucb:c=3"`` -> ``kl_ucb(c=3.0)``; ``"ucb_v:c=1.5:zeta=0.06"`` etc.

    Example:
        >>> policy = parse_policy("kl_ucb:c=3")
        >>> policy.name, policy.param_names, policy.default_params
        ('kl_ucb:c=3', ('c',), (3.0,))
    """
    name, *assignments = text.strip().split(":")
    params = {}
    for item in assignments:
        if "=" not in item:
            raise ValueError(f"policy parameter {item!r} in {text!r} must look like key=value")
        key, value = item.split("=", 1)
        try:
            params[key] = float(value)
        except ValueError:
            raise ValueError(f"policy parameter {key!r} in {text!r} must be a number") from None
    policy = make_policy(name, **params)
    if assignments:
        import dataclasses
        policy = dataclasses.replace(policy, name=text.strip())
    return policy
