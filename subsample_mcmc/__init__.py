"""subsample_mcmc: racing-subsampled discrete sampling and MH for large-N NumPyro models.

* :mod:`subsample_mcmc.racing` -- best-arm identification over a finite population
  (the core, no NumPyro);
* :mod:`subsample_mcmc.kernels` -- pure transitions (racing MH, Gibbs, proposals, proxies);
* :class:`RacingMH`, :class:`RacingGibbs` -- NumPyro ``MCMCKernel`` classes;
* :mod:`subsample_mcmc.bandits` -- bandit algorithms.
"""

from . import racing
from .numpyro import RacingGibbs, RacingMH
from .racing import b_normal, best_arm, sample_discrete

__version__ = "0.1.0"
__all__ = ["racing", "best_arm", "b_normal", "sample_discrete", "RacingMH", "RacingGibbs", "__version__"]
