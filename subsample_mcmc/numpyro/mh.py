r"""``RacingMH``: a NumPyro ``MCMCKernel`` whose MH test is a two-arm race (Eq. 12).

Each step proposes ``x'`` in the unconstrained space -- by default a Gaussian random
walk shaped by the Laplace covariance; or a preconditioned Crank-Nicolson move around a
Student-t built on the Laplace approximation found at ``init`` (nearly an independent
draw when the posterior is close to Gaussian; opt-in, see ``proposal``); or a mini-batch
Langevin/SGLD move with its exact forward and reverse densities -- then decides
the Metropolis-Hastings test by racing the per-datum log-likelihoods of ``x`` and
``x'`` (Racing-Normal by default; Racing-EBS or adapted lil'UCB as options), reading
the data plate without replacement and stopping as soon as the bound separates the
two arms (Sec. 4 of Chen & Ghahramani 2016).  The decision errs with probability at
most ``delta``.

Warmup (``num_warmup`` steps of ``numpyro.infer.MCMC``):

* the start is a checked posterior mode (``init_strategy="map"``): ``num_restarts``
  mini-batch Adam ascents from NumPyro-style initial points, the best by the full-data
  log posterior, a safeguarded full-data Newton polish, a warning when the restarts end
  at modes of different height or the polished point is not a mode; or, from a draw from
  the prior (``init_strategy="prior"``) or from ``init_params``, the mode one such ascent
  reaches (the start chooses the basin; with ``control_variate="taylor"``, the default);
* the step size follows dual averaging (Hoffman & Gelman 2014, NumPyro's
  ``dual_averaging``) toward ``target_accept_prob``, driven by the accept indicator;
* the inverse mass matrix (dense up to 256 parameters, else diagonal) is the inverse
  of the full-data Hessian at the mode (the Laplace covariance); when only a
  mini-batch Hessian is available it is re-estimated from the warmup samples between
  15% and 50% of warmup (Welford, regularised as in Stan), the step size then
  re-adapted over the second half;
* over the last quarter of warmup, at the final step size, the race's cost per step
  is measured: when it
  exceeds ``N``, the chain samples with the exact MH step instead
  (``exact_when_cheaper``).

The kernel state carries ``num_likelihood_evals`` (everything the step computed, in
per-datum log-likelihood evaluations: both arms at every point the race computed,
proxy residuals at their calibrated cost, gradients), ``accept_prob`` (the accept
indicator), ``mean_accept_prob``, ``race_stage`` (the stages of the doubling schedule
the race ran: 1 when the first mini-batch decided, 0 for an exact step) and
``exact_mode``; ask for them with
``mcmc.run(..., extra_fields=("num_likelihood_evals", "accept_prob", "race_stage"))``
and ``az.from_numpyro`` puts them in ``sample_stats``.
"""

from __future__ import annotations

import copy
import functools
import warnings
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.infer.hmc_util import dual_averaging, welford_covariance
from numpyro.infer.initialization import init_to_mean, init_to_sample, init_to_uniform
from numpyro.util import is_prng_key

from ..kernels import mh as mh_kernel
from ..kernels.cost import evaluation_equivalents
from ..kernels.gradients import minibatch_log_density, random_batch
from ..kernels.laplace import adam_ascent, adam_schedule, inverse_mass, last_finite, log_density_sum, newton_ascent
from ..kernels.proposals import (K_HAT_MAX, crank_nicolson, defensive_t_weight, either, get_proposal,
                                 preconditioner, reference_k_hat)
from ..kernels.proxy import (TaylorProxy, curvature_mismatch, proxy_residual, proxy_sum, residual_spread,
                             taylor_proxy)
from ..racing.race import _run_at_most_once
from ..racing.discrete import check_tie_share
from .control import DataSpaceControlVariate
from .model import (InitOnceKernel, ModelSubsampler, PlateIndices, check_bool, check_delta, check_init_params,
                    check_method, check_model, check_race_fraction, check_race_options, jit_with_data, outside_traces,
                    split_data)

__all__ = ["RacingMH", "RacingMHState"]


class RacingMHState(NamedTuple):
    i: jax.Array
    z: dict
    step_size: jax.Array
    inverse_mass_matrix: jax.Array
    accept_prob: jax.Array
    mean_accept_prob: jax.Array
    num_likelihood_evals: jax.Array
    race_stage: jax.Array
    da_state: tuple
    welford_state: tuple
    proxy: Optional[TaylorProxy]
    rng_key: jax.Array
    exact_mode: jax.Array = False  # sampling by the exact MH step (decided at the end of warmup)
    log_lik_sum: jax.Array = jnp.nan  # sum_n l_n(z) when known (exact mode), else NaN
    race_cost: jax.Array = 0.0  # race evaluations summed over the decision window of warmup
    center: Optional[jax.Array] = None  # flat mean of the Gaussian a centred proposal moves around
    mass_factor: Optional[jax.Array] = None  # Cholesky factor of a dense inverse mass matrix (else None)
    crank_nicolson: jax.Array = False  # the chain moves by Crank-Nicolson-t (else the proposal named, or the walk)
    laplace_k_hat: jax.Array = jnp.nan  # Pareto k of target / Laplace t at init (the automatic choice; else NaN)
    #: median se_all / se_typical of :func:`~subsample_mcmc.kernels.proxy.residual_spread` over Laplace pairs at
    #: init (NaN when not checked); above ``_SPREAD_RATIO_MAX`` the chain samples by the exact step
    residual_spread_ratio: jax.Array = jnp.nan
    #: the init's mode search ended on a boundary of the full-data log posterior's support (``-inf`` just beyond
    #: the mode: a likelihood whose support moves with the parameters), or an observed value moves with the
    #: latents under a bounded support (``obs=y - loc``); the chain samples by the exact step
    support_boundary: jax.Array = False
    #: over the last quarter of warmup (:meth:`RacingMH._mixing_window`): ``[2, p]`` sums of ``x - center`` and
    #: of its square, and the accepted moves; read once at the end of warmup (:func:`_warn_poor_mixing`)
    window_moments: Optional[jax.Array] = None
    window_accepts: jax.Array = 0.0


_DA_INIT, _DA_UPDATE = dual_averaging()
_MAX_DRAWS = 100  # initial draws per restart until finite, as NumPyro's find_valid_initial_params
_ONE_ASCENT_NEWTON_STEPS = 32  # at most this many Newton steps (or newton_steps) polish one ascent from init_params
_MODE_TOL = 1.0  # restarts within this many log-posterior units per parameter count as the same mode
# a restart as high as the best mode (within _MODE_TOL per parameter) but farther than this squared Mahalanobis
# distance per parameter (10 posterior sds in one), and stationary, ended at another mode of equal height
_TWIN_DISTANCE2 = 100.0
#: a restart's end is a mode (for the lower-mode and equal-height reports) only where its own Newton decrement
#: g'|H|^-1 g is at most this; otherwise it is an ascent that had not converged (RacingMH._stationary)
_OWN_DECREMENT_MAX = 1.0
#: the rare-influential-data check at init: the chain samples by the exact step when, over pairs of
#: Laplace draws, the race's first batch typically sees less than 1/5 of its rewards' sd (the median
#: ratio) and the median true stage-1 sd exceeds 0.01 nats.  Median ratios over 16 chains
#: (benchmarks/racing_mh_k_hat.py): AER Fertility 1.1-1.5, openintro military 1.4-3.0, a rare-event
#: logistic whose rare binary covariate has a handful of events in ~600 of 200,000 rows 9.5-22
_SPREAD_RATIO_MAX, _SPREAD_MIN_NATS, _SPREAD_PAIRS = 5.0, 0.01, 6
#: ... and also when the full-data log-likelihood's second differences at half a Laplace draw from the centre
#: differ from the Taylor proxy's curvature by more than half (the median over the draws of
#: kernels.proxy.curvature_mismatch): a kink in the parameters, as in Laplace or quantile regression, where a
#: fresh user's L1 regression (N = 20,000) came out with posterior sds 5x NUTS's and R-hat below 1.05
_KINK_STEP, _KINK_MISMATCH_MAX = 0.5, 0.5
#: the poor-mixing check at the end of warmup (_warn_poor_mixing): over the last quarter of warmup (at least
#: _MIXING_MIN_STEPS steps), an acceptance below _MIXING_MIN_ACCEPT, or for a Crank-Nicolson chain whose mass
#: matrix is the full-data Laplace covariance, a coordinate whose draws' variance is more than
#: _MIXING_VARIANCE_RATIO times the Laplace variance (or all below 1/_MIXING_VARIANCE_RATIO of it: a chain that
#: does not move), or for any chain on that covariance a coordinate whose draws' mean is more than _MIXING_MEAN_SDS
#: Laplace sds from the start (a random walk drifting from a start that was not the mode: stevedata::TV16 with
#: newton_steps=0, acceptance 0.02-0.06, means 41 sds off, R-hat 2.6)
_MIXING_MIN_STEPS, _MIXING_MIN_ACCEPT, _MIXING_VARIANCE_RATIO, _MIXING_MEAN_SDS = 25, 0.02, 10.0, 10.0
_TARGET_ACCEPT = {"random_walk": 0.234, "langevin": 0.574, "crank_nicolson": 0.5}
_DENSE_MAX_DIMENSION = 256  # dense_mass=None: a dense mass matrix up to this many parameters
#: taylor_order=None (see RacingMH): a race reads about 2 m + _TAIL_READS_PER_NAT S sqrt(N) data per step,
#: S = N sd of its rewards at Laplace pairs (fitted on openintro military: 1,885 reads per step at order 2,
#: S sqrt(N) = 306; 461 at order 3, S sqrt(N) = 68, races right for every u; with the tie band of
#: racing_mh_accept the near-tie tail is cut, more so where S is small: 1,384 and 333 evaluations per step
#: in one run of 5,000 steps, so the order-3 test R_2 >= 2 R_3 stays on the cautious side); the third-order
#: sums are computed at most for this
#: many unconstrained parameters (their pass costs about p^2 likelihood gradients per datum)
_TAIL_READS_PER_NAT, _THIRD_ORDER_MAX_DIMENSION = 5.0, 16
#: ... and order 3 is kept only where its residual differences' tails, measured by the heavy-tail guard's
#: minimum sample at their population skewness and kurtosis, are at most this factor heavier than order
#: 2's.  Ratios (order 3 / order 2) where order 3 read fewer data: 0.12 (military), 0.56 and 0.12 (two
#: logistic regressions with rare dummies, one with a Gaussian covariate), 1.07 (dummies only, N = 5e4:
#: 13x fewer reads), all float32; where it read more, all under x64: 1.96 (3.5x more evaluations per
#: step), 4.5 (2.3x more); 6.2 (dummies only)
_TAILS_HEAVIER_MAX = 1.5


def _proxy_chunk(n: int, p: int) -> int:
    """Data per chunk of a proxy pass: all of them when ``N p`` fits (the likelihood's Hessian
    compiled once, not twice), else 4096."""
    return n if n * p <= (1 << 22) else 4096


def _predicted_reads(se: float, n: int, m: int) -> float:
    r"""Data a race reads per step (both arms), predicted from ``se = N sd / sqrt(m)``, the stage-1
    width of its rewards at pairs of Laplace draws: ``2 m + alpha S sqrt(N)`` with ``S = se sqrt(m)``.

    The first stage reads ``m`` points of each arm.  A later stage of ``n`` points runs when
    ``|log u - Lambda|`` lies within the previous stage's width ``~ S / sqrt(n / 2)``, with probability
    ``~ rho S / sqrt(n)`` (``rho``: the density of ``log u - Lambda`` at 0), and reads ``~ 2 n``; with
    doubling stages the sum is ``~ S sqrt(N)`` times a constant, ``alpha`` (:data:`_TAIL_READS_PER_NAT`,
    fitted)."""
    return 2.0 * m + _TAIL_READS_PER_NAT * se * np.sqrt(m) * np.sqrt(n)


class RacingMH(InitOnceKernel):
    r"""Racing Metropolis-Hastings for the continuous latent sites of a NumPyro model.

    Args:
        model: a NumPyro model with one data plate (see
            :class:`~subsample_mcmc.numpyro.model.ModelSubsampler` for the contract).
        proposal: how ``x'`` is proposed (:mod:`~subsample_mcmc.kernels.proposals`):

            * ``None`` (the default, ``kernel.proposal == "automatic"``): chosen per chain at
              ``init``, from what the mode search and the Taylor proxy know, without reading
              data.  ``M = 16000`` draws from the Student-t ``t_5(c, L L')`` on the Laplace
              approximation give importance weights ``w = pi~ / t``, ``pi~`` the prior times
              the proxy's quadratic likelihood sum; their Pareto tail index ``k``
              (:func:`~subsample_mcmc.kernels.proposals.reference_k_hat`, PSIS's diagnostic,
              Vehtari et al. 2024) says whether ``w`` is bounded.  ``k <= 0`` (GLM-like
              posteriors: a Gaussian or lighter prior, a quadratic proxy): Crank-Nicolson
              (below) around the defensive mixture ``(1 - a) N(c, L L') + a t_5(c, L L')``,
              ``a = min(1, 2 / p)`` for ``p`` unconstrained parameters
              (:func:`~subsample_mcmc.kernels.proposals.defensive_t_weight`; the t alone for
              one or two), whose MH ratio is the target's ratio to that mixture -- bounded
              when ``w`` is, which makes it uniformly ergodic (Mengersen & Tweedie 1996).
              ``k > 0`` (a centred hierarchical model's funnel gives ``k`` of 0.4-0.7): the random walk.  Without the Taylor proxy
              (``control_variate`` not ``"taylor"``) and as a block of a Gibbs kernel: the
              random walk.  The choice and ``k`` are in the state (``crank_nicolson``,
              ``laplace_k_hat``; ``extra_fields=("crank_nicolson",)`` records it); the
              progress bar shows ``pCN-t rho ...`` for chains that move by Crank-Nicolson
              (the reference below).
            * ``"random_walk"``: ``x' = x + eps L z`` (target acceptance 0.234), ``L L'``
              the inverse mass matrix (the Laplace covariance).
            * ``"crank_nicolson"``: ``x' = c + rho (x - c) + sqrt(1 - rho^2)
              sqrt(u) L z`` with ``rho = 1/sqrt(1 + eps^2)``, ``c`` the mode and ``u`` a
              scale drawn from its conditional given ``x`` -- reversible with respect to
              the Student-t ``t_5(c, L L')`` built on the Laplace approximation (the automatic
              choice uses the defensive mixture above), so the MH ratio is the target's ratio
              to that t and, with the Taylor proxy, the race reads residuals of third order.
              Warmup adapts ``eps`` toward
              ``target_accept_prob`` (0.5): near the Bernstein-von Mises regime ``eps ->
              inf`` and the chain makes nearly independent draws at the cost of a short
              race (GLMs at large N: many times the random walk's ESS per draw).  The t
              (:func:`~subsample_mcmc.kernels.proposals.crank_nicolson`) keeps ``target /
              reference`` bounded where the posterior's tails are heavier than the Laplace
              approximation's (a rare-event rate; the upper tail of a hierarchical scale);
              the automatic choice's
              Gaussian component keeps the independence draws on the posterior's typical
              shell in many dimensions, where the t's radius spreads too wide (acceptance
              on a correlated logistic regression, ``p = 51``: 0.64 with the t alone, 0.98
              with the mixture).  Forced on a centred hierarchical model, the
              population mean's 1% tails got 0.2-0.4% of the draws (sds 5-10% low) with
              R-hat and ESS fine: the t cannot follow a funnel, which is why the default
              checks ``k`` first.  As a block of a Gibbs kernel it warns (the centre would
              stay at the conditional met at ``init``).
            * ``"langevin"``: SGLD drift from a mini-batch gradient, corrected by the racing
              MH test (target acceptance 0.574).
        step_size: initial step size (adapted during warmup when ``adapt_step_size``).
        target_accept_prob: target of the step-size adaptation (default 0.234 for the
            random walk, 0.574 for Langevin -- the optimal-scaling values -- and 0.5 for
            Crank-Nicolson).
        adapt_step_size: adapt the step size over warmup (dual averaging).
        adapt_mass_matrix: re-estimate the inverse mass matrix from the warmup draws
            (15% to 50% of warmup; Welford, regularised as in Stan).  Default ``None``:
            only when the initial one is not the full-data Laplace covariance, i.e. when
            it comes from a mini-batch Hessian (``control_variate=None`` with
            ``init_params`` or ``init_strategy="prior"``), or when the kernel is a block of
            a Gibbs kernel (its Laplace covariance is that of the conditional at the other
            blocks' initial values: a change point's first segment at its start holds 100
            of 3,100 points, and its level's proposal was 4x the posterior sd).  A random walk's warmup draws
            are strongly autocorrelated, and a few hundred of them estimate the
            posterior covariance worse than the inverse Hessian at the mode of a large-N
            posterior (Bernstein-von Mises): ``benchmarks/results/racing_mh_mass.md``.
        method, delta, first_batch, variance: the race (see
            :func:`~subsample_mcmc.racing.best_arm`).  ``delta`` bounds the probability that a
            step's decision differs from the exact MH test's, over ``u`` and the reading order.
        tie_share: the share of ``delta`` given to ``log u`` landing within ``epsilon =
            tie_share delta / 2`` nats of the log MH ratio: the race runs at ``(1 - tie_share)
            delta`` and stops once its width is below ``epsilon``
            (:func:`~subsample_mcmc.kernels.mh.racing_mh_accept`), so that a near-tie no longer
            reads all ``N`` points.  Default 0.8 (:data:`~subsample_mcmc.kernels.mh.TIE_SHARE`); 0: a race right
            for every ``u``.
        grad_batch_size: mini-batch size of the Langevin gradient and of the MAP search.
        data_plate: name of the data plate when the model has several candidates.
        init_strategy: where a chain starts when ``run`` gets no ``init_params``:

            * ``"map"`` (default): the mode search below; the chain starts at the mode.
            * ``"prior"``: a draw from the prior (NumPyro's ``init_to_sample``), drawn
              again (up to 100 times, one full-data pass each) until the full-data log
              posterior is finite.  With ``control_variate="taylor"`` the draw only chooses
              the basin: one ascent of the search below (its Adam phases and Newton
              polish) starts there, and the chain, the proxy and the Laplace covariance
              start at the mode it reaches, as with ``init_params``.  Without a proxy the
              chain starts at the draw.

            ``init_params`` (unconstrained values, as NumPyro's ``MCMC.run`` passes them;
            a leading chain axis for several chains) are treated like the prior draw: with
            the Taylor proxy, one ascent from each chain's ``init_params`` and the chain
            starts at the mode it reaches; otherwise the chain starts at ``init_params``.
            Why not at ``init_params`` itself: the proxy must be expanded at a mode (far
            out its residuals are as large as the log-likelihood and the race reads most of
            the data), and a chain started far out with the proxy at the mode stalls --
            Crank-Nicolson moves keep the radius, and where the posterior falls off slower
            than its Laplace Gaussian nearly all are rejected, with no warning
            (``tests/unit/test_numpyro_start.py`` starts a negative binomial regression far
            out).  A warning when the ascent ends short of a mode.

            Mode search (``"map"``, and the Taylor proxy's reference point):
            ``num_restarts`` initial points -- restart 0 at the prior mean (NumPyro's
            ``init_to_mean``), the others drawn uniformly in (-2, 2) in the
            unconstrained space (``init_to_uniform``) -- each drawn again (up to 100
            rounds) until its full-data log posterior is finite; from each, mini-batch
            Adam (``map_steps`` steps at rate 0.05, then ``map_steps`` at a rate decaying
            from 0.01 to 1e-4; restarts vmapped); an ascent that ends where the
            full-data log posterior is not finite (mini-batches cannot see a
            data-dependent support such as ``Uniform(0, theta)``) is moved back along its
            path to the last finite point; the restart with the highest full-data log
            posterior is polished by at most ``newton_steps`` Newton steps, each
            accepted only where the full-data log posterior is finite and higher
            (backtracking, then bisection up to a support boundary when the longer step
            left the support).  At the polished point the full-data gradient ``g`` is
            checked against the Hessian ``H`` (Newton decrement ``g'(-H)^-1 g``).

            Reported: a ``UserWarning`` when restarts ended at lower modes (full-data
            log posterior lower by more than one unit per parameter, higher than the
            best mode's quadratic bowl predicts at their distance, and converged: the
            Newton decrement ``g'|H|^-1 g`` at the restart's end, in its own curvature,
            at most 1; so not merely an unconverged ascent, which is not reported: the
            posterior is multimodal and a higher mode may have been missed), or when the polished point is not a mode (decrement above 1, not on
            a support boundary); a ``ValueError`` naming the non-finite term (a latent
            value, a prior or Jacobian term, or an observed site at a data index) when
            the start's log posterior is not finite.  The remedy named in both: more
            restarts, or ``init_params`` (e.g. a draw from a short NUTS run on a subset
            of the data).
        num_restarts: initial points of the mode search (default 32).  Cost, per
            chain: ``num_restarts x 2 map_steps x grad_batch_size`` per-datum gradient
            evaluations (independent of N; 32 x 1000 x 256 by default) and
            ``num_restarts`` per-datum log-likelihood evaluations (one full-data pass of
            all restarts together) for the selection, plus one such pass per redraw
            round when initial points had a non-finite log posterior.
        map_steps: Adam steps per phase (constant rate, then decaying) of each restart.
        reward_range: passed to the race (needed by ``"ebs"`` and ``"lil_ucb"``).
        control_variate: ``"taylor"`` (default): a parameter-space Taylor proxy (its order:
            ``taylor_order``) around the MAP (:mod:`subsample_mcmc.kernels.proxy`, as NumPyro's
            ``HMCECS.taylor_proxy``); its full-data sums cost one pass over the data at
            ``init`` (and at every ``refresh``).  A
            :class:`~subsample_mcmc.numpyro.DataSpaceControlVariate`: the paper's data-space
            expansion (Eq. 11).  ``None``: race the raw log-likelihoods (then prefer a
            small ``delta``, e.g. 0.01: near-threshold MH decisions err at rate up to
            ``delta`` and a random walk makes many of them).
        exact_when_cheaper: measure the race's cost per step over the last quarter of
            warmup (at least 40 warmup steps) and, when it exceeds ``N`` (the exact MH step with the current
            point's log-likelihood sum cached:
            :func:`~subsample_mcmc.kernels.mh.build_kernel`, ``method="exact"``), sample with the exact step
            (the state's ``exact_mode``, an extra field).  Default ``True``: a step then
            never costs more, on average, than exact MH.
        max_race_fraction: a reading budget per race, as a share of the points raced: a race still
            undecided at the last stage boundary within ``max_race_fraction`` of them hands over to
            the exact MH test with the same ``u`` (two full-data passes, counted in
            ``num_likelihood_evals``): what the race would answer having read everything, so
            the error promise is unchanged (:func:`~subsample_mcmc.racing.best_arm`'s
            ``max_points``).  Where a raced point costs many times a point of the contiguous
            full pass, a race that would read on costs more than that pass.  ``None``
            (default): no budget; :class:`~subsample_mcmc.ModelSelection` sets ``1/32`` with feature control variates.
        dense_mass: a dense inverse mass matrix (proposal covariance ``eps^2 M^{-1}``):
            initialised from the inverse Hessian at the mode (the Laplace covariance) and
            re-estimated over warmup like the diagonal one.  Default ``None``: dense for
            at most 256 unconstrained parameters, diagonal beyond.
        newton_steps: a cap: at most this many full-data Newton steps polish the best restart
            (each: one gradient-and-Hessian pass over the data and usually one
            log-likelihood pass; it stops early once the Newton decrement is below 1e-3,
            after 2-4 steps on a well-scaled model).  Newton's step is taken in the
            Jacobi-scaled basis (:func:`~subsample_mcmc.kernels.laplace.jacobi_scale`), so raw
            covariates (age squared, income in dollars) do not defeat it in float32; from an
            Adam end far up such a design's slope it may need 10-20 steps (the default was 4,
            which left a raw-covariate logistic regression "not a mode").
            The one ascent from ``init_params`` or a prior draw may take ``max(newton_steps, 32)``.
        taylor_order: order of the Taylor proxy (``control_variate="taylor"``): ``None`` (the
            default: chosen at ``init``, below), 2 or 3.  Third order adds ``1/6 T[D, D, D]`` with
            ``T`` the full-data sum of the per-datum third-derivative tensors at the mode (one more
            pass at ``init``, about ``p^2`` likelihood gradients per datum, ``p`` the number of
            unconstrained parameters), so the race's residuals are of fourth order in
            ``D = x - mode`` (:mod:`~subsample_mcmc.kernels.proxy`).  Each raced point costs one more
            level of ``jvp``; in exchange far fewer races run to late stages: the near-ties that
            read a large part of the data are the bulk of a race's cost on large ``N``
            (``benchmarks/results/racing_mh_stages.md``).  The Pareto ``k`` of the automatic
            proposal choice uses the quadratic part (a cubic is unbounded above).

            ``None``: one choice for all chains, made at the first chain's ``init`` from the
            rare-influential-data check's pairs of Laplace draws (no extra pass unless order 3 may
            pay).  With ``S_k = N sd`` of the order-``k`` residual differences there (the median
            over the pairs) a race reads about ``R_k = 2 m + alpha S_k sqrt(N)`` data per step
            (``m = first_batch``, both arms; the near-tie tail: a stage of ``n`` points is reached
            when ``|log u - Lambda|`` is below its width ``~ S_k / sqrt(n)``, and reading ``n``
            costs ``n``, so the stages sum to ``~ S_k sqrt(N)``; ``alpha = 5`` fitted on the
            military regression, whose race reads 1,885 and 461 per step at orders 2 and 3).  When
            ``R_2 >= 4 m`` and ``p <= 16`` (the ``T`` pass costs about ``p^2`` likelihood gradients
            per datum: 2 s at init on military, ``p = 12``, ``N = 1.4e6``), ``T`` is computed,
            ``S_3`` measured on the same pairs, and order 3 kept when ``R_2 >= 2 R_3`` and its
            residual differences' tails are at most 1.5x heavier (the heavy-tail guard's minimum
            sample at their population skewness and kurtosis): under ``jax_enable_x64`` the
            residuals' own heavy tails (``(x' D)^4`` of Gaussian covariates, rare dummies), hidden
            by rounding in float32, keep the race's guard reading thousands of points per step, and
            more at order 3 (a logistic regression with rare dummies and a Gaussian covariate,
            ``N = 2e5``: 110,000 evaluations per step at order 3, 31,000 at order 2).  On the two
            real sets of ``benchmarks/peers_real_data.py`` (``benchmarks/results/racing_mh_taylor_order.md``,
            3 seeds): openintro military takes order 3 (0.34x the evaluations per step of order 2,
            1.9x its min-ESS per second), AER Fertility keeps order 2.  Inside another kernel's trace
            (and in :class:`~subsample_mcmc.ModelSelection`, whose races compare proxies of several
            models) the order is 2.  :attr:`proxy_order` says what was chosen.

    Example:
        >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
        >>> from numpyro.infer import MCMC
        >>> def model(y):
        ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
        ...     with numpyro.plate("data", y.shape[0]):
        ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y)
        >>> y = jax.random.normal(jax.random.PRNGKey(0), (10_000,)) + 1.0
        >>> mcmc = MCMC(RacingMH(model), num_warmup=300, num_samples=300, progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(1), y, extra_fields=("num_likelihood_evals",))
        >>> abs(float(mcmc.get_samples()["mu"].mean()) - 1.0) < 0.1
        True
    """

    sample_field = "z"

    def __init__(
        self,
        model,
        *,
        proposal: Optional[str] = None,
        step_size: Optional[float] = None,
        target_accept_prob: Optional[float] = None,
        adapt_step_size: bool = True,
        adapt_mass_matrix: Optional[bool] = None,
        method: str = "normal",
        delta: float = 0.05,
        first_batch: int = 50,
        variance: str = "pairwise",
        grad_batch_size: int = 256,
        data_plate: Optional[str] = None,
        init_strategy: str = "map",
        map_steps: int = 500,
        reward_range=None,
        control_variate: Optional[str] = "taylor",
        newton_steps: int = 32,
        num_restarts: int = 32,
        exact_when_cheaper: bool = True,
        dense_mass: Optional[bool] = None,
        taylor_order: Optional[int] = None,
        tie_share: float = mh_kernel.TIE_SHARE,
        max_race_fraction: Optional[float] = None,
    ):
        if dense_mass is not None and not isinstance(dense_mass, (bool, np.bool_)):
            raise TypeError(f"dense_mass must be None (automatic), True or False, got {dense_mass!r}")
        if adapt_mass_matrix is not None and not isinstance(adapt_mass_matrix, (bool, np.bool_)):
            raise TypeError(f"adapt_mass_matrix must be None (automatic), True or False, got {adapt_mass_matrix!r}")
        check_method(method, "RacingMH", reward_range=reward_range)
        check_model(model)
        delta = check_delta(delta)
        if control_variate not in (None, "taylor") and not isinstance(control_variate, DataSpaceControlVariate):
            raise ValueError(
                f"control_variate must be None, 'taylor' or a DataSpaceControlVariate, got {control_variate!r}"
            )
        if init_strategy not in ("map", "prior"):
            raise ValueError(f"init_strategy must be 'map' or 'prior', got {init_strategy!r}")
        if taylor_order not in (None, 2, 3):
            raise ValueError(f"taylor_order must be None (automatic), 2 or 3 (an int), got {taylor_order!r}")
        if taylor_order is not None and control_variate != "taylor":
            raise ValueError(f"taylor_order={taylor_order!r} sets the order of the Taylor proxy, but "
                             f"control_variate={control_variate!r} has none: drop taylor_order or pass "
                             "control_variate='taylor'")
        tie_share = check_tie_share(tie_share)
        first_batch, variance = check_race_options(first_batch, variance)
        if int(num_restarts) < 1:
            raise ValueError(f"num_restarts must be >= 1, got {num_restarts}")
        if step_size is not None and not step_size > 0:
            raise ValueError(f"step_size must be > 0, got {step_size}")
        if target_accept_prob is not None and not (0.0 < target_accept_prob < 1.0):
            raise ValueError(f"target_accept_prob must lie in (0, 1), got {target_accept_prob}")
        self.model = model
        self._user_target_accept = target_accept_prob
        self._automatic_proposal = proposal is None
        self._set_proposal("random_walk" if proposal is None else proposal)  # ValueError naming the choices
        if self._automatic_proposal:
            self.proposal = "automatic"
        self._step_size = step_size
        self.adapt_step_size = check_bool(adapt_step_size, "adapt_step_size")
        self.adapt_mass_matrix = adapt_mass_matrix
        self.race_options = dict(method=method, delta=float(delta), first_batch=int(first_batch),
                                 variance=variance, tie_share=float(tie_share))
        if reward_range is not None:
            self.race_options["reward_range"] = reward_range
        self.grad_batch_size = int(grad_batch_size)
        self.data_plate = data_plate
        self.init_strategy = init_strategy
        self.map_steps = int(map_steps)
        self.control_variate = control_variate
        self.newton_steps = int(newton_steps)
        #: warn at the end of warmup when the chain still mixes poorly (off in a block of another kernel)
        self.check_mixing = True
        self.num_restarts = int(num_restarts)
        self.exact_when_cheaper = check_bool(exact_when_cheaper, "exact_when_cheaper")
        self.max_race_fraction = check_race_fraction(max_race_fraction)
        self.dense_mass = dense_mass
        self.taylor_order = None if taylor_order is None else int(taylor_order)
        self._order: Optional[int] = self.taylor_order  # the order used (None: not chosen yet)
        self._subsampler: Optional[ModelSubsampler] = None
        self._num_warmup = 0
        self._unravel = None
        self._jit_cache: dict = {}  # init's compiled programs, reused by every chain (see jit_with_data)

    def _set_proposal(self, proposal):
        self._proposal = get_proposal(proposal)
        self.proposal = self._proposal.name
        self.target_accept_prob = (
            self._user_target_accept if self._user_target_accept is not None
            else _TARGET_ACCEPT.get(self._proposal.name, 0.234)
        )

    @property
    def _reestimate_mass(self) -> bool:
        if self.adapt_mass_matrix is not None:
            return bool(self.adapt_mass_matrix)
        # a Gibbs block's Laplace covariance is that of the conditional met at init: the
        # other blocks move the conditional (a change point's segment lengths), so the
        # warmup draws estimate it
        return getattr(self, "_gibbs_block", False) or not getattr(self, "_mass_from_full_data", False)

    def _is_dense(self, d: int) -> bool:
        return d <= _DENSE_MAX_DIMENSION if self.dense_mass is None else bool(self.dense_mass)

    @property
    def _welford(self):
        d = self._unravel_size()
        return welford_covariance(diagonal=not self._is_dense(d))

    def _unravel_size(self) -> int:
        ms = self._subsampler
        return int(ravel_pytree(ms.unconstrained_prototype())[0].shape[0])

    # -- model plumbing ---------------------------------------------------------------
    @outside_traces
    def _setup(self, model_args, model_kwargs):
        if self._subsampler is None:
            ms = ModelSubsampler(self.model, model_args, model_kwargs, self.data_plate)
            if ms.discrete_sites:
                raise ValueError(
                    f"RacingMH updates continuous sites only; the model has discrete latent sites "
                    f"{list(ms.discrete_sites)}: use RacingGibbs(inner_kernel=RacingMH(...))"
                )
            if not ms.continuous_sites:
                raise ValueError("the model has no continuous latent site for RacingMH to update")
            if ms.size < self.race_options["first_batch"]:
                raise ValueError(
                    f"the data plate {ms.plate!r} has N={ms.size} points, fewer than "
                    f"first_batch={self.race_options['first_batch']}; lower first_batch"
                )
            if isinstance(self.control_variate, DataSpaceControlVariate):
                self.control_variate.validate(ms, model_args, model_kwargs)
            self._subsampler = ms
            self._costs = self._calibrate_costs(ms, model_args, model_kwargs)
            self._moving_support = next(iter(ms.moving_supports.items()), None)  # (site, support name)
            # an observed value that moves with the latents under a bounded support (obs=y - loc): the exact step
            self._moving_observed = next(iter(getattr(ms, "moving_observed", {}).items()), None)
        return self._subsampler

    def _calibrate_costs(self, ms, model_args, model_kwargs) -> dict:
        """Per-datum costs in likelihood-evaluation units (XLA operation counts, once).

        ``point``: one arm's race reward at one datum (1 without a proxy; a Taylor
        residual ``l_n - h_n`` costs more: nested ``jvp``); ``gradient``: one datum's
        term of the mini-batch gradient; ``proxy``: one datum's gradient and Hessian
        (building or refreshing the proxy).
        """
        flat, unravel = ravel_pytree(ms.unconstrained_prototype())
        idx = jnp.arange(min(256, ms.size))
        arrays, rebuild = split_data(model_args, model_kwargs)  # arguments, not constants

        def ll(x, i, arrays):
            return ms.log_likelihood(ms.constrain(unravel(x)), i, *rebuild(arrays))

        def residual_of(order):
            def residual(x, i, arrays):
                if self.control_variate != "taylor":
                    return ll(x, i, arrays)
                d = flat.shape[0]
                proxy = TaylorProxy(flat, jnp.zeros((d,), flat.dtype), jnp.zeros((d, d), flat.dtype),
                                    third_sum=jnp.zeros((d, d, d), flat.dtype) if order == 3 else None)
                return proxy_residual(lambda t, j: ll(t, j, arrays), proxy)(x, i)
            return residual

        def gradient_of(order):
            return lambda x, i, arrays: jax.grad(lambda t: jnp.sum(residual_of(order)(t, i, arrays)))(x)

        def proxy_terms_of(order):
            def proxy_terms(x, i, arrays):
                total = lambda t: jnp.sum(ll(t, i, arrays))  # noqa: E731
                out = (jax.grad(total)(x), jax.hessian(total)(x))
                return out + (jax.jacfwd(jax.hessian(total))(x),) if order == 3 else out
            return proxy_terms

        try:
            # what only some configurations need (the other proxy order, the gradient of a
            # Langevin move, the proxy's terms at a refresh) is measured when first asked for
            self._cost_programs = {f"{name}{order}": (fn(order), ll, flat, idx, arrays) for order in (2, 3)
                                   for name, fn in (("point", residual_of), ("gradient", gradient_of),
                                                    ("proxy", proxy_terms_of))}
            self._costs = {}
            for name in ("point", "gradient") if self._proposal.uses_gradient else ("point",):
                self._cost(name)
            return self._costs
        except Exception:  # noqa: BLE001 -- traced model arguments: count one unit each
            self._cost_programs = {}
            return {}

    def _cost(self, name: str) -> float:
        """A per-datum cost of :meth:`_calibrate_costs`, measured when first asked for; ``point``,
        ``gradient`` and ``proxy`` at the proxy order in use (:attr:`proxy_order`, 2 until chosen),
        ``point3`` etc. at a given order."""
        if name in ("point", "gradient", "proxy"):
            name = f"{name}{self._order or 2}"
        if name not in self._costs:
            program = getattr(self, "_cost_programs", {}).get(name)
            try:
                self._costs[name] = 1.0 if program is None else evaluation_equivalents(*program)
            except Exception:  # noqa: BLE001
                self._costs[name] = 1.0
        return self._costs[name]

    def _log_prior_fn(self, model_args, model_kwargs):
        ms = self._subsampler

        def fn(flat):
            z = self._unravel(flat)
            return ms.log_prior(ms.constrain(z), model_args, model_kwargs) + ms.log_abs_det_jacobian(z)

        return fn

    def _log_lik_fn(self, model_args, model_kwargs):
        ms = self._subsampler

        def fn(flat, idx, rows=None):  # rows: ModelSubsampler.gather_rows(idx, ...), gathered beforehand
            return ms.log_likelihood(ms.constrain(self._unravel(flat)), idx, model_args, model_kwargs, rows=rows)

        return fn

    def _data_cv_fn(self):
        if not isinstance(self.control_variate, DataSpaceControlVariate):
            return None
        ms, cv = self._subsampler, self.control_variate

        def fn(x, x_new):
            arms = jax.tree.map(lambda a, b: jnp.stack([a, b]),
                                ms.constrain(self._unravel(x)), ms.constrain(self._unravel(x_new)))
            return cv.for_arms(arms)

        return fn

    def _minibatch_objective(self, model_args, model_kwargs):
        lp, ll = self._log_prior_fn(model_args, model_kwargs), self._log_lik_fn(model_args, model_kwargs)
        n, b = self._subsampler.size, min(self.grad_batch_size, self._subsampler.size)

        def objective(flat, key):  # O(b), not O(N)
            return minibatch_log_density(lp, ll, n, random_batch(key, n, b))(flat)

        return objective

    # -- MCMCKernel API -------------------------------------------------------------------
    def _init_states(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else model_kwargs
        self._setup(model_args, model_kwargs)
        self._num_warmup = int(num_warmup)
        self._vectorized = not is_prng_key(rng_key)
        ms = self._subsampler
        check_init_params(init_params, {k: np.shape(v) for k, v in ms.unconstrained_prototype().items()},
                          np.shape(rng_key)[0] if self._vectorized else None)
        source = self._start_source(init_params)
        # one compiled program (the data as its arguments, not as constants): the start,
        # then the full-data log posterior there
        # (init_params themselves are checked: an ascent from a point with an infinite log
        # posterior would hide the user's error)
        def given(p):
            return ravel_pytree({k: jnp.asarray(p[k]) for k in ms.continuous_sites})[0]

        def init_checked(k, p, a, kw):
            state, report = self._init_one(k, p, a, kw, report=True)
            start = ravel_pytree(state.z)[0] if p is None else given(p).astype(ravel_pytree(state.z)[0].dtype)
            return state, report, self._start_values(start[None], a, kw)

        if self._order is None and (self.control_variate != "taylor" or self.race_options["method"] == "exact"):
            self._order = 2  # no proxy residuals to race

        def init_one(key, params):
            # one program per proxy order (the automatic order is chosen after the first chain's init)
            program = jit_with_data(init_checked, model_args, model_kwargs, self._jit_cache,
                                     "init3" if self._order == 3 else "init")
            state, report, checked = program(key, params)
            if self._order is None:
                state, checked = self._choose_order(key, state, report, checked, model_args, model_kwargs)
            return state, report, checked

        if not self._vectorized:
            state, report, checked = init_one(rng_key, init_params)
            start = ravel_pytree(state.z)[0] if init_params is None else given(init_params)
            self._check_chains(start[None], [report], model_args, model_kwargs, source, checked=checked,
                               kinked=_kinked(state))
            self._warn_concentrated(state)
            return state
        # chain_method="vectorized": one state per key, the step is vmapped in `sample`.  The
        # init is not: each chain runs the one-chain program in turn and the states are
        # stacked.  The vmapped init program (mode search, Newton, proxy pass of every chain at
        # once) deadlocked XLA's CPU runtime in about two of three runs of a d = 50 logistic
        # regression with the Langevin proposal (jaxlib 0.10.2; all threads idle, the next
        # dispatch waiting for a compute slot that the init's execution never released), and
        # a chain's init is independent of the others', so nothing is lost but a little
        # vectorisation of a one-off set-up.
        outs = [init_one(key, None if init_params is None else jax.tree.map(lambda v, c=c: v[c], init_params))
                for c, key in enumerate(rng_key)]
        states, checked = jax.tree.map(lambda *v: jnp.stack(v), *[(s, ch) for s, _, ch in outs])
        flats = (jax.vmap(lambda z: ravel_pytree(z)[0])(states.z) if init_params is None
                 else jax.vmap(given)(init_params))
        self._check_chains(flats, [r for _, r, _ in outs], model_args, model_kwargs, source, vectorized=True,
                           checked=jax.tree.map(lambda v: v[:, 0], checked), kinked=_kinked(states))
        self._warn_concentrated(states)
        return states

    @property
    def proxy_order(self) -> Optional[int]:
        """The order of the Taylor proxy in use: ``taylor_order``, or with ``taylor_order=None`` the
        automatic choice (``None`` until the first ``init``, and without a Taylor proxy)."""
        return self._order if self.control_variate == "taylor" else None

    def _choose_order(self, key, state, report, checked, model_args, model_kwargs):
        """``taylor_order=None``: choose 2 or 3 from the first chain's init (see :class:`RacingMH`);
        returns the chain's state (with the third-order proxy when 3 is chosen) and ``checked``."""
        self._order = 2
        se2 = None if report is None else report.get("residual_se")
        if se2 is None or isinstance(se2, jax.core.Tracer) or isinstance(state.center, jax.core.Tracer):
            return state, checked
        n, m, p = self._subsampler.size, self.race_options["first_batch"], int(state.center.shape[0])
        reads2 = _predicted_reads(float(se2), n, m)
        if not (reads2 >= 4 * m and p <= _THIRD_ORDER_MAX_DIMENSION):
            return state, checked
        proxy, ratio, concentrated, se3 = jit_with_data(self._third_order, model_args, model_kwargs)(
            jax.random.fold_in(key, 2), state.proxy, state.center, state.inverse_mass_matrix, state.mass_factor)
        # under jax_enable_x64 the residuals' own heavy tails ((x' D)^4 of Gaussian covariates, rare
        # dummies), hidden by rounding in float32, keep the race's heavy-tail guard reading thousands of
        # points, more so at order 3: order 3 only where its residuals' tails are not much heavier
        if not (reads2 >= 2 * _predicted_reads(float(se3[0]), n, m)
                and float(se3[1]) <= _TAILS_HEAVIER_MAX * float(report["residual_tails"])):
            return state, checked
        self._order = 3
        # (the method is not "exact" here); a mode on the support's edge keeps the exact step
        exact = jnp.asarray(concentrated & self.exact_when_cheaper) | state.support_boundary
        return state._replace(proxy=proxy, residual_spread_ratio=ratio.astype(state.residual_spread_ratio.dtype),
                              exact_mode=exact), checked

    def _third_order(self, key, proxy, center, inv_mass, factor, model_args, model_kwargs):
        """The third-order proxy at ``proxy``'s reference (one pass) and its residual spread on the
        pairs of :meth:`_residual_spread` (``key``: the init's)."""
        n = self._subsampler.size
        proxy3 = taylor_proxy(self._log_lik_fn(model_args, model_kwargs), proxy.reference, n,
                              chunk_size=_proxy_chunk(n, center.shape[0]), order=3)
        ratio, concentrated, se = self._residual_spread(key, proxy3, center, inv_mass, factor, model_args,
                                                        model_kwargs)
        return proxy3, ratio, concentrated, se

    def _residual_spread(self, key, proxy, center, inv_mass, factor, model_args, model_kwargs):
        """``(ratio, concentrated, (se, tails))``: the median ``se_all / se_typical`` of
        :func:`~subsample_mcmc.kernels.proxy.residual_spread` over ``_SPREAD_PAIRS`` pairs of draws from the
        Laplace Gaussian ``N(center, inv_mass)``, and whether it exceeds ``_SPREAD_RATIO_MAX`` with the
        median true stage-1 sd above ``_SPREAD_MIN_NATS``; the medians of ``se_all`` and of the heavy-tail
        guard's minimum sample at the population moments (what the automatic ``taylor_order`` compares).
        One full-data pass of residuals per point."""
        ll = self._log_lik_fn(model_args, model_kwargs)
        p = center.shape[0]
        z = jax.random.normal(key, (_SPREAD_PAIRS, 2, p), center.dtype)
        scale = (lambda v: factor @ v) if factor is not None else (lambda v: jnp.sqrt(inv_mass) * v)
        pts = center + jax.vmap(jax.vmap(scale))(z)
        se_all, se_typ, tails = jax.lax.map(
            lambda ab: residual_spread(ll, proxy, ab[0], ab[1], self._subsampler.size,
                                       self.race_options["first_batch"]), pts)
        ratio = se_all / jnp.maximum(se_typ, jnp.finfo(center.dtype).tiny)
        ratio, se = jnp.median(jnp.where(jnp.isnan(ratio), jnp.inf, ratio)), jnp.median(se_all)
        # a kink in the parameters (a Laplace / quantile likelihood): the proxy's Hessian misses the curvature
        # that the data crossing the kink give, and its residuals sit on those few data (ratio: inf)
        zero = lambda t: jnp.zeros((), t.dtype)  # noqa: E731
        mismatch = curvature_mismatch(lambda pts: log_density_sum(zero, ll, pts, self._subsampler.size), proxy,
                                      center, _KINK_STEP * (pts[:, 0] - center))
        kinked = jnp.median(mismatch) > _KINK_MISMATCH_MAX
        ratio = jnp.where(kinked, jnp.inf, ratio)
        concentrated = ((ratio > _SPREAD_RATIO_MAX) & (se > _SPREAD_MIN_NATS)) | kinked
        return ratio, concentrated, (se, jnp.median(tails))

    def _warn_concentrated(self, states):
        """A warning naming the rare-influential-data check for chains it sent to the exact step."""
        if isinstance(states.exact_mode, jax.core.Tracer) or self.race_options["method"] == "exact":
            return
        ratio = np.atleast_1d(np.asarray(states.residual_spread_ratio))
        exact = np.atleast_1d(np.asarray(states.exact_mode))
        boundary = exact & np.atleast_1d(np.asarray(states.support_boundary))
        observed = getattr(self, "_moving_observed", None)
        if np.any(boundary) and observed and not getattr(self, "_moving_support", None):
            warnings.warn(
                f"RacingMH: {int(boundary.sum())} of {exact.size} chains sample by the exact MH step (N evaluations "
                f"per step): the observed value of site {observed[0]!r} changes with the latent sites and its "
                f"distribution's support is bounded ({observed[1]}), as in obs=y - loc: a proposal can put data "
                "points outside the support, which a race that does not read them would accept (a fresh user's "
                "three-parameter Weibull drew loc above min(y), where the density is 0). NUTS, or the parameters "
                "written into the distribution (Exponential(rate=1 / scale) with obs=y), are the alternatives.",
                UserWarning, stacklevel=4)
        elif np.any(boundary) and not getattr(self, "_moving_support", None):  # (a moving site support is refused)
            warnings.warn(
                f"RacingMH: {int(boundary.sum())} of {exact.size} chains sample by the exact MH step (N evaluations "
                "per step): the full-data log posterior's mode lies on the edge of its support (it is -inf just "
                "beyond), as where the likelihood's support moves with the parameters (a numpyro.factor that is "
                "-inf for y < loc, a shifted or truncated likelihood with an unknown bound). A proposal past that "
                "edge is impossible only through the few data points there, which a race does not read, so racing "
                "would accept it. NUTS, or a likelihood whose support does not depend on the parameters, are the "
                "alternatives.", UserWarning, stacklevel=4)
        exact = exact & ~boundary  # (named above, or refused when sampling: no other reason to give)
        kinked = _kinked(states)  # exact, not at the support's edge, spread ratio inf: the kink check's mark
        if np.any(kinked):
            warnings.warn(
                f"RacingMH: {int(kinked.sum())} of {exact.size} chains sample by the exact MH "
                "step (N evaluations per step): the log-likelihood's second differences at Laplace draws disagree "
                "with its Hessian at the mode (or could not be computed there), as where it is not twice "
                "differentiable in the parameters (a kink: |y - mu| of a Laplace or quantile likelihood, a hinge), "
                "so the Taylor proxy misses the curvature that the data near the kink give, and a race would decide "
                "on those few data without reading them. A smooth model can do this too when the start is far from "
                "the mode (see any warning about the start) or the posterior is far from Gaussian on its own scale "
                "(a funnel: try the other parameterisation). NUTS, or a smooth likelihood, are the alternatives.",
                UserWarning, stacklevel=4)
            exact = exact & ~kinked
        if np.any(exact):
            warnings.warn(
                f"RacingMH: {int(exact.sum())} of {exact.size} chains sample by the exact MH step (N evaluations "
                f"per step): a few data carry most of the Taylor residuals' spread (a first batch of "
                f"{self.race_options['first_batch']} typically sees 1/{float(np.max(ratio[exact])):.0f} of its sd: "
                "rare events in a rare stratum, or a few extreme rows), so a race would decide on a width too "
                "narrow and err beyond delta without any sign in the draws. To race anyway pass "
                "exact_when_cheaper=False (not recommended); NUTS is the alternative. (Other chains may switch "
                "to the exact step at the end of warmup, when their races cost more than N per step: the state's "
                "exact_mode says which.)", UserWarning, stacklevel=4)

    def _start_values(self, flats, model_args, model_kwargs):
        """``(log posterior [C], latents finite [C])`` at the flat starts ``[C, p]`` (one
        full-data pass; traceable)."""
        ms = self._subsampler

        def finite_latents(flat):  # XLA may fold log(exp(u)) = u: check the values too
            leaves = jax.tree.leaves(ms.constrain(self._unravel(flat)))
            return jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in leaves]))

        return self._full_log_posterior(model_args, model_kwargs)[0](flats), jax.vmap(finite_latents)(flats)

    def _check_chains(self, flats, reports, model_args, model_kwargs, source, vectorized=False, checked=None,
                      kinked=None):
        """One full-data pass over all chains' starts (``checked``: already made); the
        term-by-term diagnosis only for a chain whose log posterior is not finite; then
        the search reports (``kinked``: per chain, whether the init's kink check sent it to the exact step)."""
        if isinstance(flats, jax.core.Tracer):
            return  # inside another kernel's vmap: the race flags non-finite values at run time
        if checked is None:
            checked = jit_with_data(self._start_values, model_args, model_kwargs)(flats)
        f, ok = checked
        f, ok = np.asarray(f), np.asarray(ok)
        for c in range(flats.shape[0]):
            chain = c if vectorized else None
            if not (np.isfinite(f[c]) and ok[c]):
                self._check_initial_point(flats[c], model_args, model_kwargs, source, chain)
                fix = ("choose init_params where it is finite (unconstrained values)" if source == "init_params"
                       else "pass init_params (e.g. a draw from a short NUTS run on a subset of the data)")
                raise ValueError(f"the log posterior is {f[c]} at the start{'' if chain is None else f' of chain {c}'} "
                                 f"({source}); {fix}")
            self._check_search(reports[c], model_args, model_kwargs, chain, one_ascent_from=(
                None if source.startswith("init_strategy='map'") else
                "init_params" if source == "init_params" else "a prior draw (init_strategy='prior')"),
                kinked=kinked is not None and bool(kinked[c]))

    def _start_source(self, init_params):
        if init_params is not None:
            return "init_params"
        if self.init_strategy == "prior":
            return f"init_strategy='prior', up to {_MAX_DRAWS} prior draws"
        return (f"init_strategy='map': the best of {self.num_restarts} restarts, each drawn up to "
                f"{_MAX_DRAWS} times until finite")

    def _init_one(self, rng_key, init_params, model_args, model_kwargs, report=False):
        """One chain's initial state; with ``report``, also the mode search's diagnostics
        (``None`` when no search ran).  Traceable (vmapped over chains)."""
        ms = self._subsampler
        key_init, key_map, key_state = jax.random.split(rng_key, 3)
        if init_params is None:
            flat, unravel = ravel_pytree(ms.unconstrained_prototype())
        else:
            flat, unravel = ravel_pytree({k: jnp.asarray(init_params[k]) for k in ms.continuous_sites})
        self._unravel = unravel
        lp = self._log_prior_fn(model_args, model_kwargs)
        search = None
        if init_params is None and self.init_strategy == "prior":
            # a prior draw, redrawn until the full-data log posterior is finite
            flat = jax.jit(lambda k: self._finite_draws(
                k, None, init_to_sample, 1, model_args, model_kwargs)[0][0])(key_init)
        if init_params is None and self.init_strategy == "map":
            search = jit_with_data(self._mode_search, model_args, model_kwargs)(key_map)
            flat = search["mode"]
        elif self.control_variate == "taylor":
            # init_params or a prior draw: one ascent from there; the chain, the proxy and the
            # Laplace covariance start at the mode it reaches (the start chooses the basin).
            # Expanded at a start far from the mode, the proxy's residuals are of the size of the
            # log-likelihood and its Hessian is the tail's curvature: races read most of the data
            # and the mass matrix (full-data, so not re-estimated) mis-scales every move.  Started
            # far out with the proxy at the mode, a chain still stalls: Crank-Nicolson's moves keep
            # the radius, and where the posterior falls off slower than its Laplace Gaussian (a
            # log link's linear side) nearly all are rejected and the step size collapses
            search = jit_with_data(lambda k, x, a, kw: self._mode_search(k, a, kw, start=x),
                                   model_args, model_kwargs)(key_map, flat)
            flat = search["mode"]
        proxy = None
        if search is not None:  # proxy and curvature at the searched mode
            proxy = search["proxy"] if self.control_variate == "taylor" else None
            precision = _precision(search)
        else:
            # the mini-batch Hessian at the start, scaled to N
            objective = self._minibatch_objective(model_args, model_kwargs)
            precision = -jax.jit(jax.hessian(objective))(flat, key_map)
        d = flat.shape[0]
        inv_mass = inverse_mass(precision, self._is_dense(d))
        center = flat if search is None else search["mode"]
        self._mass_from_full_data = search is not None
        factor = jnp.linalg.cholesky(inv_mass.astype(flat.dtype)) if inv_mass.ndim == 2 else None
        use_cn = jnp.asarray(self._proposal.name == "crank_nicolson")
        k_hat = jnp.asarray(jnp.nan, flat.dtype)
        if self._automatic_proposal and proxy is not None:
            # prior + the proxy's quadratic sum against the Laplace t: no data read
            # the quadratic part: a third-order term is unbounded above along some direction
            quadratic = proxy._replace(third_sum=None)
            k_hat = reference_k_hat(jax.random.fold_in(rng_key, 1), lambda v: lp(v) + proxy_sum(quadratic, v),
                                    center.astype(flat.dtype), inv_mass.astype(flat.dtype), cholesky=factor)
            use_cn = k_hat <= K_HAT_MAX
        exact_mode = jnp.asarray(self.race_options["method"] == "exact")
        spread = jnp.asarray(jnp.nan, flat.dtype)
        se = (spread, spread)
        if (proxy is not None and self.race_options["method"] != "exact"
                and (self.exact_when_cheaper or self._order is None)):
            spread, concentrated, se = self._residual_spread(jax.random.fold_in(rng_key, 2), proxy, center,
                                                             inv_mass, factor, model_args, model_kwargs)
            if self.exact_when_cheaper:
                exact_mode = exact_mode | concentrated
        # the mode on a support boundary of the full-data log posterior (the unconstrained latents have none
        # of their own): a likelihood whose support moves with the parameters, e.g. a numpyro.factor that is
        # -inf for y < loc. A proposal beyond it is impossible through the few data points there, which a
        # race does not read: it would accept it. The exact step reads them all (whatever exact_when_cheaper)
        boundary = jnp.asarray(False) if search is None else jnp.asarray(search["at_boundary"])
        boundary = boundary | (getattr(self, "_moving_observed", None) is not None)
        if self.race_options["method"] != "exact":
            exact_mode = exact_mode | boundary
        if self._step_size:
            step = jnp.asarray(self._step_size, flat.dtype)
        else:
            step = jnp.where(use_cn, 1.0, self._initial_step_size(d)).astype(flat.dtype)
        state = RacingMHState(
            i=jnp.array(0),
            z=unravel(flat),
            step_size=step,
            inverse_mass_matrix=inv_mass.astype(flat.dtype),
            accept_prob=jnp.zeros(()),
            mean_accept_prob=jnp.zeros(()),
            num_likelihood_evals=jnp.array(0, jnp.int32),
            race_stage=jnp.array(0, jnp.int32),
            da_state=_DA_INIT(jnp.log(step)),
            welford_state=self._welford[0](d),
            proxy=proxy,
            rng_key=key_state,
            exact_mode=exact_mode,
            log_lik_sum=jnp.asarray(jnp.nan, flat.dtype),
            race_cost=jnp.zeros((), flat.dtype),
            center=center.astype(flat.dtype),
            mass_factor=factor,
            crank_nicolson=use_cn,
            laplace_k_hat=k_hat,
            residual_spread_ratio=spread,
            support_boundary=boundary,
            window_moments=jnp.zeros((2, d), flat.dtype),
            window_accepts=jnp.zeros((), flat.dtype),
        )
        if not report:
            return state
        if search is not None:
            search = {k: v for k, v in search.items() if k not in ("proxy", "gradient")}
            search["residual_se"], search["residual_tails"] = se
        return state, search

    def _initial_step_size(self, d: int) -> float:
        """Optimal-scaling starts: Langevin ``d^(-1/6)``, random walk ``2.38 / sqrt(d)``
        (Roberts & Rosenthal 2001); Crank-Nicolson ``eps = 1`` (``rho = 0.71``)."""
        if self._proposal.uses_center:
            return 1.0
        return 1.0 * d ** (-1 / 6) if self._proposal.uses_gradient else 2.38 / np.sqrt(d)

    # -- the start: NumPyro initial points, mini-batch restarts, full-data check --------------
    def _draw(self, key, init_fn, model_args, model_kwargs):
        """A flat unconstrained point from a NumPyro init strategy (``init_to_uniform``,
        ``init_to_median``, ``init_to_sample``), the model run on one datum (O(1) in N)."""
        ms = self._subsampler
        idx = np.zeros((1,), np.int32)
        args, kwargs = ms._slice(idx, model_args, dict(model_kwargs))
        model = handlers.substitute(handlers.seed(ms.model, key), substitute_fn=init_fn)
        model = PlateIndices(model, name=ms.plate, indices=jnp.asarray(idx), size=ms.size)
        tr = handlers.trace(model).get_trace(*args, **kwargs)
        return ravel_pytree(ms.unconstrain({k: tr[k]["value"] for k in ms.continuous_sites}))[0]

    def _full_log_posterior(self, model_args, model_kwargs):
        lp, ll = self._log_prior_fn(model_args, model_kwargs), self._log_lik_fn(model_args, model_kwargs)
        n = self._subsampler.size

        def values(points):
            return log_density_sum(lp, ll, points, n)

        return values, lambda x: values(x[None])[0]

    def _finite_draws(self, key, first_fn, rest_fn, count, model_args, model_kwargs):
        """``count`` points from ``rest_fn`` (the first of them, in the first round, from
        ``first_fn`` when given), each drawn again (at most ``_MAX_DRAWS`` rounds, one
        full-data pass of the ``count`` points per round) until its full-data log
        posterior is finite.  Returns ``(points [count, p], values [count], rounds)``."""
        values, _ = self._full_log_posterior(model_args, model_kwargs)

        def draw_all(k, first_round):
            k0, k1 = jax.random.split(k)
            pts = jax.vmap(lambda kk: self._draw(kk, rest_fn, model_args, model_kwargs))(jax.random.split(k1, count))
            if first_fn is not None:
                first = jax.lax.cond(first_round, lambda: self._draw(k0, first_fn, model_args, model_kwargs),
                                     lambda: pts[0])
                pts = pts.at[0].set(first)
            return pts

        def cond(c):
            return jnp.any(~jnp.isfinite(c[1])) & (c[3] < _MAX_DRAWS)

        def body(c):
            pts, vals, key, r = c
            key, sub = jax.random.split(key)
            new = draw_all(sub, r == 0)
            new_vals = values(new)
            redo = ~jnp.isfinite(vals)
            return (jnp.where(redo[:, None], new, pts), jnp.where(redo, new_vals, vals), key, r + 1)

        shape = jax.eval_shape(lambda k: draw_all(k, True), key)
        init = (jnp.zeros(shape.shape, shape.dtype), jnp.full((count,), -jnp.inf, shape.dtype), key,
                jnp.zeros((), jnp.int32))
        pts, vals, _, rounds = jax.lax.while_loop(cond, body, init)
        return pts, vals, rounds

    def _mode_search(self, key, model_args, model_kwargs, start=None):
        """Restarts (vmapped mini-batch Adam), the best by the full-data log posterior,
        safeguarded Newton, gradient/curvature check.  Traceable; one compilation.  With a
        flat ``start`` (``init_params``): one ascent, from there."""
        ms = self._subsampler
        r = self.num_restarts if start is None else 1
        n = ms.size
        lp, ll = self._log_prior_fn(model_args, model_kwargs), self._log_lik_fn(model_args, model_kwargs)
        values, value = self._full_log_posterior(model_args, model_kwargs)
        objective = self._minibatch_objective(model_args, model_kwargs)
        key_draw, key_adam = jax.random.split(key)
        if start is None:
            starts, f_starts, rounds = self._finite_draws(key_draw, init_to_mean,
                                                          init_to_uniform(radius=2.0), r, model_args, model_kwargs)
        else:
            starts = start[None]
            f_starts, rounds = values(starts), jnp.zeros((), jnp.int32)
        # two Adam phases (constant rate, then decaying), every restart, one compiled loop
        def phase(x, xs):
            rates, k = xs
            return jax.vmap(lambda x0, kk: adam_ascent(objective, x0, kk, rates))(x, jax.random.split(k, r)), None

        ends, _ = jax.lax.scan(phase, starts, (adam_schedule(self.map_steps), jax.random.split(key_adam, 2)))
        f_ends = values(ends)
        # mini-batches cannot see a data-dependent support (Uniform(0, theta)): an ascent
        # that ends where the full-data log posterior is not finite goes back along its
        # path (from the restart's finite initial point) to the last finite point
        off = ~jnp.isfinite(f_ends) & jnp.isfinite(f_starts)
        back, f_back = last_finite(values, starts, ends, f_starts, off)
        ends, f_ends = jnp.where(off[:, None], back, ends), jnp.where(off, f_back, f_ends)
        f_starts = jnp.where(jnp.isfinite(f_starts), f_starts, -jnp.inf)
        f_ends = jnp.where(jnp.isfinite(f_ends), f_ends, -jnp.inf)
        use_end = f_ends >= f_starts
        cand = jnp.where(use_end[:, None], ends, starts)
        f_cand = jnp.where(use_end, f_ends, f_starts)
        best = jnp.argmax(f_cand)
        flat_size = starts.shape[1]

        chunk = _proxy_chunk(n, flat_size)

        def grad_hess(x):
            prx = taylor_proxy(ll, x, n, chunk_size=chunk)
            return prx.grad_sum + jax.grad(lp)(x), prx.hess_sum + jax.hessian(lp)(x), prx

        # the line search compares values of one function: the batched pass over the restarts
        # sums in another order, and in float32 at N ~ 1e6 the two differ by more than a
        # Newton step gains (military: no step accepted from a point 29 nats below the mode)
        f_best = value(cand[best])
        f_best = jnp.where(jnp.isfinite(f_best), f_best, f_cand[best])
        # one ascent from a given start has no other restart to fall back on: Newton may take
        # more steps there (it stops once converged).  A Poisson regression started at
        # init_params far out (exp-link counts ~e^8 too large) needed 19 after the Adam phases
        steps = self.newton_steps if start is None else max(self.newton_steps, _ONE_ASCENT_NEWTON_STEPS)
        mode, grad, hess, proxy, info = newton_ascent(value, grad_hess, cand[best], f_best, steps)
        if self._order == 3:  # the third-order sums at the polished mode: one more pass
            proxy = taylor_proxy(ll, mode, n, chunk_size=chunk, order=3)
        # squared Mahalanobis distance of each restart's end from the mode
        delta = cand - mode
        dist2 = -jnp.einsum("ri,ij,rj->r", delta, hess, delta)
        return dict(mode=mode, proxy=proxy, hessian=hess, gradient=grad, restart_values=f_cand,
                    restart_distances=dist2, restart_ends=cand,
                    restart_rounds=rounds, best=best,
                    value=info.value, newton_steps=info.steps, at_boundary=info.at_boundary, held=info.held,
                    decrement=info.decrement, negative_definite=info.negative_definite)

    def _stationary(self, ends, hessian, tol, model_args, model_kwargs) -> np.ndarray:
        """Which of the restarts' ``ends`` are modes of the full-data log posterior, not ascents that stopped
        on a slope: the Newton decrement at the end in its *own* curvature, ``g'|H|^-1 g`` (``|H|``: the
        Jacobi-scaled Hessian's eigenvalues by magnitude, floored at 1e-6 of the largest), is at most
        :data:`_OWN_DECREMENT_MAX` (a Newton step from there would gain at most half that: the end is within
        about a posterior sd of a stationary point).  Measured in the best mode's curvature instead (the
        check before), unconverged Adam ascents of a unimodal negative binomial regression with an offset,
        where the restarts' curvature differs from the mode's by orders of magnitude, passed as "lower
        modes" on every run; an LKJ Cholesky factor's ascents ended 4,500-12,800 units below a unimodal
        posterior's mode with gradients of norm 2,000-4,500.  A two-component mixture's merged-component
        modes are stationary.  One full-data gradient-and-Hessian pass per end, only when a restart is lower
        (or far).  ``tol`` is unused (kept for the signature).  The decrements are kept in
        ``self._restart_decrements``."""
        def grads(x, args, kwargs):
            _, value = self._full_log_posterior(args, kwargs)
            return jax.vmap(jax.grad(value))(x), jax.lax.map(jax.hessian(value), x)

        g, h = jit_with_data(grads, model_args, model_kwargs)(jnp.asarray(ends))
        dec = np.array([_own_decrement(gi, hi) for gi, hi in zip(np.asarray(g, np.float64),
                                                                   np.asarray(h, np.float64))])
        self._restart_decrements = dec
        return dec <= _OWN_DECREMENT_MAX  # NaN gradients: not a mode

    def _check_search(self, report, model_args, model_kwargs, chain=None, one_ascent_from=None, kinked=False):
        """Warnings (or an error) from the mode search's report; nothing when traced.
        ``one_ascent_from``: the start's source when the search was one ascent from it; ``kinked``: the
        chain's kink check fired (the Newton measure of a mode then says little, and the advice changes)."""
        if report is None or any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves(report)):
            return
        rep = {k: np.asarray(v) for k, v in report.items()}
        of_chain = "" if chain is None else f" (chain {chain})"
        held = int(np.sum(rep["held"]))
        if rep["at_boundary"] and held >= 2:
            # the search holds coordinates, it cannot slide along a slanted edge: a regression with one-sided
            # errors (y > a + b x) left chains at different points of the edge, R-hat 40
            warnings.warn(
                f"RacingMH start{of_chain}: the edge of the full-data log posterior's support holds {held} "
                "parameters at once at the start (an edge not along one parameter, such as y > a + b x for all "
                "data): the mode search cannot slide along it, so the start may not be the mode, and the exact "
                "MH walk there can stay near where it starts. Run several chains and check R-hat; NUTS is the "
                "alternative.", UserWarning, stacklevel=4)
        if one_ascent_from is not None:  # no restarts to compare
            dec = float(rep["decrement"])
            if not _unmeasured_at_edge(rep) and not dec <= 1.0:
                warnings.warn(
                    f"RacingMH start{of_chain}: the ascent from {one_ascent_from} did not reach a mode of the "
                    f"full-data log posterior (Newton decrement g'(-H)^-1 g = {dec:.4g} after "
                    f"{int(rep['newton_steps'])} Newton steps, want < 1); the chain, the Taylor proxy and the "
                    "Laplace covariance start at the best point it reached, away from the posterior's bulk, so "
                    "warmup may not reach it. " + (_KINKED_START if kinked else
                    "Raise map_steps or newton_steps, or use init_strategy='map' without init_params (the best of "
                    "num_restarts ascents)."), UserWarning, stacklevel=4)
            return
        role = "the start"
        if not np.isfinite(rep["value"]):
            # name the non-finite term at the best point the search had
            self._check_initial_point(rep["mode"], model_args, model_kwargs, self._start_source(None), chain)
            raise ValueError(f"the mode search{of_chain} found no point with a finite log posterior; pass "
                             "init_params (e.g. a draw from a short NUTS run on a subset of the data)")
        f, r = rep["restart_values"], self.num_restarts
        top = max(float(np.max(f)), float(rep["value"]))
        gap, dist2 = top - f, rep["restart_distances"]
        # a restart ended at another, lower mode when it is lower than the best by more
        # than _MODE_TOL per parameter, higher than the best mode's quadratic bowl
        # predicts at its distance (gap ~ dist2 / 2 there), and stationary (_stationary):
        # not an unconverged ascent
        p = max(1, int(np.size(rep["mode"])))
        tol = _MODE_TOL * p
        lower = np.flatnonzero(np.isfinite(f) & (gap > tol) & ~(gap >= dist2 / 8))
        # restarts as high as the best but far from it: modes of equal height, as a symmetry of the model makes
        # them (mu and -mu of y ~ N(mu^2, s)); a fresh user's chains all sat at +mu, P(mu < 0) = 0
        twins = np.flatnonzero(np.isfinite(f) & (gap <= tol) & (dist2 > _TWIN_DISTANCE2 * p))
        ends = np.union1d(lower, twins)  # either kind is a mode only where stationary: one gradient pass for both
        if ends.size:
            stationary = ends[self._stationary(rep["restart_ends"][ends], rep["hessian"], tol, model_args, model_kwargs)]
            lower, twins = np.intersect1d(lower, stationary), np.intersect1d(twins, stationary)
        if lower.size:
            gaps = ", ".join(f"{g:.4g}" for g in gap[lower])
            warnings.warn(
                f"RacingMH start{of_chain}: {lower.size} of {r} restarts of the mode search ended at other, lower "
                f"modes (full-data log posterior lower by {gaps}; each a converged stationary point, Newton "
                "decrement g'|H|^-1 g <= 1 in its own curvature, not an ascent stopped on a slope, which is not "
                f"reported); {role} is the best of them (restart {int(rep['best'])}). The posterior is "
                "multimodal and a higher mode may have been missed: "
                "raise num_restarts, or pass init_params (e.g. a draw from a short NUTS run on a subset of "
                "the data).", UserWarning, stacklevel=4)
        if twins.size:
            far = float(np.sqrt(np.max(dist2[twins]) / p))
            warnings.warn(
                f"RacingMH start{of_chain}: {twins.size} of {r} restarts of the mode search ended at other modes as "
                f"high as {role} (within {tol:g} of its log posterior) but far from it (up to {far:.3g} posterior "
                "sds per parameter, in the curvature at the start): the posterior has several modes of equal "
                "height, as a symmetry of the model makes them (mu and -mu when the data see only mu^2, "
                "relabelled mixture components). A chain stays in the mode it starts in, so its draws miss the "
                "other modes' mass whatever num_restarts is. Break the symmetry in the model (a sign or an "
                "ordering constraint, e.g. an ordered transform) or use a sampler that moves between modes.",
                UserWarning, stacklevel=4)
        dec = float(rep["decrement"])
        if not _unmeasured_at_edge(rep) and not dec <= 1.0:
            curv = ("negative definite" if rep["negative_definite"]
                    else "not negative definite (not a local maximum, or a flat direction)")
            warnings.warn(
                f"RacingMH start{of_chain}: {role} is not a mode of the full-data log posterior: after "
                f"{int(rep['newton_steps'])} safeguarded Newton steps the gradient is large against the "
                f"curvature (Newton decrement g'(-H)^-1 g = {dec:.4g}, want < 1; the Hessian is {curv}). " +
                (_KINKED_START if kinked else "Raise map_steps or newton_steps, or pass init_params (e.g. a draw "
                 "from a short NUTS run on a subset of the data)."), UserWarning, stacklevel=4)

    def _prior_terms(self, z, model_args, model_kwargs):
        """Each log-prior term at unconstrained ``z``: per latent (or observed non-data)
        site, and each transform's log-Jacobian; the model run on one datum."""
        ms = self._subsampler
        tr = ms._trace(ms.constrain(z), jnp.zeros((1,), jnp.int32), model_args, model_kwargs)
        terms = {f"log prior of site {name!r}": v for name, v in ms._prior_terms(tr).items()}
        for k, u in z.items():
            t = ms.transforms[k]
            terms[f"log-Jacobian of the transform of site {k!r}"] = jnp.sum(t.log_abs_det_jacobian(u, t(u)))
        return terms

    def _check_initial_point(self, flat, model_args, model_kwargs, source="init_params", chain=None):
        """Raise, naming the term, where the log posterior is not finite at ``flat``:
        a latent value, a prior (or Jacobian) term, or an observed site's log-likelihood
        at some data index.  Nothing when traced (vectorised chains inside another
        kernel: the race flags non-finite values at run time)."""
        if isinstance(flat, jax.core.Tracer):
            return
        ms = self._subsampler
        at = f"at the start{'' if chain is None else f' of chain {chain}'} ({source})"
        hint = ("choose init_params where the log posterior is finite (they are unconstrained values: the log "
                "of a positive parameter, for instance)" if source == "init_params" else
                "pass init_params (e.g. a draw from a short NUTS run on a subset of the data)")
        z = self._unravel(jnp.asarray(flat))
        values = ms.constrain(z)
        for k in ms.continuous_sites:
            u, v = np.asarray(z[k]), np.asarray(values[k])
            if not (np.all(np.isfinite(u)) and np.all(np.isfinite(v))):
                raise ValueError(f"the latent site {k!r} is not finite {at}: value {v} (unconstrained {u}); {hint}")
        terms = jax.jit(lambda z: self._prior_terms(z, model_args, model_kwargs))(z)
        for what, val in terms.items():
            if not np.isfinite(float(val)):
                vals = {k: np.asarray(v) for k, v in values.items()}
                raise ValueError(f"the {what} is {float(val)} {at}, with latent values {vals}; check the "
                                 f"prior's support or {hint}")
        n = ms.size
        chunk = min(1 << 16, n)

        @jax.jit
        def per_site(values, start):
            idx = jnp.minimum(start + jnp.arange(chunk), n - 1)
            tr = ms._trace(values, idx, model_args, model_kwargs)
            return idx, [ms._per_datum(tr[name], idx.shape[0], tr) for name in ms.data_sites]

        bad_count = {name: 0 for name in ms.data_sites}
        first = {}
        for start in range(0, n, chunk):
            idx, pers = per_site(values, start)
            valid = np.arange(start, start + chunk) < n
            for name, per in zip(ms.data_sites, pers):
                bad = ~np.isfinite(np.asarray(per)) & valid
                if bad.any():
                    bad_count[name] += int(bad.sum())
                    j = int(np.argmax(bad))
                    first.setdefault(name, (int(np.asarray(idx)[j]), float(np.asarray(per)[j])))
        for name in ms.data_sites:
            if bad_count[name]:
                i, v = first[name]
                vals = {k: np.asarray(v_) for k, v_ in values.items()}
                missing = [repr(name) for name, _ in ms.nan_arguments(model_args, model_kwargs, index=i)]
                why = (f"the data are missing there: {', '.join(missing)} is NaN at index {i}; drop or impute "
                       "rows with missing values before sampling" if missing else
                       "the data lie outside the likelihood's support there, or the likelihood overflows at "
                       "these latent values: check the data or " + hint)
                raise ValueError(
                    f"the log-likelihood of observed site {name!r} is not finite {at}: {v} at data index "
                    f"{i} (first of {bad_count[name]} of {n} data points), with latent values {vals}; {why}")

    def sample(self, state, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else model_kwargs
        self._setup(model_args, model_kwargs)
        if getattr(self, "_moving_support", None):
            name, kind = self._moving_support
            raise ValueError(
                f"observed site {name!r} has a support that moves with the parameters ({kind}); "
                "a race cannot see the data points a proposal puts outside the support without "
                "reading all of them, so RacingMH would accept impossible proposals. Sample this "
                "model with NUTS/HMC (numpyro.infer.NUTS), or reparameterise it so that the support "
                "of the likelihood does not depend on the latent sites"
            )
        if getattr(self, "_vectorized", False):
            new = jax.vmap(self._sample_one, in_axes=(0, None, None))(state, model_args, model_kwargs)
        else:
            new = self._sample_one(state, model_args, model_kwargs)
        return self._check_mixing(new)

    def _mixing_window(self):
        """``(start, end)``: the last quarter of warmup (step size final where the race's cost is measured),
        over which the poor-mixing check sums; empty when it would hold fewer than ``_MIXING_MIN_STEPS``."""
        nw = self._num_warmup
        start = (3 * nw) // 4
        return (nw, nw) if nw - start < _MIXING_MIN_STEPS else (start, nw)

    def _check_mixing(self, state):
        """At the end of warmup (the step whose new ``i`` is ``num_warmup``), once: the window's acceptance
        and the spread of its draws against the Laplace covariance, read on the host
        (:func:`_warn_poor_mixing`).  One ``jax.debug.callback`` in a real branch (``i`` is shared by the
        chains), nothing on the other steps.  Not for a block of another kernel (:meth:`wrap_model` turns
        ``check_mixing`` off: RacingGibbs, NumPyro's Gibbs) nor for ModelSelection's steps (``_sample_one``)."""
        start, end = self._mixing_window()
        if start == end or state.window_moments is None or not getattr(self, "check_mixing", True):
            return state
        full = bool(getattr(self, "_mass_from_full_data", False)) and not self._reestimate_mass
        steps = end - start

        def report(_):
            jax.debug.callback(functools.partial(_warn_poor_mixing, steps=steps, laplace=full),
                               state.window_moments, state.window_accepts, state.inverse_mass_matrix,
                               state.crank_nicolson, state.exact_mode)

        i = jnp.ravel(state.i)[0]
        jax.lax.cond(i == end, report, lambda _: None, None)
        return state

    def _sample_one(self, state, model_args, model_kwargs, control_variate_fn=None, exact_log_likelihood_fn=None):
        """One step of one chain; ``control_variate_fn`` (``(x, x') -> ArmControlVariates``, given by
        :class:`~subsample_mcmc.ModelSelection`'s ``control_variate``) replaces the race's control variate,
        and ``exact_log_likelihood_fn`` (``x -> [|E|]``) reads its exactly-read points from rows the caller
        gathered once."""
        ms = self._subsampler
        if self._unravel is None:
            self._unravel = ravel_pytree(state.z)[1]
        flat, _ = ravel_pytree(state.z)
        key, key_step = jax.random.split(state.rng_key)
        b = min(self.grad_batch_size, ms.size)
        gradient_cost = self._cost("gradient") if self._proposal.uses_gradient else 1.0
        proposal = self._proposal
        if self._automatic_proposal:  # the choice made at init, carried in the state
            # Crank-Nicolson around the defensive mixture (1 - a) N + a t_5, a = min(1, 2 / p)
            proposal = either(state.crank_nicolson, self._proposal,
                              crank_nicolson(t_weight=defensive_t_weight(flat.shape[0])))
        kernel_options = dict(proposal=proposal, grad_batch_size=b, gradient_point_cost=gradient_cost)
        call = dict(log_prior_fn=self._log_prior_fn(model_args, model_kwargs),
                    log_likelihood_fn=self._log_lik_fn(model_args, model_kwargs), population_size=ms.size,
                    step_size=state.step_size, proxy=state.proxy, center=state.center,
                    inverse_mass_matrix=preconditioner(state.inverse_mass_matrix, flat, state.mass_factor))
        race_step = mh_kernel.build_kernel(point_cost=self._cost("point"), max_race_fraction=self.max_race_fraction,
                                           **kernel_options, **self.race_options)
        exact_step = mh_kernel.build_kernel(**dict(kernel_options, method="exact"))

        def race(_):
            cv_fn = self._data_cv_fn() if control_variate_fn is None else control_variate_fn
            new, info = race_step(key_step, mh_kernel.init(flat), control_variate_fn=cv_fn,
                                  exact_log_likelihood_fn=exact_log_likelihood_fn, **call)
            return new.position, new.log_likelihood_sum, info

        def exact(_):
            new, info = exact_step(key_step, mh_kernel.init(flat, state.log_lik_sum), **call)
            return new.position, new.log_likelihood_sum, info

        if self.race_options["method"] == "exact":  # the exact MH step, current sum cached
            new_flat, ll_sum, info = exact(None)
        elif self.exact_when_cheaper:
            # each branch runs only when taken (while_loops: real branches under vmap too); the
            # carry's shapes come from the exact step, cheaper to trace than the race
            blank = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(exact, None))
            by_race = _run_at_most_once(~state.exact_mode, race, blank)
            by_exact = _run_at_most_once(state.exact_mode, exact, blank)
            new_flat, ll_sum, info = jax.tree.map(lambda e, r: jnp.where(state.exact_mode, e, r), by_exact, by_race)
        else:
            new_flat, ll_sum, info = race(None)
        accept = info.accepted.astype(flat.dtype)
        i = state.i + 1
        n = i.astype(flat.dtype)
        mean_accept = state.mean_accept_prob + (accept - state.mean_accept_prob) / n
        step, inv_mass, da, wf = state.step_size, state.inverse_mass_matrix, state.da_state, state.welford_state
        nw = self._num_warmup
        if nw > 0 and (self.adapt_step_size or self._reestimate_mass):
            step, inv_mass, center, factor, da, wf = self._adapt(state, new_flat, accept)
        else:
            center, factor = state.center, state.mass_factor
        exact_mode, race_cost = self._choose_mode(state, info, b)
        moments, accepts = state.window_moments, state.window_accepts
        if moments is not None:
            w0, w1 = self._mixing_window()
            inside = (state.i >= w0) & (state.i < w1)
            dx = new_flat - state.center
            moments = moments + jnp.where(inside, jnp.stack([dx, dx * dx]), 0.0).astype(moments.dtype)
            accepts = accepts + jnp.where(inside, accept, 0.0).astype(accepts.dtype)
        return RacingMHState(
            i=i, z=self._unravel(new_flat), step_size=step, inverse_mass_matrix=inv_mass,
            accept_prob=accept, mean_accept_prob=mean_accept,
            num_likelihood_evals=info.num_likelihood_evals.astype(jnp.int32),
            race_stage=info.race_stage.astype(jnp.int32), da_state=da, welford_state=wf,
            proxy=state.proxy, rng_key=key, exact_mode=exact_mode, log_lik_sum=ll_sum, race_cost=race_cost,
            center=center, mass_factor=factor, crank_nicolson=state.crank_nicolson, laplace_k_hat=state.laplace_k_hat,
            residual_spread_ratio=state.residual_spread_ratio, support_boundary=state.support_boundary,
            window_moments=moments, window_accepts=accepts,
        )

    def _cost_window(self):
        """``(start, end)`` of the warmup steps over which the race's cost is measured at
        the final step size (the last quarter of warmup, at least 10 steps; empty when
        ``exact_when_cheaper`` is off or warmup is shorter than 40 steps)."""
        nw = self._num_warmup
        start = (3 * nw) // 4
        if not self.exact_when_cheaper or nw - start < 10:
            return nw, nw
        return start, nw

    def _choose_mode(self, state, info, grad_batch):
        """Race or exact step for the sampling phase, decided once at the end of warmup.

        Over the last quarter of warmup (the mass matrix and the step size are then
        final: step-size adaptation ends at three quarters of warmup) the race's cost per step -- ``num_likelihood_evals``
        less the Langevin gradients, in likelihood-evaluation units -- is averaged; if
        it exceeds ``N``, the cost of the exact step with the current point's
        log-likelihood sum cached (:func:`~subsample_mcmc.kernels.mh.build_kernel` with ``method="exact"``),
        the chain samples with the exact step from then on.  A decision from the warmup
        only, so the sampling phase is one fixed (time-homogeneous) kernel."""
        nw = self._num_warmup
        start, _ = self._cost_window()
        if start == nw:
            return state.exact_mode, state.race_cost
        t = state.i
        grads = (2 * grad_batch * self._cost("gradient")) if self._proposal.uses_gradient else 0.0
        race_evals = info.num_likelihood_evals.astype(state.race_cost.dtype) - grads
        race_cost = state.race_cost + jnp.where((t >= start) & (t < nw) & ~state.exact_mode, race_evals, 0.0)
        decide = t == nw - 1
        exact_mode = state.exact_mode | (decide & (race_cost / (nw - start) > self._subsampler.size))
        return exact_mode, race_cost

    def _adapt(self, state, new_flat, accept):
        nw = self._num_warmup
        t = state.i  # index of this step
        # the step size is final when the race's cost is measured (see _choose_mode)
        adapt_end = self._cost_window()[0]
        in_warmup = t < adapt_end
        step, inv_mass, da, wf = state.step_size, state.inverse_mass_matrix, state.da_state, state.welford_state
        center, factor = state.center, state.mass_factor
        if self.adapt_step_size:
            target = self.target_accept_prob
            if self._automatic_proposal and self._user_target_accept is None:
                target = jnp.where(state.crank_nicolson, _TARGET_ACCEPT["crank_nicolson"], target)
            da_new = _DA_UPDATE(target - accept, da)
            da = jax.tree.map(lambda a, b: jnp.where(in_warmup, a, b), da_new, da)
            step = jnp.where(in_warmup, jnp.exp(da[0]), step)
            step = jnp.where(t == adapt_end - 1, jnp.exp(da[1]), step)  # final: the averaged iterate
        if self._reestimate_mass:
            start, end = (3 * nw) // 20, nw // 2
            collect = (t >= start) & (t < end)
            wf_new = self._welford[1](new_flat, wf)
            wf = jax.tree.map(lambda a, b: jnp.where(collect, a, b), wf_new, wf)
            finish = t == end - 1
            if end - start >= 10:
                cov, _, _ = self._welford[2](wf, regularize=True)
                inv_mass = jnp.where(finish, cov, inv_mass)
                center = jnp.where(finish, wf[0], center)  # the warmup draws' mean
                if factor is not None:
                    factor = _run_at_most_once(finish, lambda _: jnp.linalg.cholesky(inv_mass), factor)
                da = jax.tree.map(lambda a, b: jnp.where(finish, a, b), _DA_INIT(jnp.log(step)), da)
        return step, inv_mass, center, factor, da, wf

    @property
    def model(self):
        """The model with its subsample plates at full size
        (:class:`~subsample_mcmc.numpyro.model.FullDataModel`; the model itself when it
        has none).  ArviZ's ``from_numpyro`` and ``numpyro.infer.log_likelihood`` replay
        it, so pointwise log-likelihoods of HMCECS-style models cover all N points.
        It compares equal to the model passed to the constructor."""
        from .model import full_data_model

        return full_data_model(self._model)

    @model.setter
    def model(self, model):
        self._model = model

    def postprocess_fn(self, model_args, model_kwargs):
        """Constrained values and the deterministic sites, as NUTS returns them: sites
        inside the data plate (and outside it but depending on the data) come from one
        run of the model on all the data per draw (O(N), as with NUTS), the others from
        a run on one datum (see :meth:`ModelSubsampler.deterministic`)."""
        model_kwargs = {} if model_kwargs is None else model_kwargs
        ms = self._setup(model_args, model_kwargs)

        def fn(z):
            values = ms.constrain(z)
            return {**values, **ms.deterministic(values, model_args, model_kwargs)}

        return fn

    @property
    def refresh_likelihood_evals(self) -> int:
        """What one :meth:`refresh` computes, in likelihood-evaluation units: with the
        Taylor proxy, a gradient and a Hessian at every datum (``N`` times the calibrated
        per-datum cost); 0 without a proxy.  Composite kernels add it to their step's
        ``num_likelihood_evals`` when they refresh."""
        if self.control_variate != "taylor" or self._subsampler is None:
            return 0
        return int(round(self._subsampler.size * self._cost("proxy")))

    def refresh(self, state, model_args, model_kwargs):
        """Recompute what is cached for new conditioning values (``model_kwargs``): the
        proxy's full-data sums (one pass over the data) and, in exact mode, the current
        point's log-likelihood sum (dropped; the next exact step recomputes it)."""
        model_kwargs = {} if model_kwargs is None else model_kwargs
        self._setup(model_args, model_kwargs)
        ll = self._log_lik_fn(model_args, model_kwargs)

        def one(st):
            st = st._replace(log_lik_sum=jnp.full_like(st.log_lik_sum, jnp.nan))
            if st.proxy is None:
                return st
            return st._replace(proxy=taylor_proxy(ll, st.proxy.reference, self._subsampler.size,
                                                  order=2 if st.proxy.third_sum is None else 3))

        return jax.vmap(one)(state) if getattr(self, "_vectorized", False) else one(state)

    def wrap_model(self, wrapper):
        """A copy running on ``wrapper(model)`` (NumPyro's composable-kernel API: a block of
        NumPyro's ``Gibbs`` or of :class:`~subsample_mcmc.numpyro.RacingGibbs`).  A block's
        conditional moves with the other blocks, away from any centre fixed at ``init``, and
        a centred proposal would stick there: the default proposal of a block is the
        random walk, and an explicit centred one warns."""
        new = copy.copy(self)
        # a block's step runs inside its caller's step, vmapped over the chains there: the end-of-warmup
        # check's branch would run on every step (a batched predicate) and its window belongs to the caller
        new.check_mixing = False
        if self._automatic_proposal:
            new._automatic_proposal = False
            new._set_proposal("random_walk")
        elif self._proposal.uses_center:
            warnings.warn(
                f"RacingMH(proposal={self.proposal!r}) as a block of a Gibbs kernel moves around the mode of the "
                "conditional met at init; when the other blocks move the conditional, the chain sticks. Leave "
                "proposal unset (a block then uses the random walk) or pass proposal='random_walk'.",
                UserWarning, stacklevel=2)
        new._gibbs_block = True
        new.model = wrapper(self._model)
        new._subsampler = None
        new._unravel = None
        new._jit_cache = {}
        return new

    def get_diagnostics_str(self, state):
        exact = float(jnp.mean(state.exact_mode))
        cn = float(jnp.mean(state.crank_nicolson))
        if cn > 0:  # Crank-Nicolson's eps can be inf (independence draws): show rho = 1 / sqrt(1 + eps^2)
            rho = float(jnp.mean(1.0 / jnp.sqrt(1.0 + jnp.asarray(state.step_size, jnp.float32) ** 2)))
            move = "pCN-t rho {:.2f}".format(rho) + ("" if cn == 1 else f" in {cn:.0%}")
        else:
            move = "step {:.2e}".format(float(jnp.mean(state.step_size)))
        return "{}, acc. {:.2f}, evals/step {}{}".format(
            move, float(jnp.mean(state.mean_accept_prob)),
            int(jnp.mean(state.num_likelihood_evals)),
            "" if exact == 0 else (", exact MH (racing cost more)" if exact == 1 else f", exact MH in {exact:.0%}"),
        )

    @property
    def default_fields(self):
        return ("z",)


#: the start warnings' advice for a chain that the kink check sent to the exact step: at a kink Newton's measure
#: never settles (|y - mu| has gradient jumps and Hessian 0), so "raise newton_steps" was a red herring that two
#: fresh users followed
_KINKED_START = ("This chain's log-likelihood was also found kinked (the warning below): at a kink the gradient "
                 "jumps and the Hessian misses the curvature, so the Newton decrement stays large even at the mode "
                 "and more Newton steps will not lower it. The chain samples by the exact MH step, whose warmup "
                 "moves from this start; if the likelihood is smooth after all, raise map_steps or pass init_params.")


def _kinked(states):
    """Per chain, whether the init's kink check sent it to the exact step (None when traced)."""
    leaves = (states.exact_mode, states.residual_spread_ratio, states.support_boundary)
    if any(isinstance(v, jax.core.Tracer) for v in leaves):
        return None
    exact, ratio, edge = (np.atleast_1d(np.asarray(v)) for v in leaves)
    return exact & np.isinf(ratio) & ~edge


def _warn_poor_mixing(moments, accepts, inv_mass, crank_nicolson, exact, *, steps, laplace):
    """Host side of :meth:`RacingMH._check_mixing`: one ``UserWarning`` naming the chains whose warmup's last
    window mixed poorly (see :data:`_MIXING_MIN_STEPS`) and the fix.  ``laplace``: the mass matrix is the
    full-data Laplace covariance (not re-estimated), so the draws' spread can be compared with it."""
    moments, accepts = np.asarray(moments, np.float64), np.asarray(accepts, np.float64)
    inv_mass = np.asarray(inv_mass, np.float64)
    if moments.ndim == 2:  # one chain: a leading axis of one
        moments, accepts, inv_mass = moments[None], accepts[None], inv_mass[None]
    var = np.diagonal(inv_mass, axis1=-2, axis2=-1) if inv_mass.ndim == 3 else inv_mass
    cn = np.broadcast_to(np.atleast_1d(np.asarray(crank_nicolson)), accepts.shape)
    exact = np.broadcast_to(np.atleast_1d(np.asarray(exact)), accepts.shape)
    problems = []
    for c in range(accepts.shape[0]):
        rate = accepts[c] / steps
        mean = moments[c, 0] / steps
        spread = np.maximum(moments[c, 1] / steps - mean ** 2, 0.0)
        why = []
        if rate < _MIXING_MIN_ACCEPT:
            why.append(f"acceptance {rate:.3g}")
        if laplace:
            ratio = spread / np.maximum(var[c], 1e-300)
            off = np.abs(mean) / np.sqrt(np.maximum(var[c], 1e-300))
            if cn[c] and rate >= _MIXING_MIN_ACCEPT and (
                    np.max(ratio) > _MIXING_VARIANCE_RATIO or np.max(ratio) < 1 / _MIXING_VARIANCE_RATIO):
                why.append(f"draws' variance {np.min(ratio):.3g}-{np.max(ratio):.3g} x the Laplace variance")
            if np.max(off) > _MIXING_MEAN_SDS:
                why.append(f"draws' mean {np.max(off):.3g} Laplace sds from the start")
        if why:
            chain = "" if accepts.shape[0] == 1 else f"chain {c}: "
            problems.append(chain + ", ".join(why) + (" (exact MH step)" if exact[c] else ""))
    if problems:
        warnings.warn(
            f"RacingMH: the chain still mixes poorly at the end of warmup (over its last {steps} steps: "
            + "; ".join(problems) + "). Its draws may not represent the posterior (R-hat and ESS will tell). "
            "Raise num_warmup (and leave step_size to its adaptation); if the start warned, fix the start first (init_params at a mode, e.g. from a "
            "full-data optimiser); on covariates of very different scales, centre and scale them.",
            UserWarning, stacklevel=2)


def _own_decrement(g, h):
    """``g'|H|^-1 g`` in float64 in the Jacobi-scaled basis (``|H|``: eigenvalues by magnitude, floored at 1e-6
    of the largest); ``inf`` where ``g`` or ``H`` is not finite."""
    if not (np.all(np.isfinite(g)) and np.all(np.isfinite(h))):
        return np.inf
    d = np.abs(np.diagonal(h))
    top = d.max(initial=0.0)
    s = 1.0 / np.sqrt(np.maximum(d, max(1e-12 * top, 1e-300))) if top > 0 else np.ones_like(d)
    lam, q = np.linalg.eigh(0.5 * (h + h.T) * s[:, None] * s[None, :])
    mag = np.maximum(np.abs(lam), 1e-6 * np.abs(lam).max(initial=0.0) + 1e-300)
    return float(np.sum((q.T @ (s * g)) ** 2 / mag))


def _unmeasured_at_edge(report):
    """The search ended on a support boundary without finding which coordinates it holds: its Newton
    decrement is then over every coordinate, and large whatever the polish did (otherwise it is over the
    coordinates not held, and tells whether the polish along the boundary converged)."""
    return bool(report["at_boundary"]) and not np.any(report["held"])


def _precision(search):
    """``-H`` at the searched mode for the initial mass matrix: the full-data Hessian,
    with ``P_ii >= g_i^2`` for the coordinates a support boundary holds at the mode
    (:func:`~subsample_mcmc.kernels.laplace.newton_ascent`), where the gradient, not the
    curvature, sets the posterior's scale (an exponential tail of rate ``|g_i|`` has
    standard deviation ``1/|g_i|``); for every coordinate at a boundary no coordinate of
    which was found held.  The others were polished along the boundary (gradient ~0)."""
    p = -search["hessian"]
    held = search["held"] | (search["at_boundary"] & ~jnp.any(search["held"]))
    g2 = jnp.where(held, search["gradient"] ** 2, 0.0)
    return p + jnp.diag(jnp.maximum(g2 - jnp.diagonal(p), 0.0))
