"""NumPyro adapters: MCMCKernel classes built on the racing core.

The only layer of subsample_mcmc that touches NumPyro internals.
"""

from .diagnostics import DiscreteChainReport, check_discrete_chains
from .control import DataSpaceControlVariate, LinearFeatureControlVariate
from .gibbs import RacingGibbs, RacingGibbsState
from .mh import RacingMH, RacingMHState
from .model import ModelSubsampler, PlateIndices
from .selection import ModelPosterior, ModelSelection, ModelSelectionState, conditional_samples, model_posterior

__all__ = ["DataSpaceControlVariate", "LinearFeatureControlVariate", "RacingGibbs", "RacingGibbsState", "RacingMH", "RacingMHState", "ModelSubsampler", "PlateIndices",
           "ModelSelection", "ModelSelectionState", "ModelPosterior", "model_posterior", "conditional_samples",
           "check_discrete_chains", "DiscreteChainReport"]
