"""subsample_mcmc: racing-subsampled discrete sampling and MH for large-N NumPyro models."""

from . import racing
from .racing import b_normal, best_arm, sample_discrete

__version__ = "0.1.0"
__all__ = ["racing", "best_arm", "b_normal", "sample_discrete", "__version__"]
