"""Pure transition kernels built on the racing core (no NumPyro).

Plain functions over pytrees, usable from BlackJAX-style code: the racing
Metropolis-Hastings accept test (Sec. 4, Eq. 12 of Chen & Ghahramani 2016), random
walk and mini-batch Langevin (SGLD-style) proposals, and the Gumbel-max discrete
Gibbs step.
"""

from .mh import MHInfo, exact_mh_step, gaussian_random_walk, langevin_proposal, racing_mh_accept, racing_mh_step
from .proxy import TaylorProxy, proxy_per_datum, proxy_sum, taylor_proxy
from .gibbs import discrete_gibbs_step

__all__ = [
    "MHInfo", "gaussian_random_walk", "langevin_proposal", "racing_mh_accept",
    "racing_mh_step", "exact_mh_step", "discrete_gibbs_step", "TaylorProxy", "taylor_proxy", "proxy_sum",
    "proxy_per_datum",
]
