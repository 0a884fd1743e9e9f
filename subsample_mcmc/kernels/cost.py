r"""What a step computes, in per-datum likelihood-evaluation equivalents.

A racing step evaluates more than plain log-likelihoods: a Taylor-proxy residual
``l_n(x) - h_n(x)`` needs the second directional derivative of ``l_n`` (nested
``jax.jvp``), a Langevin proposal needs per-datum gradients, a proxy refresh needs a
gradient and a Hessian per datum.  Counting each as "one evaluation" understates the
cost several-fold.  :func:`evaluation_equivalents` measures the ratio once, from the
compiled programs' own operation counts (XLA's cost analysis: floating-point
operations and transcendental functions), so that ``num_likelihood_evals`` reports
every computation in units of one per-datum log-likelihood evaluation.
"""

from __future__ import annotations

from typing import Callable

import jax

__all__ = ["operation_count", "evaluation_equivalents"]


def operation_count(fn: Callable, *args) -> tuple[float, float]:
    """``(flops, transcendentals)`` of ``jax.jit(fn)(*args)`` from XLA's cost analysis.

    ``args`` may be arrays or ``jax.ShapeDtypeStruct``s (nothing is run).  Returns
    ``(nan, nan)`` when the backend reports no cost analysis.
    """
    try:
        cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    except Exception:  # noqa: BLE001 -- some backends do not implement it
        return float("nan"), float("nan")
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost = cost or {}
    return float(cost.get("flops", float("nan"))), float(cost.get("transcendentals", 0.0))


def evaluation_equivalents(fn: Callable, reference: Callable, *args) -> float:
    r"""Cost of ``fn(*args)`` in units of ``reference(*args)``, at least 1.

    The ratio is taken on floating-point operations and on transcendental functions
    separately and the larger is returned (an over- rather than an under-count).
    Falls back to 1 when the backend reports no cost analysis.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> f = lambda th, x: jnp.log1p(jnp.exp(x * th))
        >>> g = lambda th, x: jax.vmap(jax.grad(f), (None, 0))(th, x)
        >>> evaluation_equivalents(g, f, 1.0, jnp.ones(64)) >= 1.0
        True
    """
    f_flops, f_trans = operation_count(fn, *args)
    r_flops, r_trans = operation_count(reference, *args)
    ratios = []
    if r_flops > 0 and f_flops == f_flops:
        ratios.append(f_flops / r_flops)
    if r_trans > 0:
        ratios.append(f_trans / r_trans)
    return max([1.0] + ratios)
