r"""MAP and Laplace fits on flat parameters: the package's one home for them (no NumPyro).

The start of :class:`~subsample_mcmc.numpyro.RacingMH` and the reference point of its
Taylor proxy: several mini-batch Adam ascents from different initial points (vmapped),
the best by the *full-data* log posterior, then a safeguarded full-data Newton polish
and a check of gradient against curvature.  The ARCH pseudopriors, the logistic
references of the benchmarks and the Laplace bandit posterior use the same pieces.

The Laplace approximation at a mode ``x_hat`` of ``log p(x)`` (Tierney & Kadane 1986) is

    p(x) ~ N(x_hat, P^{-1}),   P = -nabla^2 log p(x_hat),
    log Z ~ log p(x_hat) + p/2 log 2 pi - 1/2 log det P,

the Gaussian pseudopriors of Carlin & Chib's product space (App. C.2 of Chen &
Ghahramani 2016) and the evidences that check them.

* :func:`log_density_sum` -- full-data log posteriors ``log p(x) + sum_n l_n(x)`` of M
  points in one chunked pass (M x N per-datum evaluations, never an N x M array).
* :func:`adam_ascent` -- mini-batch Adam (cost O(steps x batch), not O(N)); a step from
  a point whose mini-batch log posterior is not finite is taken back.
* :func:`last_finite` -- bisection along a segment from a point of finite log posterior
  to one where it is not (a support boundary): the last finite point.
* :func:`newton_ascent` -- Newton steps on the full-data log posterior, each accepted
  only if the log posterior stays finite and increases (backtracking; when the step was
  cut by a non-finite value, bisection up to the support boundary).  Where the Hessian
  is not negative definite the step uses its absolute eigenvalues (an ascent direction).
* :func:`jacobi_scale` -- ``1/sqrt(|H_ii|)``: the basis in which the pieces below do their float32
  linear algebra (a raw-covariate design's Hessian has condition ~1e12, its scaled one that of the
  covariates' correlations).
* :func:`newton_decrement` -- ``g^T (-H)^{-1} g``: twice the log-posterior gain a Newton
  step promises; near zero at a mode, and about ``p`` for a point one posterior standard
  deviation away in each of ``p`` directions.
* :func:`laplace_approximation` -- ``N(x_hat, P^{-1})`` and ``log Z`` from a mode and its
  Hessian (curvature floored where it is flat or wrong-signed);
  :func:`fit_laplace` -- Newton to the mode of a full-data log density, then that.
* :func:`inverse_mass` -- a proposal's inverse mass matrix (dense or diagonal) from a
  precision.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["log_density_sum", "adam_schedule", "adam_ascent", "last_finite", "newton_ascent",
           "newton_decrement", "jacobi_scale", "NewtonInfo", "LaplaceApproximation", "laplace_approximation", "fit_laplace",
           "inverse_mass"]


#: at most this many per-datum evaluations are made in one piece (no chunk loop): XLA reads the data
#: contiguously there, while a loop's dynamic chunk offsets become gathers, several times slower on CPU
_ONE_PASS = 1 << 19


def log_density_sum(log_prior_fn: Callable, log_likelihood_fn: Callable, points: jax.Array,
                    population_size: int, chunk_size: int = 4096) -> jax.Array:
    """``[M]`` full-data log posteriors of the ``[M, p]`` flat ``points`` (one pass, M x N
    per-datum evaluations: in one piece up to ``_ONE_PASS`` of them, else chunked, the last
    chunk padded and masked, so the likelihood is traced once).

    Args:
        log_prior_fn: ``flat -> scalar`` (prior and Jacobian terms).
        log_likelihood_fn: ``(flat, indices) -> [len(indices)]`` per-datum log-likelihoods.
    """
    n, m = int(population_size), points.shape[0]
    if n * m <= _ONE_PASS:  # one evaluation over arange(N): contiguous reads, where a loop's chunks gather
        every = jnp.arange(n)
        return jax.vmap(lambda x: log_prior_fn(x) + jnp.sum(log_likelihood_fn(x, every)))(points)
    chunk = max(1, min(n, max(64, chunk_size // max(m, 1))))
    num_chunks = -(-n // chunk)

    def body(k, total):
        pos = k * chunk + jnp.arange(chunk)
        idx = jnp.minimum(pos, n - 1)
        per = jax.vmap(lambda x: log_likelihood_fn(x, idx))(points)
        return total + jnp.sum(jnp.where(pos < n, per, 0.0), axis=1)

    return jax.lax.fori_loop(0, num_chunks, body, jax.vmap(log_prior_fn)(points))


def adam_schedule(steps: int, learning_rate: float = 0.05, final_rate: float = 1e-4) -> jax.Array:
    """``[2, steps]`` Adam rates: a constant phase at ``learning_rate``, then a phase
    decaying exponentially from ``learning_rate / 5`` to ``final_rate`` (damping the
    mini-batch noise)."""
    t = jnp.arange(steps) / max(steps, 1)
    start = learning_rate / 5
    return jnp.stack([jnp.full((steps,), learning_rate), start * (final_rate / start) ** t])


def adam_ascent(objective: Callable, x0: jax.Array, key: jax.Array, rates: jax.Array,
                b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> jax.Array:
    """Maximise ``objective(x, key)`` (a mini-batch log posterior) by Adam with the
    per-step rates ``rates`` (one step each; the moments start at zero).

    A step whose starting point has a non-finite mini-batch objective (for instance
    outside a data-dependent support) is taken back; non-finite gradient entries count
    as zero.  Returns the last point whose mini-batch objective was finite.  Traceable
    and vmappable (restarts: ``jax.vmap`` over ``x0`` and ``key``); ``rates`` is an
    array, so phases with different schedules share one compiled loop.
    """

    def body(carry, xs):
        x, good, m, v, t = carry
        k, rate = xs
        f, g = jax.value_and_grad(objective)(x, k)
        ok = jnp.isfinite(f)
        x = jnp.where(ok, x, good)
        g = jnp.where(ok & jnp.isfinite(g), g, 0.0)
        t = t + 1
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        step = rate * (m / (1 - b1 ** t)) / (jnp.sqrt(v / (1 - b2 ** t)) + eps)
        return (x + step, x, m, v, t), None

    zero = jnp.zeros_like(x0)
    keys = jax.random.split(key, rates.shape[0])
    (_, good, _, _, _), _ = jax.lax.scan(body, (x0, x0, zero, zero, jnp.zeros((), x0.dtype)), (keys, rates))
    return good


BOUNDARY_MARGIN_ULPS = 8


def _step_inside(point: jax.Array, toward: jax.Array, ulps: int = BOUNDARY_MARGIN_ULPS) -> jax.Array:
    """``point`` moved ``ulps`` representable numbers toward ``toward``, coordinate by
    coordinate (where they differ): off a support boundary found by bisection, by a margin
    that another program's rounding of the same log posterior cannot cross (the bisection's
    last finite point is within one rounding of the boundary; a program compiled
    differently, e.g. the start check, may round it to the other side)."""
    for _ in range(ulps):
        point = jnp.where(point != toward, jnp.nextafter(point, toward), point)
    return point


def _keep_inside(values_fn: Callable, point: jax.Array, toward: jax.Array, f: jax.Array, active):
    """``(point', f')``: :func:`_step_inside` where ``active`` and its value is finite, else
    ``(point, f)``.  One ``values_fn`` pass, and none when nothing is active (a real branch,
    except under ``vmap``): a search that met no boundary pays nothing."""

    def inside(_):
        inner = _step_inside(point, toward)
        f_inner = values_fn(inner)
        use = active & jnp.isfinite(f_inner)
        return jnp.where(use[..., None] if point.ndim > use.ndim else use, inner, point), jnp.where(use, f_inner, f)

    return jax.lax.cond(jnp.any(active), inside, lambda _: (point, f), None)


def last_finite(values_fn: Callable, good: jax.Array, bad: jax.Array, f_good: jax.Array,
                active, iters: int = 40):
    """Bisection on the segments from ``good[m]`` (finite value ``f_good[m]``) to
    ``bad[m]`` (not finite), for the ``[M, p]`` points where ``active[m]``: the last finite
    points found and their values (the others unchanged).  ``values_fn``: ``[M, p] ->
    [M]``, one pass for all M per round; at most ``iters`` rounds, fewer once no active
    bracket still moves in floating point.  The point returned is then moved
    :data:`BOUNDARY_MARGIN_ULPS` representable numbers back toward ``good`` (one more pass;
    kept where still finite), so that the boundary is not within the rounding of another
    program that evaluates the same log posterior."""
    lo0 = jnp.zeros(good.shape[:1], good.dtype)

    def point(t):
        return good + t[:, None] * (bad - good)

    def cond(c):
        lo, hi, _, i = c
        apart = jnp.any(point(lo) != point(hi), axis=1) & active
        return (i < iters) & jnp.any(apart)

    def body(c):
        lo, hi, f_lo, i = c
        mid = 0.5 * (lo + hi)
        f = values_fn(point(mid))
        ok = jnp.isfinite(f) & active
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid), jnp.where(ok, f, f_lo), i + 1

    lo, _, f, _ = jax.lax.while_loop(cond, body, (lo0, lo0 + 1, f_good, jnp.zeros((), jnp.int32)))
    return _keep_inside(values_fn, point(lo), good, f, active & (lo > 0))


#: :func:`jacobi_scale` floors ``|H_ii|`` at this fraction of the largest (a flat or zero-curvature coordinate
#: keeps a finite scale; ratios of 1e10 between coordinates, income in dollars beside an intercept, stay exact)
_JACOBI_FLOOR = 1e-12


def jacobi_scale(hess: jax.Array) -> jax.Array:
    """``[p]`` Jacobi scales ``D_i = 1 / sqrt(|H_ii|)`` of a Hessian (or precision), guarded: ``|H_ii|`` floored
    at :data:`_JACOBI_FLOOR` of the largest (and at the dtype's smallest normal), 1 where it is not finite or
    every diagonal entry is 0.

    In the basis ``x = D z`` the matrix is ``D H D``, unit diagonal: a design with raw covariates (an
    intercept, age, age squared up to 4,096, income in dollars) has ``H_ii`` spread over ten orders of
    magnitude and a condition number ~1e12 that float32 eigen-solvers cannot resolve (they found it "not
    negative definite" at the mode), while ``D H D``'s condition number is that of the covariates'
    correlations.  Newton's step, its decrement, the Laplace floor and the inverse mass matrix are computed
    there (affine invariance: the same in exact arithmetic, what the scaling changes is the rounding).

    Example:
        >>> import jax.numpy as jnp
        >>> [float(v) for v in jacobi_scale(-jnp.diag(jnp.array([4.0, 1e8])))]
        [0.5, 9.999999747378752e-05]
    """
    d = jnp.abs(jnp.diagonal(hess))
    d = jnp.where(jnp.isfinite(d), d, 0.0)
    top = jnp.max(d)
    floor = jnp.maximum(_JACOBI_FLOOR * top, jnp.finfo(hess.dtype).tiny)
    return jnp.where(top > 0, 1.0 / jnp.sqrt(jnp.maximum(d, floor)), jnp.ones_like(d))


def _scaled(grad, hess):
    """``(D, D g, D H D)`` with ``D = jacobi_scale(H)``."""
    s = jacobi_scale(hess)
    return s, s * grad, s[:, None] * hess * s[None, :]


def newton_decrement(grad: jax.Array, hess: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(g^T (-H)^{-1} g, H negative definite)``; the decrement is ``inf`` where ``H`` is not.
    Computed in the Jacobi-scaled basis (:func:`jacobi_scale`): ``(Dg)^T (-DHD)^{-1} (Dg)``."""
    _, grad, hess = _scaled(grad, hess)
    eig = jnp.linalg.eigvalsh(hess)
    negdef = jnp.all(eig < 0) & jnp.all(jnp.isfinite(eig))
    safe = jnp.where(negdef, hess, -jnp.eye(hess.shape[0], dtype=hess.dtype))
    dec = -grad @ jnp.linalg.solve(safe, grad)
    return jnp.where(negdef, dec, jnp.inf), negdef


def _ascent_direction(grad, hess):
    """Newton direction ``-H^{-1} g`` with the eigenvalues of the Jacobi-scaled ``DHD``
    (:func:`jacobi_scale`) replaced by ``-|lambda|`` (floored at 1e-6 of the largest): an ascent
    direction whatever the curvature, ``D (|DHD|)^{-1} D g``."""
    s, grad, hess = _scaled(grad, hess)
    lam, q = jnp.linalg.eigh(hess)
    mag = jnp.abs(lam)
    mag = jnp.maximum(mag, 1e-6 * jnp.max(mag) + jnp.finfo(hess.dtype).tiny)
    return s * (q @ ((q.T @ grad) / mag))


class NewtonInfo(NamedTuple):
    """What the polish did: Newton steps taken, whether it ended on a support boundary
    (a coordinate held at the edge, or the last step cut by a non-finite log posterior, or
    every trial step non-finite), the final log posterior and Newton decrement (over the
    coordinates not held), whether the final Hessian is negative definite, and ``held``
    (``[p]`` bool): the coordinates the edge holds at the returned point."""

    steps: jax.Array
    at_boundary: jax.Array
    value: jax.Array
    decrement: jax.Array
    negative_definite: jax.Array
    held: jax.Array


def _hold(grad, hess, held):
    """``(g, H)`` restricted to the coordinates not ``held``: held gradients 0, their rows and
    columns of ``H`` those of ``-I`` (so the Newton direction leaves them where they are)."""
    free = ~held
    both = free[:, None] & free[None, :]
    # -I scaled to the Hessian's own size, so that the eigenvalue floor of _ascent_direction is unchanged
    scale = jnp.max(jnp.abs(jnp.diagonal(hess))) + jnp.finfo(hess.dtype).tiny
    eye = jnp.eye(hess.shape[0], dtype=hess.dtype)
    return jnp.where(free, grad, 0.0), jnp.where(both, hess, -scale * eye * held[:, None])


def _edge_sides(value_fn, x, grad, hess, side):
    """Which coordinates of ``x`` (a point a few representable numbers inside a support
    boundary) the boundary holds: ``side_i = sign(g_i)`` where one short step along
    ``sign(g_i) e_i`` (a thousandth of the posterior's scale there,
    ``1 / sqrt(max(-H_ii, g_i^2))``, and at least ``4 BOUNDARY_MARGIN_ULPS`` representable
    numbers) makes the log posterior non-finite; ``side`` elsewhere.  One ``value_fn`` pass per
    coordinate."""
    scale = 1.0 / jnp.sqrt(jnp.maximum(jnp.maximum(-jnp.diagonal(hess), grad ** 2), jnp.finfo(x.dtype).tiny))
    ulp = jnp.abs(jnp.nextafter(x, jnp.where(grad > 0, jnp.inf, -jnp.inf)) - x)
    step = jnp.sign(grad) * jnp.maximum(1e-3 * scale, 4 * BOUNDARY_MARGIN_ULPS * ulp)
    probes = x + jnp.diag(step)
    blocked = ~jnp.isfinite(jax.lax.map(value_fn, probes)) & (grad != 0)
    return jnp.where(blocked & (side == 0), jnp.sign(grad), side)


def newton_ascent(value_fn: Callable, grad_hess_fn: Callable, x: jax.Array, value: jax.Array,
                  max_steps: int, tol: float = 1e-3, boundary_iters: int = 40):
    """Safeguarded full-data Newton ascent from ``x`` (whose log posterior is ``value``).

    Each iteration computes ``(g, H, aux) = grad_hess_fn(x)`` (one pass) and stops when
    the Newton decrement is below ``tol`` or ``max_steps`` steps were taken; otherwise it
    backtracks ``t = 1, 1/2, ...`` (one ``value_fn`` pass each) until ``value_fn(x + t d)``
    is finite and larger than ``value`` (less its floating-point rounding, ``32 eps
    |value|``: in float32 the last steps' gains near the mode are below the rounding of an
    N-term sum, and refusing them leaves the point a fraction of a posterior sd off the
    mode).  When the step ``2t`` was refused for a non-finite value, the support boundary
    lies between: bisection moves the point up to it (then a few representable numbers
    back inside, :data:`BOUNDARY_MARGIN_ULPS`).  No acceptable step (the trial point no longer differs from ``x`` in floating
    point): stop.  The gradient and Hessian returned are those at the returned point.

    At a support boundary the ascent goes on along it (an active-set Newton): a step cut by
    the boundary, or none possible, marks the coordinates it holds (:func:`_edge_sides`: one
    short step along the gradient leaves the support), and later Newton steps move only the
    others, until their decrement is below ``tol``.  A coordinate is released when its
    gradient turns back inside.  Without this the polish stopped where the first step met the
    edge: a shifted exponential's log rate stayed up to 47 posterior sds from its mode, and the
    initial mass matrix (floored at ``g^2`` there) scaled it about 400 times too small in variance
    (``benchmarks/support_edge.py``).

    Args:
        value_fn: ``flat -> scalar`` full-data log posterior (may be ``-inf``/``nan``).
        grad_hess_fn: ``flat -> (gradient [p], Hessian [p, p], aux)`` of the same
            function (``aux``: anything computed with them, e.g. a Taylor proxy).
    Returns:
        ``(x, grad, hess, aux, NewtonInfo)``.
    """
    g0, h0, aux0 = jax.eval_shape(grad_hess_fn, x)
    zeros = lambda s: jnp.zeros(s.shape, s.dtype)  # noqa: E731

    def cond(c):
        return c[-2]

    def body(c):
        x, f, _, _, _, k, was_at_boundary, side, _, it = c
        g, h, aux = grad_hess_fn(x)
        side = jnp.where(jnp.sign(g) == side, side, 0)  # released where the gradient turned back inside
        held = side != 0
        gf, hf = _hold(g, h, held)
        dec, _ = newton_decrement(gf, hf)
        # the polish along a boundary gets a second budget of steps (the first may be spent reaching it)
        go = (k < jnp.where(jnp.any(held), 2 * max_steps, max_steps)) & (dec > tol) & jnp.isfinite(f)
        x_new, f_new, found, cut, wall = _line_search(value_fn, x, _ascent_direction(gf, hf), f, go, boundary_iters)
        x_new = jnp.where(found, x_new, x)
        # the edge met: which coordinates it holds (one pass each, only then)
        side_new = jax.lax.cond(cut | wall, lambda _: _edge_sides(value_fn, x_new, g, h, side),
                                lambda _: side, None)
        at_boundary = jnp.any(held) | jnp.where(found, cut, jnp.where(go, wall, was_at_boundary))
        # a coordinate newly held without a step: once more with it held (at most p times in a row)
        more = (found | (go & jnp.any(side_new != side))) & (it < 2 * (max_steps + x.shape[0]))
        return (x_new, jnp.where(found, f_new, f), g, h, aux, k + found.astype(k.dtype), at_boundary, side_new,
                more, it + 1)

    init = (x, value, zeros(g0), zeros(h0), jax.tree.map(zeros, aux0), jnp.zeros((), jnp.int32),
            jnp.zeros((), bool), jnp.zeros(x.shape, x.dtype), jnp.ones((), bool), jnp.zeros((), jnp.int32))
    x, f, g, h, aux, k, at_boundary, side, _, _ = jax.lax.while_loop(cond, body, init)
    held = (side != 0) & (jnp.sign(g) == side)
    gf, hf = _hold(g, h, held)
    dec, _ = newton_decrement(gf, hf)
    _, negdef = newton_decrement(g, h)
    return x, g, h, aux, NewtonInfo(k, at_boundary | jnp.any(held), f, dec, negdef, held)


def _line_search(value_fn, x, d, f0, go, bisections):
    """Backtracking ``t = 1, 1/2, ...`` along ``d`` until ``value_fn(x + t d)`` is finite
    and above ``f0``; when the longer step ``2t`` was non-finite, then ``bisections``
    bisection steps between ``t`` and ``2t`` move up to the support boundary.  One
    ``value_fn`` evaluation per iteration, in a single loop.

    Returns ``(x_new, f_new, found, cut, wall)``: ``cut``, the step ended at a boundary;
    ``wall``, no step was found because the shortest step that still moves ``x`` was
    non-finite.
    """
    one = jnp.ones((), x.dtype)

    # state: trial t, bracket (lo, hi), f(lo), mode (0 backtrack, 1 bisect, 2 done),
    # last trial non-finite, bisection count
    def cond(c):
        return c[4] < 2

    # a full-data log posterior is a sum of N terms: in float32 its rounding (up to
    # ~eps |f| as the chunk sums accumulate, 0.01-0.1 at N ~ 1e5-1e6) hides the last
    # Newton steps' gains (1/2 decrement < 0.1 within a fraction of a posterior sd of the
    # mode); backtracking accepts a trial within that rounding of f0
    slack = 32.0 * jnp.finfo(x.dtype).eps * jnp.abs(f0)

    def body(c):
        t, lo, hi, f_lo, mode, prev_bad, i = c
        f = value_fn(x + t * d)
        good = jnp.isfinite(f) & (f > jnp.where(mode == 0, f0 - slack, f_lo))
        # backtracking
        to_bisect = good & prev_bad
        bt_mode = jnp.where(good, jnp.where(to_bisect, 1, 2), 0)
        bt_lo, bt_hi = jnp.where(good, t, lo), jnp.where(to_bisect, 2 * t, hi)
        bt_t = jnp.where(to_bisect, 1.5 * t, 0.5 * t)
        stuck = jnp.all(x + bt_t * d == x) | (bt_t < 2.0 ** -60)
        bt_mode = jnp.where(~good & stuck, 2, bt_mode)  # nothing left to try
        # bisection between lo (finite) and hi (not)
        bi_lo, bi_hi = jnp.where(good, t, lo), jnp.where(good, hi, t)
        bi_t = 0.5 * (bi_lo + bi_hi)
        bi_mode = jnp.where((i + 1 >= bisections) | jnp.all(x + bi_lo * d == x + bi_hi * d), 2, 1)
        bisect = mode == 1
        return (jnp.where(bisect, bi_t, bt_t), jnp.where(bisect, bi_lo, bt_lo), jnp.where(bisect, bi_hi, bt_hi),
                jnp.where(good, f, f_lo), jnp.where(bisect, bi_mode, bt_mode),
                jnp.where(bisect, prev_bad, ~jnp.isfinite(f)), i + bisect.astype(i.dtype))

    init = (one, 0 * one, 0 * one, f0, jnp.where(go, 0, 2), jnp.zeros((), bool), jnp.zeros((), jnp.int32))
    _, lo, hi, f_lo, _, prev_bad, _ = jax.lax.while_loop(cond, body, init)
    found = go & (lo > 0)
    cut = found & (hi > 0)
    # a step cut by the support boundary ends a few representable numbers inside it (one more pass)
    x_new, f_new = _keep_inside(value_fn, x + lo * d, x, f_lo, cut)
    return x_new, f_new, found, cut, go & ~found & prev_bad



class LaplaceApproximation(NamedTuple):
    """``N(mode, precision^{-1})`` with ``scale_tril`` the Cholesky factor of the
    covariance ``precision^{-1}``; ``log_density`` is ``log p(mode)`` and ``log_evidence``
    the Laplace estimate ``log p(mode) + p/2 log 2 pi - 1/2 log det precision``."""

    mode: jax.Array
    precision: jax.Array
    scale_tril: jax.Array
    log_density: jax.Array
    log_evidence: jax.Array


def laplace_approximation(mode: jax.Array, hessian: jax.Array, log_density=0.0,
                          floor: float = 1e-6) -> LaplaceApproximation:
    r"""The Laplace approximation at ``mode`` from the Hessian ``H`` of ``log p`` there.

    ``P = -H`` symmetrised and Jacobi-scaled (:func:`jacobi_scale`, ``D P D``), with each eigenvalue of
    ``D P D`` floored at ``floor * max(1, lambda_max)``
    (a flat or wrong-signed direction gets a wide but proper Gaussian instead of an
    infinite variance), then ``Sigma = P^{-1} = L L'``::

        log Z = log p(mode) + p/2 log 2 pi + sum_i log L_ii.

    Example:
        >>> import jax.numpy as jnp
        >>> la = laplace_approximation(jnp.zeros(2), -jnp.diag(jnp.array([4.0, 1.0])))
        >>> [round(float(v), 3) for v in jnp.diagonal(la.scale_tril)]
        [0.5, 1.0]
    """
    mode = jnp.asarray(mode)
    p = -0.5 * (hessian + hessian.T)
    # in the Jacobi-scaled basis (jacobi_scale): P = D^-1 (D P D) D^-1, Sigma = D (D P D)^-1 D
    s = jacobi_scale(p)
    lam, vec = jnp.linalg.eigh(s[:, None] * p * s[None, :])
    lam = jnp.maximum(lam, floor * jnp.maximum(1.0, jnp.max(lam)))
    precision = ((vec * lam) @ vec.T) / s[:, None] / s[None, :]
    scale_tril = s[:, None] * jnp.linalg.cholesky((vec / lam) @ vec.T)
    d = mode.shape[0]
    log_evidence = log_density + 0.5 * d * jnp.log(2 * jnp.pi) + jnp.sum(jnp.log(jnp.diagonal(scale_tril)))
    return LaplaceApproximation(mode, precision, scale_tril, jnp.asarray(log_density, mode.dtype), log_evidence)


def fit_laplace(log_density_fn: Callable, x0: jax.Array, max_steps: int = 50, tol: float = 1e-8,
                floor: float = 1e-6) -> tuple[LaplaceApproximation, NewtonInfo]:
    r"""Mode of a log density by safeguarded Newton ascent (:func:`newton_ascent`) from
    ``x0``, then :func:`laplace_approximation` there.

    For log densities cheap enough to differentiate twice in one go (a full-data
    logistic regression, one ARCH order); :class:`~subsample_mcmc.numpyro.RacingMH` uses
    the same pieces with mini-batch Adam restarts in front.  Traceable and vmappable.

    Example:
        >>> import jax.numpy as jnp
        >>> f = lambda x: -0.5 * jnp.sum((x - 3.0) ** 2 / jnp.array([1.0, 4.0]))
        >>> la, info = fit_laplace(f, jnp.zeros(2))
        >>> [round(float(v), 4) for v in la.mode], [round(float(v), 4) for v in jnp.diagonal(la.scale_tril)]
        ([3.0, 3.0], [1.0, 2.0])
    """

    def grad_hess(x):
        return jax.grad(log_density_fn)(x), jax.hessian(log_density_fn)(x), ()

    x, _, hess, _, info = newton_ascent(log_density_fn, grad_hess, x0, log_density_fn(x0), max_steps, tol)
    return laplace_approximation(x, hess, info.value, floor), info


def inverse_mass(precision: jax.Array, dense: bool) -> jax.Array:
    """A proposal's inverse mass matrix from a precision ``P`` (a Laplace approximation):
    dense ``D (D P D)^{-1} D`` (:func:`jacobi_scale`) with each eigenvalue's inverse of the scaled
    ``D P D`` clipped to ``[1e-12, 1e6]`` (1 where it is not positive: no curvature information), or
    the diagonal ``1 / P_ii`` (at most 1e6; 1 where ``P_ii`` is not positive).  The clip is in the
    scaled basis: in the raw one a coefficient of income in dollars has variance ~1e-12 and an
    eigen-solver in float32 cannot separate it from the design's other scales."""
    if not dense:
        diag = jnp.diagonal(precision)
        inv = jnp.where(diag > 0, 1.0 / jnp.maximum(diag, jnp.finfo(precision.dtype).tiny), 1.0)
        return jnp.clip(inv, 0.0, 1e6)
    sym = 0.5 * (precision + precision.T)
    s = jacobi_scale(sym)
    lam, vec = jnp.linalg.eigh(s[:, None] * sym * s[None, :])
    inv = jnp.clip(jnp.where(lam > 0, 1.0 / jnp.maximum(lam, 1e-10), 1.0), 1e-12, 1e6)
    return s[:, None] * ((vec * inv) @ vec.T) * s[None, :]
