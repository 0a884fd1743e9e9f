r"""Mini-batch log-density and gradient estimators, plain and with a control variate.

In the spirit of BlackJAX's ``sgmcmc.gradients``: for a log posterior
``log p(x) + sum_{n=1}^N l_n(x)`` and a mini-batch ``S`` of ``b`` indices drawn
uniformly with replacement, the unbiased estimate

    U_S(x) = log p(x) + (N/b) sum_{n in S} l_n(x)

and its gradient ``grad U_S(x)`` (SGLD, Welling & Teh 2011).  With a Taylor proxy
``h_n`` around ``theta_hat`` (:mod:`~subsample_mcmc.kernels.proxy`) the control-variate
estimate (Baker et al. 2019; App. C.2 of Chen & Ghahramani 2016)

    U^cv_S(x) = log p(x) + sum_n h_n(x) + (N/b) sum_{n in S} [l_n(x) - h_n(x)],
    grad U^cv_S(x) = grad log p(x) + G + H D + (N/b) sum_{n in S} [grad l_n(x) - g_n - H_n D],

``D = x - theta_hat``, has a variance of third order in ``D`` (the proxy's sums ``G, H``
are exact, computed once).

The batch is an argument, not drawn inside, so that a Langevin proposal can use the
same batch at ``x`` and ``x'`` (its reverse density).

Example:
    >>> import jax, jax.numpy as jnp
    >>> y = jnp.arange(10.0)
    >>> ll = lambda x, idx: -0.5 * (y[idx] - x[0]) ** 2
    >>> grad = gradient_estimator(lambda x: 0.0, ll, 10, jnp.arange(10))
    >>> float(grad(jnp.zeros(1))[0])   # the full-data gradient when S = all the data
    45.0
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp

from .proxy import TaylorProxy, proxy_residual, proxy_sum

__all__ = ["minibatch_log_density", "gradient_estimator", "random_batch"]


def random_batch(key: jax.Array, population_size: int, batch_size: int) -> jax.Array:
    """``batch_size`` indices drawn uniformly with replacement from ``range(N)`` (O(b))."""
    return jax.random.randint(key, (batch_size,), 0, population_size)


def minibatch_log_density(log_prior_fn: Callable, log_likelihood_fn: Callable, population_size: int,
                          batch: jax.Array, proxy: Optional[TaylorProxy] = None) -> Callable:
    """``x -> U_S(x)`` (or ``U^cv_S(x)`` with a ``proxy``) for the mini-batch ``batch``.

    Args:
        log_prior_fn: ``x -> log p(x)`` (with any Jacobian).
        log_likelihood_fn: ``(x, indices) -> [len(indices)]`` per-datum log-likelihoods.
        population_size: N.
        batch: ``[b]`` data indices.
        proxy: optional Taylor proxy (control variate).
    """
    n, b = population_size, batch.shape[0]
    if proxy is None:
        return lambda x: log_prior_fn(x) + (n / b) * jnp.sum(log_likelihood_fn(x, batch))
    residual = proxy_residual(log_likelihood_fn, proxy)
    return lambda x: log_prior_fn(x) + proxy_sum(proxy, x) + (n / b) * jnp.sum(residual(x, batch))


def gradient_estimator(log_prior_fn: Callable, log_likelihood_fn: Callable, population_size: int,
                       batch: jax.Array, proxy: Optional[TaylorProxy] = None) -> Callable:
    """``x -> grad U_S(x)`` (plain) or ``grad U^cv_S(x)`` (with ``proxy``); costs ``b``
    per-datum gradients (of ``l_n - h_n`` with a proxy) per call."""
    return jax.grad(minibatch_log_density(log_prior_fn, log_likelihood_fn, population_size, batch, proxy))
