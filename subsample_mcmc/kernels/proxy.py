r"""Parameter-space Taylor proxies (control variates) for subsampled MH.

Around a reference point ``theta_hat`` (a MAP estimate), the per-datum log-likelihood
is approximated by its second-order Taylor expansion in the *parameters* (the
"proxies" of Bardenet et al. 2017, NumPyro's ``HMCECS.taylor_proxy``)::

    h_n(theta) = l_n(theta_hat) + g_n^T D + 1/2 D^T H_n D,    D = theta - theta_hat,

whose sum over the data needs only the full sums ``G = sum_n g_n`` and
``H = sum_n H_n``, computed once (one pass over the data, in chunks)::

    sum_n h_n(theta) = const + G^T D + 1/2 D^T H D.

A race then reads the residual rewards ``l_n(theta) - h_n(theta)``, whose spread is of
third order in ``D`` -- tiny in the posterior bulk -- and the exact sum enters the
MH ratio as a known term.  Per datum, ``g_n^T D`` and ``D^T H_n D`` are the first two
directional derivatives of ``t -> l_n(theta_hat + t D)`` at 0, computed with nested
``jax.jvp`` (a few likelihood evaluations, never a p x p Hessian per datum).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

__all__ = ["TaylorProxy", "taylor_proxy", "proxy_sum", "proxy_per_datum"]


class TaylorProxy(NamedTuple):
    """Reference point and full-data sums of a second-order parameter-space proxy."""

    reference: jax.Array  # flat theta_hat [p]
    grad_sum: jax.Array  # G [p]
    hess_sum: jax.Array  # H [p, p]


def taylor_proxy(
    log_likelihood_fn: Callable[[jax.Array, jax.Array], jax.Array],
    reference: jax.Array,
    population_size: int,
    chunk_size: int = 4096,
) -> TaylorProxy:
    """Build the proxy: ``G`` and ``H`` summed over all N data in chunks (one O(N) pass).

    Args:
        log_likelihood_fn: ``(flat_theta, indices) -> [len(indices)]`` per-datum
            log-likelihoods.
        reference: flat reference point ``theta_hat``.
    """
    n = int(population_size)
    p = reference.shape[0]

    def sums(idx):
        total = lambda th: jnp.sum(log_likelihood_fn(th, idx))  # noqa: E731
        return jax.grad(total)(reference), jax.hessian(total)(reference)

    full, rest = divmod(n, chunk_size)
    g = jnp.zeros((p,), reference.dtype)
    h = jnp.zeros((p, p), reference.dtype)
    if full:
        def body(k, carry):
            idx = k * chunk_size + jnp.arange(chunk_size)
            dg, dh = sums(idx)
            return carry[0] + dg, carry[1] + dh

        g, h = jax.lax.fori_loop(0, full, body, (g, h))
    if rest:
        dg, dh = sums(full * chunk_size + jnp.arange(rest))
        g, h = g + dg, h + dh
    return TaylorProxy(reference, g, 0.5 * (h + h.T))


def proxy_sum(proxy: TaylorProxy, theta: jax.Array) -> jax.Array:
    """``sum_n h_n(theta)`` up to the constant ``sum_n l_n(theta_hat)``."""
    d = theta - proxy.reference
    return proxy.grad_sum @ d + 0.5 * d @ proxy.hess_sum @ d


def proxy_per_datum(log_likelihood_fn, proxy: TaylorProxy, theta: jax.Array, idx: jax.Array) -> jax.Array:
    """``h_n(theta) - l_n(theta_hat) = g_n^T D + 1/2 D^T H_n D`` for the data ``idx``."""
    d = theta - proxy.reference

    def along(t):
        return log_likelihood_fn(proxy.reference + t * d, idx)

    def first(t):
        return jax.jvp(along, (t,), (jnp.ones_like(t),))[1]

    zero = jnp.zeros((), theta.dtype)
    d1, d2 = jax.jvp(first, (zero,), (jnp.ones_like(zero),))
    return d1 + 0.5 * d2


def flatten(position):
    """``ravel_pytree`` re-exported for kernels working on flat parameters."""
    return ravel_pytree(position)
