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

Third order (``order=3``): ``h_n`` gains ``1/6 T_n[D, D, D]``, ``T_n`` the per-datum third
derivative tensor, and the known sum ``1/6 T[D, D, D]`` with ``T = sum_n T_n`` (``p^3``
numbers, one pass at the reference costing about ``p^2`` likelihood gradients per
datum).  The residual is then of fourth order in ``D``.  Why it matters: a race's cost
is dominated by its rare near-ties (``|log u - Lambda|`` small), which run to stages
reading a large part of the data, and their share scales with the spread of the
residual differences (the stage-``k`` width is ``N sigma / sqrt(n_k)``).  On the
logistic regressions of ``benchmarks/peers_real_data.py``, at pairs of independent
draws from the Laplace ``t_5`` (the default proposal's reach), the third-order term cuts
that spread by a factor of 40-80 (``benchmarks/results/proxy_residual_spread.md``).

One proxy serves every caller: the racing MH kernels (two arms: current and proposed
point), the control-variate gradient (:mod:`~subsample_mcmc.kernels.gradients`), and
races over several models or orders, each with its own reference point -- ``jax.vmap``
the functions below over a leading arm axis of ``theta`` and of the proxy's fields (the
constant ``value_sum`` makes proxies of different arms comparable).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from ..racing.race import first_batch_spread

__all__ = ["TaylorProxy", "taylor_proxy", "proxy_sum", "proxy_per_datum", "proxy_residual", "residual_spread",
           "curvature_mismatch"]


class TaylorProxy(NamedTuple):
    """Reference point and full-data sums of a parameter-space proxy:
    ``value_sum = sum_n l_n(theta_hat)`` (the constant), ``G``, ``H`` and, for a
    third-order proxy, ``T`` (``None``: second order)."""

    reference: jax.Array  # flat theta_hat [p]
    grad_sum: jax.Array  # G [p]
    hess_sum: jax.Array  # H [p, p]
    value_sum: jax.Array = 0.0  # sum_n l_n(theta_hat)
    third_sum: Optional[jax.Array] = None  # T [p, p, p], or None (second order)


def taylor_proxy(
    log_likelihood_fn: Callable[[jax.Array, jax.Array], jax.Array],
    reference: jax.Array,
    population_size: int,
    chunk_size: int = 4096,
    order: int = 2,
) -> TaylorProxy:
    """Build the proxy: ``sum_n l_n``, ``G`` and ``H`` (and ``T`` when ``order=3``) at
    ``reference`` summed over all N data in chunks (one O(N) pass; per datum a gradient
    and a Hessian of ``l_n``, and with ``order=3`` its third-derivative tensor).

    Args:
        log_likelihood_fn: ``(flat_theta, indices) -> [len(indices)]`` per-datum
            log-likelihoods.
        reference: flat reference point ``theta_hat``.
        order: 2 (default) or 3.
    """
    if order not in (2, 3):
        raise ValueError(f"order must be 2 or 3, got {order!r}")
    n = int(population_size)
    reference = jnp.asarray(reference)  # NumPy float64 becomes JAX's default float (x64 off: float32)
    p = reference.shape[0]

    def sums(idx, valid):
        # the chunk's sum, its gradient and Hessian (and third derivatives) from one traced copy of the
        # likelihood: forward over reverse, the value and gradient carried as auxiliary outputs
        def total(th):
            return jnp.sum(jnp.where(valid, log_likelihood_fn(th, idx), 0.0))

        def value_and_gradient(th):
            v, g = jax.value_and_grad(total)(th)
            return g, (v, g)

        if order == 2:
            h, (v, g) = jax.jacfwd(value_and_gradient, has_aux=True)(reference)
            return v, g, h

        def with_hessian(th):
            h, (v, g) = jax.jacfwd(value_and_gradient, has_aux=True)(th)
            return h, (v, g, h)

        t, (v, g, h) = jax.jacfwd(with_hessian, has_aux=True)(reference)
        return v, g, h, t

    zeros = (jnp.zeros((), reference.dtype), jnp.zeros((p,), reference.dtype), jnp.zeros((p, p), reference.dtype))
    if order == 3:  # the p^3 tensor's pass holds chunk x p^2 intermediates: smaller chunks
        zeros += (jnp.zeros((p, p, p), reference.dtype),)
        chunk_size = max(1, min(chunk_size, (1 << 20) // max(p * p, 1)))
    totals = _chunked_sum(sums, n, chunk_size, zeros)
    v, g, h = totals[:3]
    t = None if order == 2 else _symmetric(totals[3])
    return TaylorProxy(reference, g, 0.5 * (h + h.T), v, t)


def _chunked_sum(fn: Callable, n: int, chunk_size: int, zeros: tuple) -> tuple:
    """``sum over chunks of fn(indices, valid)`` for the indices ``0 .. n-1``: one ``fori_loop``, the
    last chunk padded (indices clipped to ``n - 1``) and its padding masked by ``valid``, so ``fn`` is
    traced (and compiled) once."""
    chunk = max(1, min(n, chunk_size))
    shapes = jax.eval_shape(fn, jnp.zeros((chunk,), jnp.int32), jnp.ones((chunk,), bool))
    zeros = tuple(jnp.asarray(z).astype(jnp.result_type(z, s.dtype)) for z, s in zip(zeros, shapes))

    def body(k, carry):
        pos = k * chunk + jnp.arange(chunk)
        sums = fn(jnp.minimum(pos, n - 1), pos < n)
        return tuple(a + jnp.asarray(b).astype(a.dtype) for a, b in zip(carry, sums))

    return jax.lax.fori_loop(0, -(-n // chunk), body, zeros)


def _symmetric(t: jax.Array) -> jax.Array:
    """The mean of a ``[p, p, p]`` tensor over the six permutations of its axes."""
    perms = ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))
    return sum(jnp.transpose(t, q) for q in perms) / 6.0


def proxy_sum(proxy: TaylorProxy, theta: jax.Array, with_constant: bool = False) -> jax.Array:
    """``sum_n h_n(theta) = [sum_n l_n(theta_hat)] + G^T D + 1/2 D^T H D [+ 1/6 T[D, D, D]]``,
    the constant included only ``with_constant`` (it cancels between the arms of one proxy)."""
    d = theta - proxy.reference
    out = proxy.grad_sum @ d + 0.5 * d @ proxy.hess_sum @ d
    if proxy.third_sum is not None:
        out = out + jnp.einsum("ijk,i,j,k->", proxy.third_sum, d, d, d) / 6.0
    return out + proxy.value_sum if with_constant else out


def proxy_per_datum(log_likelihood_fn, proxy: TaylorProxy, theta: jax.Array, idx: jax.Array,
                    with_constant: bool = False) -> jax.Array:
    """``h_n(theta) - l_n(theta_hat) = g_n^T D + 1/2 D^T H_n D [+ 1/6 T_n[D, D, D]]`` for
    the data ``idx`` (plus ``l_n(theta_hat)`` ``with_constant``, one more evaluation per
    datum): the directional derivatives of ``t -> l_n(theta_hat + t D)`` at 0, nested
    ``jax.jvp`` (three levels for a third-order proxy)."""
    d = theta - proxy.reference

    def along(t):
        return log_likelihood_fn(proxy.reference + t * d, idx)

    def first(t):
        return jax.jvp(along, (t,), (jnp.ones_like(t),))[1]

    zero = jnp.zeros((), theta.dtype)
    if proxy.third_sum is None:
        d1, d2 = jax.jvp(first, (zero,), (jnp.ones_like(zero),))
        out = d1 + 0.5 * d2
    else:
        def first_two(t):
            return jax.jvp(first, (t,), (jnp.ones_like(t),))

        (d1, d2), (_, d3) = jax.jvp(first_two, (zero,), (jnp.ones_like(zero),))
        out = d1 + 0.5 * d2 + d3 / 6.0
    return out + log_likelihood_fn(proxy.reference, idx) if with_constant else out


def proxy_residual(log_likelihood_fn: Callable, proxy: TaylorProxy, with_constant: bool = False) -> Callable:
    """``(theta, idx) -> l_n(theta) - [h_n(theta) - l_n(theta_hat)]``: the rewards a race
    reads with the proxy as control variate (their sum differs from ``sum_n l_n(theta)``
    by the known :func:`proxy_sum`).

    ``with_constant``: the full residual ``l_n(theta) - h_n(theta)`` (one more evaluation
    per datum, at ``theta_hat``), of third order in ``theta - theta_hat``; its sum differs
    from ``sum_n l_n(theta)`` by ``proxy_sum(..., with_constant=True)``.  Races between
    arms with *different* proxies (models, orders) need it: the per-datum values at the
    references, ``l_n(theta_hat_j)``, differ between arms by O(1)."""

    def residual(theta, idx):
        return log_likelihood_fn(theta, idx) - proxy_per_datum(log_likelihood_fn, proxy, theta, idx,
                                                                with_constant=with_constant)

    return residual


def residual_spread(log_likelihood_fn: Callable, proxy: TaylorProxy, first: jax.Array, second: jax.Array,
                    population_size: int, batch: int, chunk_size: int = 4096
                    ) -> tuple[jax.Array, jax.Array, jax.Array]:
    r"""What a race's first batch sees of the spread of its rewards, against the truth (one full-data pass).

    For the pair ``(first, second)`` the race reads ``D_n = r_n(second) - r_n(first)``, ``r_n`` the proxy
    residual (:func:`proxy_residual`); returns :func:`~subsample_mcmc.racing.race.first_batch_spread` of the
    ``N`` of them (``(se_all, se_typical, guard_sample)``, the first two in nats, the scale of the MH
    decision).  Traceable; ``N`` per-datum residuals of each point.
    """
    n = int(population_size)
    residual = proxy_residual(log_likelihood_fn, proxy)
    chunk = max(1, min(n, chunk_size))
    num = -(-n // chunk)
    idx = jnp.minimum(jnp.arange(num * chunk).reshape(num, chunk), n - 1)
    pair = jnp.stack([second, first])

    def difference(i):  # the two points vmapped: one traced copy of the likelihood
        r = jax.vmap(residual, in_axes=(0, None))(pair, i)
        return r[0] - r[1]

    d = jax.lax.map(difference, idx).reshape(-1)[:n]
    return first_batch_spread(d, batch)


def curvature_mismatch(log_likelihood_sums: Callable, proxy: TaylorProxy, center: jax.Array,
                       directions: jax.Array) -> jax.Array:
    r"""How far the proxy's curvature is from the full-data log-likelihood's, along ``directions``.

    For each direction ``v`` (rows of ``[M, p]``) the second difference of the full-data log-likelihood
    ``L(c + v) + L(c - v) - 2 L(c)`` (``log_likelihood_sums``: ``[K, p] -> [K]`` full-data sums) against
    the proxy's ``v^T H v`` (``H = sum_n H_n``, its Hessian sum; the second difference of a quadratic).
    For a twice-differentiable likelihood they agree up to third-order terms; where the log-density has a
    kink in the parameters (``|y - mu|`` of a Laplace or quantile likelihood, a hinge), automatic
    differentiation gives ``H_n = 0`` almost everywhere while ``L`` is curved, through the data that cross
    the kink: the proxy's residuals then sit on those few data, which a race's first batch misses.
    Returns, per direction, ``|second difference - v^T H v| / max(|second difference|, |v^T H v|, 1)``
    (near 0: the proxy's curvature is the likelihood's; near 1: it misses most of it).  Traceable;
    ``2 M + 1`` full-data sums."""
    c = jnp.asarray(center)
    v = jnp.asarray(directions, c.dtype)
    sums = log_likelihood_sums(jnp.concatenate([c[None], c + v, c - v]))
    m = v.shape[0]
    second = sums[1:m + 1] + sums[m + 1:] - 2.0 * sums[0]
    quadratic = jnp.einsum("mi,ij,mj->m", v, proxy.hess_sum.astype(c.dtype), v)
    return jnp.abs(second - quadratic) / jnp.maximum(jnp.maximum(jnp.abs(second), jnp.abs(quadratic)), 1.0)
