"""The racing core: best-arm identification over a finite reward population.

Pure JAX, no NumPyro: schedule, bounds (EBS, Normal with ``b_normal``, union),
Alg. 1 racing, adapted lil'UCB, without-replacement index streams, data-space
control variates and Gumbel-max discrete sampling (Chen & Ghahramani 2016).
"""

from .api import METHODS, VARIANCES, best_arm, trace_count
from .bounds import b_normal, b_normal_union, num_stages, passage_probability
from .control_variates import DataBins, TaylorControlVariate, make_data_bins, taylor_control_variate
from .discrete import DiscreteSample, sample_discrete
from .lil_ucb import lil_ucb, lil_ucb_parameters
from .permutation import IndexStream, index_stream, permuted_indices
from .race import RaceResult, racing, run_at_most_once
from .schedule import doubling_schedule

__all__ = [
    "METHODS", "VARIANCES", "best_arm", "trace_count", "b_normal", "b_normal_union",
    "num_stages", "passage_probability", "DataBins", "TaylorControlVariate",
    "make_data_bins", "taylor_control_variate", "DiscreteSample", "sample_discrete",
    "lil_ucb", "lil_ucb_parameters", "IndexStream", "index_stream", "permuted_indices",
    "RaceResult", "racing", "run_at_most_once", "doubling_schedule",
]
