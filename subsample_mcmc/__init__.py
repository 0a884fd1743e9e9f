"""subsample_mcmc: racing-subsampled discrete sampling and MH for large-N NumPyro models.

* :mod:`subsample_mcmc.racing` -- best-arm identification over a finite population
  (the core: JAX, NumPy and SciPy only, no NumPyro);
* :mod:`subsample_mcmc.kernels` -- pure BlackJAX-shaped transitions (racing and exact MH,
  Gumbel-max Gibbs) and the maths they share (Laplace fits, Taylor proxies, gradient
  estimators, proposals);
* :class:`RacingMH`, :class:`RacingGibbs`, :class:`ModelSelection` -- NumPyro ``MCMCKernel`` classes
  (:mod:`subsample_mcmc.numpyro`, the only layer that touches NumPyro);
* :mod:`subsample_mcmc.models` -- models built on them (ARCH order selection);
* :mod:`subsample_mcmc.bandits` -- bandit algorithms.

Subpackages load on first use: ``import subsample_mcmc.racing`` imports neither NumPyro
nor the kernels.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "RacingMH": "subsample_mcmc.numpyro",
    "RacingGibbs": "subsample_mcmc.numpyro",
    "ModelSelection": "subsample_mcmc.numpyro",
    "model_posterior": "subsample_mcmc.numpyro",
    "conditional_samples": "subsample_mcmc.numpyro",
    "LinearFeatureControlVariate": "subsample_mcmc.numpyro",
    "best_arm": "subsample_mcmc.racing",
    "b_normal": "subsample_mcmc.racing",
    "sample_discrete": "subsample_mcmc.racing",
}
_SUBPACKAGES = ("racing", "kernels", "numpyro", "models", "bandits")

__all__ = ["RacingMH", "RacingGibbs", "ModelSelection", "model_posterior", "conditional_samples",
           "LinearFeatureControlVariate", "best_arm", "b_normal", "sample_discrete", *_SUBPACKAGES,
           "__version__"]


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
