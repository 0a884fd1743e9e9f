r"""Racing Metropolis-Hastings: the accept test as a two-arm race (Sec. 4, Eq. 12).

For a current point ``x`` and a proposal ``x'`` with proposal density ``q``, MH accepts
when

    log u + log p(x) + log q(x'|x) + sum_n log p(y_n|x)  <  log p(x') + log q(x|x') + sum_n log p(y_n|x'),

``u ~ Uniform(0, 1)``.  This is the best-arm problem of Eq. 3 with two arms (Eq. 12):
rewards ``l_{1,n} = log p(y_n|x)``, ``l_{2,n} = log p(y_n|x')`` and arm constants
``f0(1) = u p(x) q(x'|x)``, ``f0(2) = p(x') q(x|x')``.  A race decides it from a fraction
of the data with error at most ``delta``; Racing-Normal and Racing-EBS reduce to the
subsampled MH tests of Korattikara et al. (2014) and Bardenet et al. (2014) with the
doubling schedule and the bounds of Sec. 3.3.

BlackJAX-shaped (``init`` and ``build_kernel``)::

    state = init(position)                         # MHState
    step = build_kernel(langevin(), method="normal", delta=0.05)
    state, info = step(key, state, log_prior_fn, log_likelihood_fn, N, step_size)

``method`` is the racing core's vocabulary (:data:`~subsample_mcmc.racing.METHODS`):
``"exact"`` gives the exact MH step on all the data, the others race.  Proposals are
:class:`~subsample_mcmc.kernels.proposals.Proposal` objects (random walk, Langevin with
the mini-batch gradient estimate of :mod:`~subsample_mcmc.kernels.gradients`, which a
Taylor proxy turns into the control-variate estimate).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from ..racing import ArmControlVariates, best_arm, fill_exact_sums
from ..racing.bounds import ExactBound
from ..racing.discrete import check_tie_share
from ..racing.lil_ucb import LilUCBBound
from ..racing.race import RaceResult, _run_at_most_once
from .gradients import gradient_estimator, random_batch
from .laplace import log_density_sum
from .proposals import Proposal, get_proposal
from .proxy import TaylorProxy, proxy_residual, proxy_sum

__all__ = ["MHState", "MHInfo", "init", "build_kernel", "racing_mh_accept", "TIE_SHARE"]

#: the share of an MH race's ``delta`` given to ``log u`` landing within ``epsilon = TIE_SHARE delta / 2``
#: nats of the log MH ratio (:func:`racing_mh_accept`); the race itself runs at ``(1 - TIE_SHARE) delta``.
#: 0.8 rather than 0.5: the same promise, fewer near-ties read far (benchmarks/results/racing_mh_tie_share.md)
TIE_SHARE = 0.8


class MHState(NamedTuple):
    """A flat ``position`` ``[p]`` and ``sum_n l_n(position)`` when known (the exact kernel
    keeps it, so that a step costs one pass; NaN when unknown)."""

    position: jax.Array
    log_likelihood_sum: jax.Array


class MHInfo(NamedTuple):
    """What a person wants to see about one MH step."""

    accepted: jax.Array
    num_likelihood_evals: jax.Array  # everything the step computed, in likelihood-evaluation units
    race_stage: jax.Array
    log_accept_ratio_prior: jax.Array  # the non-data part of the log MH ratio
    nonfinite: jax.Array


def init(position: jax.Array, log_likelihood_sum=None) -> MHState:
    """The :class:`MHState` at a flat ``position`` (``log_likelihood_sum``: known or not)."""
    position = jnp.asarray(position)
    value = jnp.nan if log_likelihood_sum is None else log_likelihood_sum
    return MHState(position, jnp.asarray(value, position.dtype))


def racing_mh_accept(
    key: jax.Array,
    reward_fn: Callable[[jax.Array], jax.Array],
    population_size: int,
    log_prior_current: jax.Array,
    log_prior_proposal: jax.Array,
    log_q_forward: jax.Array = 0.0,
    log_q_backward: jax.Array = 0.0,
    tie_share: float = TIE_SHARE,
    **race_options,
) -> tuple[jax.Array, RaceResult]:
    r"""Decide an MH move by a two-arm race (Eq. 12), differing from the exact test with
    probability at most ``delta``.

    The error promise is over the whole step, ``u`` included: that is what bounds the
    total-variation distance between the racing and the exact transition kernels (Bardenet,
    Doucet & Holmes 2014, Prop. 3.2; Korattikara et al. 2014).  A race that must be right for
    every ``u`` reads all ``N`` points whenever ``log u`` falls within a few thousandths of a
    nat of the log MH ratio ``Lambda`` -- rare, but with ``2 N`` points read each time these
    near-ties are most of a large-``N`` race's cost (``benchmarks/results/racing_mh_stages.md``).
    Instead, with ``epsilon = tie_share delta / 2`` nats, the race runs at error level
    ``(1 - tie_share) delta`` and stops once its width falls below ``epsilon``
    (``resolution`` of :func:`~subsample_mcmc.racing.best_arm`).  On the event that no
    confidence bound fails (probability ``>= 1 - (1 - tie_share) delta``) a decision can then
    differ from the exact one only when ``|log u - Lambda| < epsilon``, and since the density
    of ``log u`` is ``e^t <= 1`` on ``t <= 0`` that has probability at most ``2 epsilon =
    tie_share delta`` whatever ``Lambda``.  In all, ``P(racing != exact) <= delta`` for every
    current point and proposal, and no race reads much past the stage where its width falls
    below ``epsilon``.  ``tie_share=0`` is the race that is right for every ``u``.

    Args:
        key: PRNG key (the uniform ``u`` and the race's reading order).
        reward_fn: ``indices -> [2, len(indices)]`` the arms' rewards, per-datum
            log-likelihoods at ``(x, x')`` -- row 0 the current point, row 1 the proposal.
        population_size: N.
        log_prior_current, log_prior_proposal: ``log p(x)``, ``log p(x')`` (including
            any Jacobian of the parameterisation).
        log_q_forward, log_q_backward: ``log q(x'|x)``, ``log q(x|x')``.
        tie_share: the share of ``delta`` given to ``|log u - Lambda| < epsilon`` (above), in
            ``[0, 1)``; default :data:`TIE_SHARE` (0.8).  With ``method="lil_ucb"`` (which has
            no stages) it is not used.
        **race_options: passed to :func:`~subsample_mcmc.racing.best_arm`
            (``method``, ``delta``, ``first_batch``, ``control_variate`` ...).

    Returns:
        ``(accept, race)``: ``accept`` is True when the proposal wins the race (False
        when a non-finite log-likelihood stopped it).
    """
    key_u, key_race = jax.random.split(key)
    log_u = _log_uniform(key_u)
    n = population_size
    offsets = jnp.stack([log_u + log_prior_current + log_q_forward,
                         log_prior_proposal + log_q_backward]) / n
    check_tie_share(tie_share)
    options = dict(race_options)
    method = options.get("method", "normal")
    if tie_share and not (method in ("lil_ucb", "exact") or isinstance(method, (LilUCBBound, ExactBound))):
        delta = options.get("delta", 0.05)
        options["delta"] = (1.0 - tie_share) * delta
        options["resolution"] = tie_share * delta / 2.0 / n  # epsilon nats, in the units of the arm means
    race = best_arm(key_race, reward_fn, num_arms=2, population_size=n,
                    arm_offset=offsets.astype(jnp.float32), **options)
    return race.arm == 1, race


def _log_uniform(key):
    """``log u``, ``u ~ Uniform(0, 1)``: the racing and the exact step draw it alike."""
    return jnp.log(jax.random.uniform(key, minval=jnp.finfo(jnp.float32).tiny))


def build_kernel(
    proposal="random_walk",
    *,
    method: str = "normal",
    grad_batch_size: int = 100,
    point_cost: float = 1.0,
    gradient_point_cost: float = 1.0,
    chunk_size: int = 4096,
    max_race_fraction: Optional[float] = None,
    **race_options,
) -> Callable:
    r"""A racing (or, ``method="exact"``, exact) MH transition on flat positions.

    Args:
        proposal: a :class:`~subsample_mcmc.kernels.proposals.Proposal` or its name
            (``"random_walk"``, ``"langevin"``).  A gradient-based proposal reads the
            mini-batch estimate of :func:`~subsample_mcmc.kernels.gradients.gradient_estimator`
            (``grad_batch_size`` indices with replacement, one batch per step, used at
            ``x`` and ``x'``), the control-variate estimate when a proxy is given.
        method: the race's bound (:data:`~subsample_mcmc.racing.METHODS`); ``"exact"``
            reads all the data with a cached current sum (N per-datum evaluations per
            step).
        point_cost: cost of one arm's reward at one datum in likelihood-evaluation
            units (a proxy residual ``l_n - h_n`` costs several:
            :func:`~subsample_mcmc.kernels.cost.evaluation_equivalents`).
        gradient_point_cost: cost of one datum's term of the mini-batch gradient.
        chunk_size: data points per chunk of the exact step's full-data pass.
        max_race_fraction: a reading budget of the race, as a share of the points it races
            (``N`` less the control variate's exactly-read points): a race still undecided at
            the last stage boundary within it (``max_points`` of
            :func:`~subsample_mcmc.racing.best_arm`) hands over to the exact test with the same
            ``u`` (two full-data passes, counted), which is what the race would answer at
            ``T = N``.  ``None`` (default): no budget.
        **race_options: passed to :func:`~subsample_mcmc.racing.best_arm` (``delta``,
            ``first_batch``, ``variance`` ...).

    Returns:
        ``step(rng_key, state, log_prior_fn, log_likelihood_fn, population_size,
        step_size, inverse_mass_matrix=None, proxy=None, control_variate_fn=None, center=None,
        exact_log_likelihood_fn=None) -> (MHState, MHInfo)`` where ``log_prior_fn: x -> log p(x)``,
        ``log_likelihood_fn: (x, indices) -> [len(indices)]``, ``proxy`` an optional
        :class:`~subsample_mcmc.kernels.proxy.TaylorProxy` (the race then reads the
        residuals ``l_n - h_n`` and the proxy's exact sum enters the MH ratio) and
        ``control_variate_fn`` an optional ``(x, x') -> TaylorControlVariate`` (the
        data-space control variate of Eq. 11, passed to the race) or ``-> ArmControlVariates``
        (feature-space proxies at ``x`` and ``x'`` with points read exactly: the race then reads
        the raw log-likelihoods, the proxy serving only the gradient estimate and the
        centre; each raced point costs both arms' log-likelihood and proxy, each exact point
        their log-likelihoods; an arm whose ``exact_sums`` entry is known, not NaN, is not read
        at the exact points: :func:`~subsample_mcmc.racing.fill_exact_sums` computes the unknown
        ones only, and only those are counted; ``exact_log_likelihood_fn``, ``x -> [|E|]``, computes
        them from the caller's rows of those points gathered once, default
        ``log_likelihood_fn(x, exact_indices)``) and ``center`` the mean
        of the Gaussian a centred proposal (:func:`~subsample_mcmc.kernels.proposals.crank_nicolson`)
        moves around (default: the proxy's reference point).

    The racing step accepts when the proposal wins the two-arm race of Eq. 12; the
    exact step when ``log u < log p(x') + sum_n l_n(x') + log q(x|x') - log p(x) -
    sum_n l_n(x) - log q(x'|x)``.  For one ``rng_key`` both make the same proposal and
    draw the same ``u``: they differ only where the race errs.

    ``MHInfo.num_likelihood_evals`` counts what the step computed: racing, both arms at
    every point the race computed (``RaceResult.num_points_computed``) times
    ``point_cost``; exact, ``N`` per full-data pass (two when the current sum was not
    known); plus the two mini-batch gradients of a gradient-based proposal
    (``2 b gradient_point_cost``).
    """
    prop: Proposal = get_proposal(proposal)
    exact = method == "exact"

    def step(rng_key, state: MHState, log_prior_fn: Callable, log_likelihood_fn: Callable, population_size: int,
             step_size, inverse_mass_matrix=None, proxy: Optional[TaylorProxy] = None,
             control_variate_fn: Optional[Callable] = None, center=None,
             exact_log_likelihood_fn: Optional[Callable] = None):
        n = population_size
        if center is None and proxy is not None:
            center = proxy.reference
        position = state.position
        key_prop, key_batch, key_accept = jax.random.split(rng_key, 3)
        grad_fn, grad_evals = None, 0
        if prop.uses_gradient:
            batch = random_batch(key_batch, n, grad_batch_size)
            grad_fn = gradient_estimator(log_prior_fn, log_likelihood_fn, n, batch, proxy)
            grad_evals = 2 * grad_batch_size
        new, log_fwd, log_bwd = prop(key_prop, position, step_size, inverse_mass_matrix, grad_fn, center)
        if exact:
            return _exact_accept(key_accept, state, new, log_fwd, log_bwd, log_prior_fn, log_likelihood_fn, n,
                                 grad_evals * gradient_point_cost, chunk_size)
        options = dict(race_options, method=method)
        cv = None if control_variate_fn is None else control_variate_fn(position, new)
        if cv is not None:
            options["control_variate"] = cv
        by_features = isinstance(cv, ArmControlVariates)
        if max_race_fraction is not None:
            raced = n - (cv.exact_indices.shape[0] if by_features else 0)
            options["max_points"] = max(1, int(max_race_fraction * raced))
        if proxy is None or by_features:  # a feature-space control variate replaces the proxy in the race
            residual, known = log_likelihood_fn, log_prior_fn
        else:
            residual = proxy_residual(log_likelihood_fn, proxy)

            def known(x):
                return log_prior_fn(x) + proxy_sum(proxy, x)

        arms = jnp.stack([position, new])
        exact_evals = None
        if by_features and cv.exact_sums is not None:
            # the arms' sums over the exactly-read points: a known one (the caller's cache) is not read again
            computed = jnp.sum(jnp.isnan(jnp.asarray(cv.exact_sums))).astype(jnp.float32)
            at_exact = ((lambda x: residual(x, cv.exact_indices)) if exact_log_likelihood_fn is None
                        else exact_log_likelihood_fn)
            cv = fill_exact_sums(cv, [lambda x=x: jnp.sum(at_exact(x)) for x in (position, new)])
            options["control_variate"] = cv
            exact_evals = computed * cv.exact_indices.shape[0]

        def both(idx):  # one traced copy of the likelihood for the two arms (vmapped), not two
            return jax.vmap(residual, in_axes=(0, None))(arms, idx)

        lp_cur, lp_new = known(position), known(new)
        accept, race = racing_mh_accept(key_accept, both, n, lp_cur, lp_new, log_fwd, log_bwd, **options)
        accept = accept & jnp.isfinite(lp_new)
        if by_features:  # both arms' log-likelihoods at every point computed, their proxies at the raced ones
            n_exact = cv.exact_indices.shape[0]
            if exact_evals is None:
                exact_evals = 2.0 * n_exact
            points = 4.0 * (race.num_points_computed - n_exact) + exact_evals
        else:
            points = 2.0 * race.num_points_computed * point_cost
        unknown = jnp.full_like(state.log_likelihood_sum, jnp.nan)
        log_likelihood_sum = unknown
        if max_race_fraction is not None:
            # a race that used up its budget undecided: the exact test, same u (both full sums, counted)
            def exact_test(_):
                st, inf = _exact_accept(key_accept, MHState(position, unknown), new, log_fwd, log_bwd, log_prior_fn,
                                        log_likelihood_fn, n, 0.0, chunk_size)
                return inf.accepted, st.log_likelihood_sum, inf.num_likelihood_evals.astype(jnp.float32)

            fallback = _run_at_most_once(race.truncated, exact_test,
                                         (accept, unknown, jnp.zeros((), jnp.float32)))
            accept = jnp.where(race.truncated, fallback[0], accept)
            log_likelihood_sum = jnp.where(race.truncated, fallback[1], unknown)
            points = points + jnp.where(race.truncated, fallback[2], 0.0)
        info = MHInfo(
            accepted=accept,
            num_likelihood_evals=jnp.round(points + grad_evals * gradient_point_cost).astype(jnp.int32),
            race_stage=race.num_stages,
            log_accept_ratio_prior=lp_new + log_bwd - lp_cur - log_fwd,
            nonfinite=race.nonfinite,
        )
        return MHState(jnp.where(accept, new, position), log_likelihood_sum), info

    return step


def _exact_accept(key_accept, state, new, log_fwd, log_bwd, log_prior_fn, log_likelihood_fn, n, grad_cost,
                  chunk_size):
    """The exact MH test of ``new`` against ``state`` on all the data (the current sum
    computed only when ``state`` does not know it)."""
    position = state.position

    def total(x):
        return log_density_sum(lambda _: jnp.zeros((), x.dtype), log_likelihood_fn, x[None], n, chunk_size)[0]

    current = state.log_likelihood_sum
    missing = ~jnp.isfinite(current)
    current = _run_at_most_once(missing, lambda _: total(position), current)
    ll_new = total(new)
    key_u, _ = jax.random.split(key_accept)
    log_u = _log_uniform(key_u)
    lp_cur, lp_new = log_prior_fn(position), log_prior_fn(new)
    log_ratio = (lp_new + ll_new + log_bwd) - (lp_cur + current + log_fwd)
    finite = jnp.isfinite(ll_new) & jnp.isfinite(lp_new)
    accept = (log_u < log_ratio) & finite
    passes = 1 + missing.astype(jnp.int32)
    info = MHInfo(
        accepted=accept,
        num_likelihood_evals=jnp.round(passes * n + grad_cost).astype(jnp.int32),
        race_stage=jnp.zeros((), jnp.int32),
        log_accept_ratio_prior=lp_new + log_bwd - lp_cur - log_fwd,
        nonfinite=~finite & jnp.isfinite(lp_new),
    )
    return MHState(jnp.where(accept, new, position), jnp.where(accept, ll_new, current)), info
