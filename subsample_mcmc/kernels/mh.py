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
from ..racing.race import RaceResult
from .proxy import TaylorProxy, proxy_per_datum, proxy_sum

__all__ = ["MHInfo", "racing_mh_accept", "gaussian_random_walk", "langevin_proposal", "racing_mh_step"]


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


def gaussian_random_walk(key, position, step_size, inverse_mass_diag=None):
    """Gaussian random-walk proposal ``x' = x + eps M^{-1/2} z`` (symmetric).

    Returns ``(proposal, log q(x'|x), log q(x|x'))`` with the two log densities equal
    (both 0: they cancel in the MH ratio).
    """
    flat, unravel = ravel_pytree(position)
    scale = step_size * (jnp.ones_like(flat) if inverse_mass_diag is None else jnp.sqrt(inverse_mass_diag))
    proposal = flat + scale * jax.random.normal(key, flat.shape, flat.dtype)
    zero = jnp.zeros((), flat.dtype)
    return unravel(proposal), zero, zero


def _gauss_logpdf(x, mean, std):
    z = (x - mean) / std
    return jnp.sum(-0.5 * z * z - jnp.log(std) - 0.5 * jnp.log(2 * jnp.pi))


def langevin_proposal(key, position, step_size, grad_estimate_fn, inverse_mass_diag=None):
    """Mini-batch Langevin (SGLD) proposal with its exact forward and reverse densities.

    ``grad_estimate_fn(position) -> gradient pytree`` must use one fixed mini-batch
    (drawn by the caller before proposing) so that ``q(x|x')`` is the density of the
    same kernel run from ``x'``.

    Returns ``(proposal, log q(x'|x), log q(x|x'))``.
    """
    flat, unravel = ravel_pytree(position)
    minv = jnp.ones_like(flat) if inverse_mass_diag is None else inverse_mass_diag
    std = step_size * jnp.sqrt(minv)

    def drift(x_flat):
        g, _ = ravel_pytree(grad_estimate_fn(unravel(x_flat)))
        return x_flat + 0.5 * step_size**2 * minv * g

    mean_fwd = drift(flat)
    proposal = mean_fwd + std * jax.random.normal(key, flat.shape, flat.dtype)
    mean_bwd = drift(proposal)
    return unravel(proposal), _gauss_logpdf(proposal, mean_fwd, std), _gauss_logpdf(flat, mean_bwd, std)


def racing_mh_step(
    key: jax.Array,
    position,
    *,
    log_prior_fn: Callable,
    log_likelihood_fn: Callable,
    population_size: int,
    step_size: float,
    proposal: str = "random_walk",
    inverse_mass_diag=None,
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
        ``(new_position, MHInfo)``.
    """
    n = population_size
    key_prop, key_batch, key_accept = jax.random.split(key, 3)

    if proxy is None:
        def residual(x, idx):
            return log_likelihood_fn(x, idx)

        def known(x):
            return log_prior_fn(x)
    else:
        def residual(x, idx):
            return log_likelihood_fn(x, idx) - proxy_per_datum(log_likelihood_fn, proxy, x, idx)

        def known(x):
            return log_prior_fn(x) + proxy_sum(proxy, x)

    if proposal == "random_walk":
        new, log_fwd, log_bwd = gaussian_random_walk(key_prop, position, step_size, inverse_mass_diag)
        grad_evals = 0
    elif proposal == "langevin":
        batch = jax.random.randint(key_batch, (grad_batch_size,), 0, n)

        def grad_estimate(x):
            def objective(z):
                return known(z) + (n / grad_batch_size) * jnp.sum(residual(z, batch))

            return jax.grad(objective)(x)

        new, log_fwd, log_bwd = langevin_proposal(key_prop, position, step_size, grad_estimate,
                                                  inverse_mass_diag)
        grad_evals = 2 * grad_batch_size
    else:
        raise ValueError(f"proposal must be 'random_walk' or 'langevin', got {proposal!r}")

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
