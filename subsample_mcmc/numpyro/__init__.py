"""NumPyro adapters: MCMCKernel classes built on the racing core.

The only layer of subsample_mcmc that touches NumPyro internals.
"""

from .mh import RacingMH, RacingMHState
from .model import ModelSubsampler, PlateIndices

__all__ = ["RacingMH", "RacingMHState", "ModelSubsampler", "PlateIndices"]
