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

Proposals (pure functions ``(key, x, ...) -> (x', log q(x'|x), log q(x|x'))``):

* :func:`gaussian_random_walk` -- ``x' = x + eps M^{-1/2} z`` (symmetric, the q terms cancel);
* :func:`langevin_proposal` -- the mini-batch Langevin (SGLD) move
  ``x' = x + eps^2/2 M^{-1} g_hat(x) + eps M^{-1/2} z`` with
  ``g_hat(x) = grad log p(x) + (N/b) sum_{n in batch} grad log p(y_n|x)``; the reverse
  density uses ``g_hat(x')`` on the *same* mini-batch, so that, the batch being drawn
  independently of the state, the corrected chain keeps the right target
  ("SGLD corrected by Racing-Normal MH", Sec. 5.2).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from ..racing import best_arm
from ..racing.race import RaceResult, run_at_most_once
from .optimize import log_density_sum
from .proxy import TaylorProxy, proxy_per_datum, proxy_sum

__all__ = ["MHInfo", "racing_mh_accept", "gaussian_random_walk", "langevin_proposal", "racing_mh_step",
           "exact_mh_step"]


class MHInfo(NamedTuple):
    """What a person wants to see about one MH step."""

    accepted: jax.Array
    num_likelihood_evals: jax.Array  # everything the step computed, in likelihood-evaluation units
    race_stage: jax.Array
    log_accept_ratio_prior: jax.Array  # the non-data part of the log MH ratio
    nonfinite: jax.Array


def racing_mh_accept(
    key: jax.Array,
    log_likelihood_fn: Callable[[jax.Array], jax.Array],
    population_size: int,
    log_prior_current: jax.Array,
    log_prior_proposal: jax.Array,
    log_q_forward: jax.Array = 0.0,
    log_q_backward: jax.Array = 0.0,
    **race_options,
) -> tuple[jax.Array, RaceResult]:
    r"""Decide an MH move by a two-arm race (Eq. 12).

    Args:
        key: PRNG key (the uniform ``u`` and the race's reading order).
        log_likelihood_fn: ``indices -> [2, len(indices)]`` per-datum log-likelihoods at
            ``(x, x')`` -- row 0 the current point, row 1 the proposal.
        population_size: N.
        log_prior_current, log_prior_proposal: ``log p(x)``, ``log p(x')`` (including
            any Jacobian of the parameterisation).
        log_q_forward, log_q_backward: ``log q(x'|x)``, ``log q(x|x')``.
        **race_options: passed to :func:`~subsample_mcmc.racing.best_arm`
            (``method``, ``delta``, ``first_batch``, ``control_variate`` ...).

    Returns:
        ``(accept, race)``: ``accept`` is True when the proposal wins the race (False
        when a non-finite log-likelihood stopped it).
    """
    key_u, key_race = jax.random.split(key)
    log_u = jnp.log(jax.random.uniform(key_u, minval=jnp.finfo(jnp.float32).tiny))
    n = population_size
    offsets = jnp.stack([log_u + log_prior_current + log_q_forward,
                         log_prior_proposal + log_q_backward]) / n
    race = best_arm(key_race, log_likelihood_fn, num_arms=2, population_size=n,
                    arm_offset=offsets.astype(jnp.float32), **race_options)
    return race.arm == 1, race


def _mass_factor(inverse_mass_matrix, flat):
    """Pieces of an inverse mass matrix ``M^{-1} = L L'`` that is ``None`` (the identity),
    a ``[p]`` diagonal or a ``[p, p]`` dense matrix: ``(v -> M^{-1} v, z -> L z,
    r -> L^{-1} r, log det L)``."""
    if inverse_mass_matrix is None:
        inverse_mass_matrix = jnp.ones_like(flat)
    minv = jnp.asarray(inverse_mass_matrix, flat.dtype)
    if minv.ndim == 1:
        root = jnp.sqrt(minv)
        return (lambda v: minv * v), (lambda z: root * z), (lambda r: r / root), jnp.sum(jnp.log(root))
    chol = jnp.linalg.cholesky(minv)
    return ((lambda v: minv @ v), (lambda z: chol @ z),
            (lambda r: jax.scipy.linalg.solve_triangular(chol, r, lower=True)),
            jnp.sum(jnp.log(jnp.diagonal(chol))))


def gaussian_random_walk(key, position, step_size, inverse_mass_matrix=None):
    """Gaussian random-walk proposal ``x' = x + eps L z``, ``L L' = M^{-1}`` (symmetric).

    ``inverse_mass_matrix``: ``None`` (identity), a ``[p]`` diagonal or a ``[p, p]`` dense
    matrix (e.g. the inverse Hessian at the mode: a Laplace-shaped random walk).

    Returns ``(proposal, log q(x'|x), log q(x|x'))`` with the two log densities equal
    (both 0: they cancel in the MH ratio).
    """
    flat, unravel = ravel_pytree(position)
    _, scale, _, _ = _mass_factor(inverse_mass_matrix, flat)
    proposal = flat + step_size * scale(jax.random.normal(key, flat.shape, flat.dtype))
    zero = jnp.zeros((), flat.dtype)
    return unravel(proposal), zero, zero


def langevin_proposal(key, position, step_size, grad_estimate_fn, inverse_mass_matrix=None):
    """Mini-batch Langevin (SGLD) proposal with its exact forward and reverse densities:
    ``x' ~ N(x + eps^2/2 M^{-1} g_hat(x), eps^2 M^{-1})``.

    ``grad_estimate_fn(position) -> gradient pytree`` must use one fixed mini-batch
    (drawn by the caller before proposing) so that ``q(x|x')`` is the density of the
    same kernel run from ``x'``.  ``inverse_mass_matrix`` as in :func:`gaussian_random_walk`.

    Returns ``(proposal, log q(x'|x), log q(x|x'))``.
    """
    flat, unravel = ravel_pytree(position)
    times, scale, whiten, log_det = _mass_factor(inverse_mass_matrix, flat)

    def drift(x_flat):
        g, _ = ravel_pytree(grad_estimate_fn(unravel(x_flat)))
        return x_flat + 0.5 * step_size**2 * times(g)

    def logpdf(x, mean):
        z = whiten(x - mean) / step_size
        return -0.5 * jnp.sum(z * z) - log_det - flat.shape[0] * (jnp.log(step_size) + 0.5 * jnp.log(2 * jnp.pi))

    mean_fwd = drift(flat)
    proposal = mean_fwd + step_size * scale(jax.random.normal(key, flat.shape, flat.dtype))
    mean_bwd = drift(proposal)
    return unravel(proposal), logpdf(proposal, mean_fwd), logpdf(flat, mean_bwd)


def _proposal(key_prop, key_batch, position, n, known, residual, step_size, proposal, inverse_mass_matrix,
              grad_batch_size):
    """``(x', log q(x'|x), log q(x|x'), gradient evaluations)`` (shared by the racing and the
    exact step, so that one key gives both steps the same proposal)."""
    if proposal == "random_walk":
        new, log_fwd, log_bwd = gaussian_random_walk(key_prop, position, step_size, inverse_mass_matrix)
        return new, log_fwd, log_bwd, 0
    if proposal == "langevin":
        batch = jax.random.randint(key_batch, (grad_batch_size,), 0, n)

        def grad_estimate(x):
            def objective(z):
                return known(z) + (n / grad_batch_size) * jnp.sum(residual(z, batch))

            return jax.grad(objective)(x)

        new, log_fwd, log_bwd = langevin_proposal(key_prop, position, step_size, grad_estimate, inverse_mass_matrix)
        return new, log_fwd, log_bwd, 2 * grad_batch_size
    raise ValueError(f"proposal must be 'random_walk' or 'langevin', got {proposal!r}")


def _targets(log_prior_fn, log_likelihood_fn, proxy):
    """``(residual, known)``: what the race reads per datum and what it knows exactly."""
    if proxy is None:
        return log_likelihood_fn, log_prior_fn

    def residual(x, idx):
        return log_likelihood_fn(x, idx) - proxy_per_datum(log_likelihood_fn, proxy, x, idx)

    def known(x):
        return log_prior_fn(x) + proxy_sum(proxy, x)

    return residual, known


def racing_mh_step(
    key: jax.Array,
    position,
    *,
    log_prior_fn: Callable,
    log_likelihood_fn: Callable,
    population_size: int,
    step_size: float,
    proposal: str = "random_walk",
    inverse_mass_matrix=None,
    grad_batch_size: int = 100,
    proxy: Optional[TaylorProxy] = None,
    control_variate_fn: Optional[Callable] = None,
    point_cost: float = 1.0,
    gradient_point_cost: float = 1.0,
    **race_options,
):
    r"""One racing MH transition (a BlackJAX-style pure step) on a flat position.

    Args:
        position: flat parameter vector ``[p]``.
        log_prior_fn: ``position -> log p(x)``.
        log_likelihood_fn: ``(position, indices) -> [len(indices)]`` per-datum
            log-likelihoods ``log p(y_n | x)``.
        proposal: ``"random_walk"`` or ``"langevin"`` (mini-batch gradient of size
            ``grad_batch_size``, drawn with replacement, scaled by ``N / b``).
        proxy: optional :class:`~subsample_mcmc.kernels.proxy.TaylorProxy`; the race
            then reads the residuals ``l_n - h_n`` and the proxy's exact sum enters
            the MH ratio (and the Langevin gradient becomes the control-variate
            estimate ``grad [log p + sum_n h_n] + (N/b) sum_batch grad (l_n - h_n)``).
        control_variate_fn: optional ``(x, x') -> TaylorControlVariate``: the data-space
            control variate (Eq. 11) of the two arms, passed to the race.
        point_cost: cost of one arm's reward at one datum in likelihood-evaluation
            units (a proxy residual ``l_n - h_n`` costs several:
            :func:`~subsample_mcmc.kernels.cost.evaluation_equivalents`).
        gradient_point_cost: cost of one datum's term of the mini-batch gradient.

    ``MHInfo.num_likelihood_evals`` counts what the step computed: both arms at every
    point the race computed (``RaceResult.num_points_computed``: the masked tail of
    the last fixed-size chunk and exactly-read points included) times
    ``point_cost``, plus the two mini-batch gradients of a Langevin proposal
    (``2 b gradient_point_cost``), rounded to an integer.

    Returns:
        ``(new_position, MHInfo)``.  :func:`exact_mh_step` with the same ``key`` makes
        the same proposal and draws the same ``u``: the two steps differ only where the
        race errs.
    """
    n = population_size
    key_prop, key_batch, key_accept = jax.random.split(key, 3)
    residual, known = _targets(log_prior_fn, log_likelihood_fn, proxy)
    new, log_fwd, log_bwd, grad_evals = _proposal(key_prop, key_batch, position, n, known, residual, step_size, proposal,
                                                  inverse_mass_matrix, grad_batch_size)

    def both(idx):
        return jnp.stack([residual(position, idx), residual(new, idx)])

    lp_cur, lp_new = known(position), known(new)
    if control_variate_fn is not None:
        race_options = {**race_options, "control_variate": control_variate_fn(position, new)}
    accept, race = racing_mh_accept(key_accept, both, n, lp_cur, lp_new, log_fwd, log_bwd, **race_options)
    accept = accept & jnp.isfinite(lp_new)
    out = jax.tree.map(lambda a, b: jnp.where(accept, b, a), position, new)
    info = MHInfo(
        accepted=accept,
        num_likelihood_evals=jnp.round(2.0 * race.num_points_computed * point_cost
                                       + grad_evals * gradient_point_cost).astype(jnp.int32),
        race_stage=race.num_stages,
        log_accept_ratio_prior=lp_new + log_bwd - lp_cur - log_fwd,
        nonfinite=race.nonfinite,
    )
    return out, info


def exact_mh_step(
    key: jax.Array,
    position,
    *,
    log_prior_fn: Callable,
    log_likelihood_fn: Callable,
    population_size: int,
    step_size: float,
    proposal: str = "random_walk",
    inverse_mass_matrix=None,
    grad_batch_size: int = 100,
    proxy: Optional[TaylorProxy] = None,
    log_likelihood_sum=None,
    gradient_point_cost: float = 1.0,
    chunk_size: int = 4096,
):
    r"""The exact MH transition that :func:`racing_mh_step` approximates, on all the data.

    Accepts when ``log u < log p(x') + sum_n l_n(x') + log q(x|x') - log p(x) -
    sum_n l_n(x) - log q(x'|x)`` (Eq. 12 with every reward read), with the same
    proposal and the same ``u`` as :func:`racing_mh_step` for the same ``key`` (the
    ``proxy`` only shapes a Langevin proposal's drift; it does not enter the test).

    Args:
        log_likelihood_sum: ``sum_n l_n(x)`` at the current position when known (the
            value this function returned at the previous step), else ``None`` or NaN:
            it is then computed (a second pass).  Caching it makes the step cost one
            pass over the data, ``N`` per-datum evaluations, against up to ``2 N`` for a
            race that cannot decide.
        chunk_size: data points per chunk of the full-data pass
            (:func:`~subsample_mcmc.kernels.optimize.log_density_sum`).

    Returns:
        ``(new_position, sum_n l_n(new_position), MHInfo)``; ``num_likelihood_evals`` is
        ``N`` (the proposal), plus ``N`` when the current sum was not given, plus the
        Langevin gradients; ``race_stage`` is 0.
    """
    n = population_size
    key_prop, key_batch, key_accept = jax.random.split(key, 3)
    residual, known = _targets(log_prior_fn, log_likelihood_fn, proxy)
    new, log_fwd, log_bwd, grad_evals = _proposal(key_prop, key_batch, position, n, known, residual, step_size, proposal,
                                                  inverse_mass_matrix, grad_batch_size)

    def total(x):
        return log_density_sum(lambda _: jnp.zeros((), x.dtype), log_likelihood_fn, x[None], n, chunk_size)[0]

    current = jnp.asarray(jnp.nan if log_likelihood_sum is None else log_likelihood_sum, position.dtype)
    missing = ~jnp.isfinite(current)
    current = run_at_most_once(missing, lambda _: total(position), current)
    ll_new = total(new)
    key_u, _ = jax.random.split(key_accept)
    log_u = jnp.log(jax.random.uniform(key_u, minval=jnp.finfo(jnp.float32).tiny))
    lp_cur, lp_new = log_prior_fn(position), log_prior_fn(new)
    log_ratio = (lp_new + ll_new + log_bwd) - (lp_cur + current + log_fwd)
    finite = jnp.isfinite(ll_new) & jnp.isfinite(lp_new)
    accept = (log_u < log_ratio) & finite
    out = jax.tree.map(lambda a, b: jnp.where(accept, b, a), position, new)
    passes = 1 + missing.astype(jnp.int32)
    info = MHInfo(
        accepted=accept,
        num_likelihood_evals=jnp.round(passes * n + grad_evals * gradient_point_cost).astype(jnp.int32),
        race_stage=jnp.zeros((), jnp.int32),
        log_accept_ratio_prior=lp_new + log_bwd - lp_cur - log_fwd,
        nonfinite=~finite & jnp.isfinite(lp_new),
    )
    return out, jnp.where(accept, ll_new, current), info
