"""The racing core: best-arm identification over a finite reward population.

Pure JAX, no NumPyro: schedule, bounds as objects (EBS, Normal with ``b_normal``,
union, lil'UCB's radius), Alg. 1 racing, adapted lil'UCB, without-replacement index
streams, data-space control variates and Gumbel-max discrete sampling (Chen &
Ghahramani 2016).
"""

from .api import METHODS, METHODS_NEEDING_RANGE, VARIANCES, best_arm
from .bounds import (
    ConfidenceBound,
    EBSBound,
    ExactBound,
    NormalBound,
    NormalUnionBound,
    b_normal,
    b_normal_union,
    clopper_pearson,
    passage_probability,
)
from .control_variates import (ArmControlVariates, DataBins, FeatureProxyTable, LinearFeatureProxy,
                               TaylorControlVariate, feature_proxy_table, fill_exact_sums, linear_feature_proxy,
                               make_data_bins, taylor_control_variate)
from .discrete import DiscreteSample, sample_discrete, sample_discrete_exact
from .lil_ucb import LilUCBBound, lil_ucb, lil_ucb_parameters
from .permutation import NUM_ROUNDS, IndexStream, index_stream, permuted_indices, sized_permuted_indices
from .race import RaceResult, run_race
from .schedule import doubling_schedule, num_stages
from .unequal import run_race_unequal, unequal_num_stages, unequal_schedule

__all__ = [
    # entry points
    "best_arm", "sample_discrete", "sample_discrete_exact", "METHODS", "METHODS_NEEDING_RANGE", "VARIANCES",
    "RaceResult", "DiscreteSample",
    # bounds
    "ConfidenceBound", "NormalBound", "NormalUnionBound", "EBSBound", "LilUCBBound", "ExactBound",
    "b_normal", "b_normal_union", "passage_probability", "clopper_pearson",
    # schedule and races
    "doubling_schedule", "num_stages", "run_race", "lil_ucb", "lil_ucb_parameters",
    "run_race_unequal", "unequal_schedule", "unequal_num_stages",
    # reading order and control variates
    "IndexStream", "index_stream", "permuted_indices", "sized_permuted_indices", "NUM_ROUNDS",
    "DataBins", "TaylorControlVariate", "make_data_bins", "taylor_control_variate",
    "LinearFeatureProxy", "linear_feature_proxy", "ArmControlVariates", "FeatureProxyTable", "feature_proxy_table",
    "fill_exact_sums",
]
