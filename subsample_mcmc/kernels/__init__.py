"""Pure, BlackJAX-shaped transition kernels built on the racing core (no NumPyro), and
the one home of the maths they share.

* :mod:`.mh` -- racing and exact Metropolis-Hastings: ``init``, ``build_kernel(...) ->
  step(rng_key, state, ...) -> (MHState, MHInfo)`` (Sec. 4, Eq. 12 of Chen & Ghahramani
  2016);
* :mod:`.gibbs` -- the Gumbel-max discrete Gibbs step (Eq. 2-3);
* :mod:`.proposals` -- random walk, Langevin and Crank-Nicolson (around a Student-t or
  Gaussian) proposals with a diagonal or dense preconditioner; ``pareto_k_hat`` /
  ``reference_k_hat`` (PSIS's tail index of importance weights, which ``RacingMH`` uses to
  choose its proposal) and ``either`` (a traced choice between two proposals);
* :mod:`.gradients` -- mini-batch log densities and gradient estimators, plain and with
  a control variate;
* :mod:`.proxy` -- the second-order parameter-space Taylor proxy;
* :mod:`.laplace` -- MAP searches (Adam restarts, safeguarded Newton) and Laplace
  approximations;
* :mod:`.product_space` -- Carlin & Chib's product space for model choice: Laplace
  pseudoprior draws and densities, the model draw's ``log f0``, Wang-Landau, posterior model
  probabilities with standard errors;
* :mod:`.cost` -- what a step computes, in likelihood-evaluation units.
"""

from .cost import evaluation_equivalents
from .gibbs import discrete_gibbs_step
from .gradients import gradient_estimator, minibatch_log_density, random_batch
from .laplace import LaplaceApproximation, fit_laplace, inverse_mass, laplace_approximation
from .mh import MHInfo, MHState, build_kernel, init, racing_mh_accept
from .proposals import (
    K_HAT_MAX, PROPOSALS, Preconditioner, Proposal, crank_nicolson, defensive_t_weight, either, get_proposal, langevin,
    pareto_k_hat,
    preconditioner, random_walk, reference_k_hat,
)
from .product_space import (
    Pseudoprior, PseudopriorFit, laplace_adjustment, model_log_f0, model_probabilities, proxy_sums, pseudoprior, pseudoprior_draw,
    pseudoprior_fit, pseudoprior_log_density, shared_space_arms, wang_landau_update,
)
from .proxy import TaylorProxy, proxy_per_datum, proxy_residual, proxy_sum, taylor_proxy

__all__ = [
    "MHState", "MHInfo", "init", "build_kernel", "racing_mh_accept", "discrete_gibbs_step",
    "Proposal", "PROPOSALS", "get_proposal", "random_walk", "langevin", "crank_nicolson", "defensive_t_weight",
    "Preconditioner",
    "preconditioner", "either", "pareto_k_hat", "reference_k_hat", "K_HAT_MAX",
    "gradient_estimator", "minibatch_log_density", "random_batch",
    "TaylorProxy", "taylor_proxy", "proxy_sum", "proxy_per_datum", "proxy_residual",
    "LaplaceApproximation", "laplace_approximation", "fit_laplace", "inverse_mass",
    "evaluation_equivalents",
    "Pseudoprior", "pseudoprior", "pseudoprior_draw", "pseudoprior_log_density", "model_log_f0",
    "proxy_sums", "laplace_adjustment", "PseudopriorFit", "pseudoprior_fit", "wang_landau_update", "shared_space_arms", "model_probabilities",
]
