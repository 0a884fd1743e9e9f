r"""Data-space control variates for racing rewards (Sec. 3.4, Eq. 11; App. C.2).

When the reward is a per-datum log-likelihood, ``l_{i,n} = log p(y_n | i)``, its
second-order Taylor expansion in *data space* around a reference point ``y_hat``

    h_{i,n} = l_i(y_hat) + g_i^T (y_n - y_hat) + 1/2 (y_n - y_hat)^T H_i (y_n - y_hat)   (Eq. 11)

has an expectation over the population that needs only the data's first two
moments about ``y_hat``::

    E_n[h_{i,n}] = l_i(y_hat) + g_i^T E[y - y_hat] + 1/2 tr(H_i E[(y - y_hat)(y - y_hat)^T]).

The race then reads the residual rewards ``l_{i,n} - h_{i,n} + E_n[h_{i,n}]``, which
have the same means and, when ``h`` tracks ``l``, a variance smaller by orders of
magnitude.

Several reference points (App. C.2): the data are cut into bins (quantiles of a
one-dimensional projection by default), every datum uses its own bin's point, and
the bin moments are precomputed once, so a race costs O(bins x arms x p^2) for the
expansion plus O(points read).  Points far from their reference can be *always read
exactly* (``exact_fraction``): their log-likelihoods are summed exactly in every race
and the race runs over the remaining population only.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["ArmControlVariates", "DataBins", "FeatureProxyTable", "LinearFeatureProxy", "make_data_bins",
           "TaylorControlVariate", "feature_proxy_table", "fill_exact_sums", "linear_feature_proxy",
           "taylor_control_variate"]


class DataBins(NamedTuple):
    """Precomputed binning of a data set for data-space control variates.

    Attributes:
        data: ``[N, p]`` data.
        bin_of: ``[N]`` bin of every datum.
        reference: ``[K, p]`` reference point of every bin.
        weight: ``[K]`` fraction of the *raced* population in each bin.
        first_moment: ``[K, p]`` mean of ``y - reference`` over the raced points of a bin.
        second_moment: ``[K, p, p]`` mean of ``(y - ref)(y - ref)^T`` over the raced points.
        raced_indices: ``[N']`` indices the race samples from.
        exact_indices: ``[N - N']`` indices always read exactly (may be empty).
    """

    data: jax.Array
    bin_of: jax.Array
    reference: jax.Array
    weight: jax.Array
    first_moment: jax.Array
    second_moment: jax.Array
    raced_indices: jax.Array
    exact_indices: jax.Array


def make_data_bins(
    data,
    *,
    num_bins: int = 100,
    exact_fraction: float = 0.0,
    bin_of=None,
    distance=None,
) -> DataBins:
    """Bin ``data`` (``[N]`` or ``[N, p]``) and precompute the moments (O(N), once).

    Args:
        data: the data the rewards are a function of.
        num_bins: number of quantile bins of the data's first principal component.
        exact_fraction: fraction of points (farthest from their bin's reference, in
            units of the data's standard deviation) that every race reads exactly.
        bin_of: optional ``[N]`` integer bin assignment to use instead.
        distance: optional ``[N]`` distance of every point from its reference, used to
            choose the ``exact_fraction`` points read exactly (default: the Euclidean
            distance to the bin mean in units of the data's standard deviations).  Give
            it when the rewards depend on the data through low-dimensional features
            (App. C.2 measures it in the 2-D feature space of the ARCH model).

    The reference point of a bin is the mean of its points; the moments about it
    are taken over the raced points only.
    """
    y = np.asarray(data, dtype=np.float64)
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[0] < 2:
        raise ValueError(f"data must have shape [N] or [N, p] with N >= 2, got {np.shape(data)}")
    if not np.all(np.isfinite(y)):
        raise ValueError("data contains NaN or infinite values; clean them before binning")
    if not (0.0 <= exact_fraction < 1.0):
        raise ValueError(f"exact_fraction must lie in [0, 1), got {exact_fraction}")
    n, p = y.shape
    if bin_of is None:
        if num_bins < 1:
            raise ValueError(f"num_bins must be >= 1, got {num_bins}")
        centred = y - y.mean(0)
        if p > 1:
            _, _, vt = np.linalg.svd(centred, full_matrices=False)
            proj = centred @ vt[0]
        else:
            proj = centred[:, 0]
        k = min(num_bins, n)
        edges = np.quantile(proj, np.linspace(0, 1, k + 1)[1:-1])
        bins = np.searchsorted(edges, proj, side="right")
    else:
        bins = np.asarray(bin_of, dtype=np.int64)
        if bins.shape != (n,) or bins.min() < 0:
            raise ValueError("bin_of must be a non-negative integer array of shape [N]")
    # dense relabelling
    labels, bins = np.unique(bins, return_inverse=True)
    k = len(labels)
    ref = np.stack([y[bins == b].mean(0) for b in range(k)])
    if distance is None:
        scale = y.std(0) + 1e-300
        dist = np.linalg.norm((y - ref[bins]) / scale, axis=1)
    else:
        dist = np.asarray(distance, dtype=np.float64)
        if dist.shape != (n,) or not np.all(np.isfinite(dist)):
            raise ValueError(f"distance must be a finite array of shape ({n},), got shape {dist.shape}")
    n_exact = int(np.floor(exact_fraction * n))
    order = np.argsort(-dist, kind="stable")
    exact = np.sort(order[:n_exact])
    raced_mask = np.ones(n, bool)
    raced_mask[exact] = False
    raced = np.nonzero(raced_mask)[0]
    rb = bins[raced]
    rcounts = np.bincount(rb, minlength=k)
    dev = y[raced] - ref[rb]
    first = np.zeros((k, p))
    second = np.zeros((k, p, p))
    np.add.at(first, rb, dev)
    np.add.at(second, rb, dev[:, :, None] * dev[:, None, :])
    denom = np.maximum(rcounts, 1)
    first /= denom[:, None]
    second /= denom[:, None, None]
    f = jnp.float32
    return DataBins(
        data=jnp.asarray(y, f),
        bin_of=jnp.asarray(bins, jnp.int32),
        reference=jnp.asarray(ref, f),
        weight=jnp.asarray(rcounts / len(raced), f),
        first_moment=jnp.asarray(first, f),
        second_moment=jnp.asarray(second, f),
        raced_indices=jnp.asarray(raced, jnp.int32),
        exact_indices=jnp.asarray(exact, jnp.int32),
    )


class TaylorControlVariate(NamedTuple):
    r"""Eq. 11 evaluated for one race: per-bin Taylor coefficients of every arm.

    Without features the expansion is in the data space itself.  With *linear
    features* ``z_{i,n} = P_i y_n + c_i`` (``feature_matrix`` ``P`` ``[D, p', p]``,
    ``feature_shift`` ``c`` ``[D, p']``) it is in each arm's own feature space, around
    the bin means ``z_hat_{i,k} = P_i y_hat_k + c_i``:

        h_{i,n} = l_i(z_hat) + g^T (z - z_hat) + 1/2 (z - z_hat)^T H (z - z_hat),

    and the population mean needs only the bin moments of ``y`` mapped through
    ``P_i``: ``E[z - z_hat] = P_i m_k``, ``E[(z - z_hat)(z - z_hat)^T] = P_i S_k P_i^T``.
    For a reward that depends on ``y`` only through ``z`` this is the same expansion as
    in data space, at a cost O(p') instead of O(p^2) per reward (the ARCH model's
    ``z_{j,t} = (r_t, alpha_0 + alpha^T r^2_{t-j:t-1})`` of App. C.2).

    Attributes:
        bins: the :class:`DataBins`.
        value: ``[K, D]`` log-likelihood of each arm at each reference point.
        grad: ``[K, D, p']`` gradients in data (or feature) space.
        hess: ``[K, D, p', p']`` Hessians in data (or feature) space.
        feature_matrix: ``None`` or ``[D, p', p]``.
        feature_shift: ``None`` or ``[D, p']``.
    """

    bins: DataBins
    value: jax.Array
    grad: jax.Array
    hess: jax.Array
    feature_matrix: Optional[jax.Array] = None
    feature_shift: Optional[jax.Array] = None

    @property
    def num_arms(self) -> int:
        return self.value.shape[1]

    @property
    def size(self) -> int:
        return int(self.bins.data.shape[0])

    @property
    def raced_indices(self) -> jax.Array:
        return self.bins.raced_indices

    @property
    def exact_indices(self) -> jax.Array:
        return self.bins.exact_indices

    def _reference_features(self) -> jax.Array:
        return (jnp.einsum("dqp,kp->kdq", self.feature_matrix, self.bins.reference)
                + self.feature_shift[None])

    def values(self, indices: jax.Array) -> jax.Array:
        """``h_{i,n}`` for the data points ``indices``: ``[D, len(indices)]``."""
        b = self.bins.bin_of[indices]
        y = self.bins.data[indices]
        if self.feature_matrix is None:
            dy = y - self.bins.reference[b]  # [m, p]
            lin = jnp.einsum("mdp,mp->md", self.grad[b], dy)
            quad = 0.5 * jnp.einsum("mp,mdpq,mq->md", dy, self.hess[b], dy)
        else:
            # z - z_hat = P_i (y - y_hat): one small product per arm and point
            dz = jnp.einsum("dqp,mp->mdq", self.feature_matrix, y - self.bins.reference[b])
            lin = jnp.einsum("mdq,mdq->md", self.grad[b], dz)
            quad = 0.5 * jnp.einsum("mdq,mdqr,mdr->md", dz, self.hess[b], dz)
        return (self.value[b] + lin + quad).T

    def mean(self) -> jax.Array:
        """``E_n[h_{i,n}]`` over the raced population: ``[D]``."""
        bins = self.bins
        if self.feature_matrix is None:
            first, second = bins.first_moment[:, None], bins.second_moment[:, None]
        else:
            p_mat = self.feature_matrix
            first = jnp.einsum("dqp,kp->kdq", p_mat, bins.first_moment)
            second = jnp.einsum("dqp,kps,drs->kdqr", p_mat, bins.second_moment, p_mat)
        lin = jnp.einsum("kdp,kdp->kd", self.grad, jnp.broadcast_to(first, self.grad.shape))
        quad = 0.5 * jnp.einsum("kdpq,kdpq->kd", self.hess, jnp.broadcast_to(second, self.hess.shape))
        return jnp.einsum("k,kd->d", bins.weight, self.value + lin + quad)


def taylor_control_variate(
    arm_log_likelihood_fn: Callable[[jax.Array], jax.Array],
    bins: DataBins,
    features: Optional[tuple] = None,
) -> TaylorControlVariate:
    """Build the Eq. 11 control variate for ``arm_log_likelihood_fn``.

    Without ``features``, ``arm_log_likelihood_fn(y) -> [D]`` maps one datum ``y`` (shape
    ``[p]``) to the per-arm log-likelihoods ``log p(y | i)``.  With
    ``features=(P, c)`` (``[D, p', p]``, ``[D, p']``), it maps the per-arm features
    ``z`` (shape ``[D, p']``, ``z_i = P_i y + c_i``) to ``[D]``, arm ``i`` depending on
    ``z_i`` only.  Gradients and Hessians come from ``jax.jacfwd`` / ``jax.hessian``
    at each bin's reference point.  Traceable: call it inside the jitted step that
    runs the race (cost independent of N).

    Example:
        >>> import jax.numpy as jnp
        >>> bins = make_data_bins(jnp.linspace(-1, 1, 1000), num_bins=10)
        >>> cv = taylor_control_variate(lambda y: jnp.stack([-(y[0] - 0.1)**2, -y[0]**2]), bins)
        >>> cv.mean().shape
        (2,)
    """
    if features is None:
        ref = bins.reference
        value = jax.vmap(arm_log_likelihood_fn)(ref)
        grad = jax.vmap(jax.jacfwd(arm_log_likelihood_fn))(ref)
        hess = jax.vmap(jax.hessian(arm_log_likelihood_fn))(ref)
        return TaylorControlVariate(bins, value, grad, hess)
    p_mat, shift = (jnp.asarray(a) for a in features)
    if p_mat.ndim != 3 or shift.shape != p_mat.shape[:2] or p_mat.shape[2] != bins.data.shape[1]:
        raise ValueError(
            f"features must be (P [D, p', {bins.data.shape[1]}], c [D, p']), got shapes "
            f"{p_mat.shape} and {shift.shape}"
        )
    cv = TaylorControlVariate(bins, None, None, None, p_mat, shift)
    zref = cv._reference_features()  # [K, D, p']
    arms = jnp.arange(p_mat.shape[0])

    def one_arm(i, z_i, z_all):
        return arm_log_likelihood_fn(z_all.at[i].set(z_i))[i]

    def per_bin(z_all):
        value = arm_log_likelihood_fn(z_all)
        grad = jax.vmap(lambda i: jax.grad(one_arm, argnums=1)(i, z_all[i], z_all))(arms)
        hess = jax.vmap(lambda i: jax.hessian(one_arm, argnums=1)(i, z_all[i], z_all))(arms)
        return value, grad, hess

    value, grad, hess = jax.vmap(per_bin)(zref)
    return cv._replace(value=value, grad=grad, hess=hess)


# ----------------------------------------------------------------- linear-feature proxies


class LinearFeatureProxy(NamedTuple):
    r"""A per-datum Taylor proxy in *linear features* (Bardenet et al.'s proxies, summed as in Eq. 11).

    Many likelihoods see their parameters only through a few linear features of the datum:
    ``l_n(theta) = phi(z_n, w_n)`` with ``z_n = A(theta) x_n`` (``A`` a ``[p', p]`` matrix,
    ``x_n`` the datum's covariates, with a constant column for intercepts and scale
    parameters, ``w_n`` what the features do not mix, e.g. the response): a GLM's linear
    predictor, or the ARCH model's ``z_t = (alpha_0 + alpha^T r^2_{t-q:t-1}, nu)`` (App. C.2).
    Around a reference ``A*`` (the MAP) the proxy is the Taylor polynomial of ``phi`` in ``z``
    at each datum's own ``z*_n = A* x_n``,

    .. math::

        h_n(A) = \sum_{k \le K} \frac{1}{k!} D^k\phi(z^*_n, w_n)[\Delta A\, x_n]^{\otimes k},
        \qquad \Delta A = A - A^*,

    so ``l_n - h_n = O(|Delta A x_n|^{K+1})`` per datum, and its population sum needs only
    moments of the covariates weighted by the derivatives, precomputed once in O(N (p' p)^K):

    .. math::

        \sum_n h_n(A) = \sum_n \phi^*_n + \langle M_1, \Delta A\rangle
            + \tfrac12 \langle M_2, \Delta A^{\otimes 2}\rangle + \tfrac16 \langle M_3, \Delta A^{\otimes 3}\rangle,
        \quad M_k = \sum_n D^k\phi_n \otimes x_n^{\otimes k}.

    Unlike the parameter-space proxy (:mod:`subsample_mcmc.kernels.proxy`), a datum's proxy
    costs O(p' p) (no derivative of the model at the datum: the coefficients ``D^k phi_n`` are
    stored), and the expansion is in the features, where the likelihood is smooth even when
    the parameters are constrained.  Sums run over the raced points (``raced_indices`` of
    :func:`linear_feature_proxy`).

    Attributes:
        covariates: ``[N, p]``.
        reference: ``[p', p]``, ``A*``.
        value, d1, d2, d3: ``[N]``, ``[N, p']``, ``[N, p', p']``, ``[N, p', p', p']`` (zero for order 2).
        total: ``sum_n phi*_n``; m1 ``[p', p]``, m2 ``[p', p, p', p]``, m3 ``[p', p, p', p, p', p]``
            (``None`` for order 2): moments over the raced points; with ``active``, flattened and over the
            active entries only (``[k]``, ``[k, k]``, ``[k, k, k]``).
        active: ``None``, or the flat indices into ``A`` (row-major) of the entries that can move
            (:meth:`restricted`'s ``active``): the sums then contract moments over those entries only,
            ``O(k^3)`` instead of ``O((p' p)^3)`` per call.  ARCH's ``nu`` row has one entry that moves
            out of ``q + 1``, so ``k = q + 2`` instead of ``2 (q + 1)``.  A matrix whose other entries
            differ from ``A*`` gets a NaN sum, never a wrong one; a race's :meth:`ArmControlVariates.mean`
            then sums the proxy's per-datum values over the raced points instead (O(N), correct).
    """

    covariates: jax.Array
    reference: jax.Array
    value: jax.Array
    d1: jax.Array
    d2: jax.Array
    d3: jax.Array
    total: jax.Array
    m1: jax.Array
    m2: jax.Array
    m3: Optional[jax.Array]
    active: Optional[jax.Array] = None

    def values(self, matrix: jax.Array, indices: jax.Array) -> jax.Array:
        """``h_n(A)`` at the data points ``indices``: ``[len(indices)]``."""
        x = self.covariates[indices]
        dz = x @ (matrix - self.reference).T.astype(x.dtype)  # [m, p']
        return _taylor_polynomial(self.value[indices], self.d1[indices], self.d2[indices],
                                  None if self.m3 is None else self.d3[indices], dz)

    def restricted(self, raced_indices, active=None) -> "LinearFeatureProxy":
        """The same proxy with its sums over the points ``raced_indices`` only (host-side, O(N (p' p)^K)).
        ``active``: flat indices (row-major) of the entries of ``A`` that can move (default all); the
        sums are then kept over those entries only (see ``active`` above)."""
        raced = np.asarray(raced_indices)
        x = np.asarray(self.covariates, np.float64)[raced]
        d = [np.asarray(v, np.float64)[raced] for v in (self.d1, self.d2, self.d3)]
        f = self.d1.dtype
        moments = [_weighted_moments(d[k - 1], x, k) for k in range(1, 3 if self.m3 is None else 4)]
        if active is not None:
            act = np.asarray(active, np.int64).reshape(-1)
            q = self.reference.size
            moments = [m.reshape((q,) * (k + 1))[np.ix_(*[act] * (k + 1))] for k, m in enumerate(moments)]
        moments = [jnp.asarray(m, f) for m in moments] + [None] * (3 - len(moments))
        return self._replace(total=jnp.asarray(np.asarray(self.value, np.float64)[raced].sum(), f),
                             m1=moments[0], m2=moments[1], m3=moments[2],
                             active=None if active is None else jnp.asarray(act, jnp.int32))

    def moved_outside(self, matrix: jax.Array) -> jax.Array:
        """Whether ``matrix`` differs from ``A*`` in an entry outside ``active`` (False without ``active``)."""
        if self.active is None:
            return jnp.zeros((), bool)
        v = (matrix - self.reference).astype(self.m1.dtype).reshape(-1)
        return jnp.any(v.at[self.active].set(0.0) != 0.0)

    def total_sum(self, matrix: jax.Array) -> jax.Array:
        """``sum_n h_n(A)`` over the raced points (NaN where ``A`` moved an entry outside ``active``:
        :meth:`ArmControlVariates.mean` then sums the per-datum values instead)."""
        v = (matrix - self.reference).astype(self.m1.dtype).reshape(-1)  # (a, i) flattened, as the moments
        moved_outside = None
        if self.active is not None:
            moved_outside = self.moved_outside(matrix)
            v = v[self.active]
        q = v.shape[0]
        # matrix-vector products on the moments' contiguous memory: jnp.einsum("aibjck,ai,bj,ck->") transposed
        # the [p', p]^3 tensor at every call (13x slower for ARCH(30), most of a sweep's proxy cost)
        s = self.total + self.m1.reshape(q) @ v + 0.5 * (self.m2.reshape(q, q) @ v) @ v
        if self.m3 is not None:
            s = s + ((self.m3.reshape(q * q, q) @ v).reshape(q, q) @ v) @ v / 6.0
        return s if moved_outside is None else jnp.where(moved_outside, jnp.nan, s)


def _taylor_polynomial(value, d1, d2, d3, dz):
    r"""``value + d1[a] dz_a + 1/2 d2[a, b] dz_a dz_b (+ 1/6 d3[a, b, c] dz_a dz_b dz_c)`` over the trailing
    feature axes, per datum: :meth:`LinearFeatureProxy.values`."""
    pf = dz.shape[-1]
    if pf > 3:
        h = value + jnp.einsum("ma,ma->m", d1, dz) + 0.5 * jnp.einsum("ma,mab,mb->m", dz, d2, dz)
        if d3 is not None:
            h = h + jnp.einsum("ma,mb,mc,mabc->m", dz, dz, dz, d3) / 6.0
        return h
    # a few features (ARCH's two, a GLM's one): the contractions as sums of elementwise products, which XLA
    # fuses into one loop; on CPU the einsums' small reductions and batched dots cost far more per datum
    z = [dz[:, a] for a in range(pf)]
    h = value
    for a in range(pf):
        h = h + d1[:, a] * z[a]
        for b in range(pf):
            h = h + 0.5 * d2[:, a, b] * z[a] * z[b]
            if d3 is not None:
                for c in range(pf):
                    h = h + d3[:, a, b, c] * z[a] * z[b] * z[c] / 6.0
    return h


def _weighted_moments(w: np.ndarray, x: np.ndarray, order: int) -> np.ndarray:
    """``sum_n w_n[a..] x_n[i] ..`` as ``[p', p, p', p, ..]`` (``order`` feature indices), by BLAS over
    chunks of rows (the outer powers of ``x`` take at most ~2^22 numbers at a time: ``[N, p^3]`` at once
    would be gigabytes for ARCH(30))."""
    n, p = x.shape
    pf = w.shape[1] if w.ndim > 1 else 1
    w = w.reshape(n, -1)  # [n, p'^order]
    m = np.zeros((w.shape[1], p ** order))
    chunk = max(1, (1 << 22) // p ** order)
    for s in range(0, n, chunk):
        xs = x[s:s + chunk]
        xk = xs
        for _ in range(order - 1):  # outer powers of x: [chunk, p^order]
            xk = (xk[:, :, None] * xs[:, None, :]).reshape(xs.shape[0], -1)
        m += w[s:s + chunk].T @ xk
    m = m.reshape((pf,) * order + (p,) * order)
    perm = [v for k in range(order) for v in (k, order + k)]
    return m.transpose(perm)


def _feature_derivatives(log_likelihood_fn: Callable, has_response: bool, order: int):
    """The jitted, vmapped ``(phi, D phi, D^2 phi, D^3 phi)`` of ``log_likelihood_fn`` in its features,
    kept per function (the candidate models of a model race often share it); a callable that
    cannot be hashed gets a program of its own."""
    try:
        return _cached_feature_derivatives(log_likelihood_fn, has_response, order)
    except TypeError:  # unhashable callable object
        return _build_feature_derivatives(log_likelihood_fn, has_response, order)


def _build_feature_derivatives(log_likelihood_fn: Callable, has_response: bool, order: int):
    def phi(z, wi):
        return log_likelihood_fn(z, wi if has_response else None)

    def derivs(z, wi):
        d1 = jax.grad(phi)(z, wi)
        d2 = jax.hessian(phi)(z, wi)
        d3 = jax.jacfwd(jax.hessian(phi))(z, wi) if order == 3 else jnp.zeros(z.shape * 3, z.dtype)
        return phi(z, wi), d1, d2, d3

    return jax.jit(jax.vmap(derivs))


# a few entries: each keeps its function (and what the function closes over) alive
_cached_feature_derivatives = functools.lru_cache(maxsize=8)(_build_feature_derivatives)


def linear_feature_proxy(
    log_likelihood_fn: Callable,
    reference_matrix,
    covariates,
    response=None,
    *,
    order: int = 3,
    raced_indices=None,
    chunk_size: int = 4096,
    sums: bool = True,
) -> LinearFeatureProxy:
    """Build :class:`LinearFeatureProxy` at ``A* = reference_matrix`` (once, O(N (p' p)^order)).

    Args:
        log_likelihood_fn: ``(z [p'], w) -> log p(datum)``, ``w`` a row of ``response``
            (``None`` when not given).
        reference_matrix: ``A*`` ``[p', p]``.
        covariates: ``[N, p]`` ``x_n``.
        response: ``[N]`` or ``[N, k]`` rows ``w_n``, or ``None``.
        order: 2 or 3, the Taylor order in the features.
        raced_indices: the points the moments sum over (default all).
        chunk_size: points per vectorised derivative evaluation.
        sums: ``False`` leaves the moments out (``total``, ``m1``, ``m2`` are ``None``):
            :meth:`LinearFeatureProxy.restricted` computes them once the raced points are known.

    Example:
        >>> import numpy as np, jax.numpy as jnp
        >>> x = np.c_[np.ones(500), np.random.default_rng(0).normal(size=500)]
        >>> y = (x[:, 1] > 0).astype(float)
        >>> ll = lambda z, w: w * z[0] - jnp.logaddexp(0.0, z[0])   # logistic, z = beta^T x
        >>> prox = linear_feature_proxy(ll, np.array([[0.0, 1.0]]), x, y)
        >>> a = jnp.array([[0.1, 1.2]])
        >>> exact = float(sum(ll(jnp.asarray(a @ xi), yi) for xi, yi in zip(x, y)))
        >>> abs(float(prox.total_sum(a)) - exact) < 0.05
        True
    """
    if order not in (2, 3):
        raise ValueError(f"order must be 2 or 3, got {order!r}")
    x = np.asarray(covariates, np.float64)
    if x.ndim != 2:
        raise ValueError(f"covariates must have shape [N, p], got {x.shape}")
    n, p = x.shape
    a_ref = np.asarray(reference_matrix, np.float64)
    if a_ref.ndim != 2 or a_ref.shape[1] != p:
        raise ValueError(f"reference_matrix must have shape [p', {p}], got {a_ref.shape}")
    w = np.zeros((n, 0)) if response is None else np.asarray(response, np.float64)
    if w.shape[0] != n:
        raise ValueError(f"response must have {n} rows like covariates, got {w.shape[0]}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(w))):
        raise ValueError("covariates and response must be finite")
    dtype = jnp.result_type(float)
    fn = _feature_derivatives(log_likelihood_fn, response is not None, order)
    z_ref = x @ a_ref.T
    size = min(chunk_size, n)  # every chunk this size (the last padded): one compilation, shared by the
    parts = []                 # arms of a race that share ``log_likelihood_fn`` (ModelSelection's models)
    for s in range(0, n, size):
        rows = np.minimum(np.arange(s, s + size), n - 1)
        out = fn(jnp.asarray(z_ref[rows], dtype), jnp.asarray(w[rows], dtype))
        parts.append([np.asarray(v, np.float64)[:min(size, n - s)] for v in out])
    value, d1, d2, d3 = (np.concatenate([pt[k] for pt in parts]) for k in range(4))
    if not all(np.all(np.isfinite(v)) for v in (value, d1, d2, d3)):
        bad = int(np.argmax(~np.isfinite(value) | ~np.all(np.isfinite(d1), axis=1)))
        raise ValueError(f"the log-likelihood or its derivatives in the features are not finite at the "
                         f"reference, data point {bad}: the reference must be a point of positive likelihood")
    f = dtype
    proxy = LinearFeatureProxy(
        covariates=jnp.asarray(x, f), reference=jnp.asarray(a_ref, f), value=jnp.asarray(value, f),
        d1=jnp.asarray(d1, f), d2=jnp.asarray(d2, f), d3=jnp.asarray(d3, f), total=None, m1=None, m2=None,
        m3=None if order == 2 else ())
    if not sums:  # per-datum values only; ``restricted`` adds the sums once the raced points are known
        return proxy
    return proxy.restricted(np.arange(n) if raced_indices is None else raced_indices)


@jax.tree_util.register_pytree_node_class
class FeatureProxyTable:
    r"""Several :class:`LinearFeatureProxy` s' per-datum coefficients in one row per datum, for one race over them.

    Each proxy's polynomial is written over its distinct monomials of the feature change
    ``dz = (A - A*) x_n`` (a multi-index ``a`` of order ``|a| <= K``, ``a! = prod_i a_i!``):

    .. math::

        h_n(A) = \sum_{|a| \le K} c_{n,a}\, dz^a, \qquad c_{n,a} = \frac{D^{|a|}\phi(z^*_n, w_n)[a]}{a!},

    the same polynomial as :meth:`LinearFeatureProxy.values` (``1/k!`` times the ``k!/a!`` orderings of
    ``a``): 10 coefficients instead of 15 for two features at order 3.  Row ``n`` holds every proxy's
    ``c_n`` and then the covariate columns, each distinct column once (candidate models that share
    covariates, such as ARCH orders or nested regressions, share them here).  A race gathers one
    contiguous row per point for all its arms and evaluates the polynomials with the points along the
    minor axis, where XLA vectorises them.  Every proxy's feature change comes from one product,
    ``[dz_1; ...; dz_D] = [Delta A_1 P_1; ...; Delta A_D P_D] x_n`` over the covariate columns the proxies
    use together (``P_i`` places proxy ``i``'s columns among them, zero elsewhere), so the gathered
    columns are read once for all proxies instead of being sliced out for each.  On the DJIA's six ARCH
    models (N = 37,900) this cut the control variates' time per raced point to 0.18-0.34 of the
    proxies' own ``values`` (``benchmarks/arch_race_point_cost.py``), whose separate gathers of
    ``[m, p']``-shaped arrays leave the arithmetic on a minor axis of 2.

    Attributes:
        table: ``[N, W]``.
        layout: per proxy ``(start, monomials, columns)`` (static): the column of its first coefficient,
            its multi-indices (tuples of feature indices, by order), the table columns of its covariates.
    """

    def __init__(self, table, layout):
        self.table, self.layout = table, layout

    def tree_flatten(self):
        return (self.table,), self.layout

    @classmethod
    def tree_unflatten(cls, layout, children):
        return cls(children[0], layout)

    def values(self, matrices, references, indices: jax.Array) -> jax.Array:
        """``h_{i,n}(A_i)`` of every proxy at the points ``indices``: ``[len(layout), len(indices)]``."""
        if len(matrices) != len(self.layout):
            raise ValueError(f"the table holds {len(self.layout)} proxies, got {len(matrices)} feature matrices")
        g = self.table[indices].T  # [W, m]: one gathered row per point, then points on the minor axis
        # every proxy's feature change in one product over the covariate columns they use together:
        # dz = D x with D the proxies' (A_i - A*_i) stacked, each placed in its own covariates' columns
        # (zero elsewhere), so the columns are read once for all proxies, not sliced out for each
        used = sorted({c for _, _, cols in self.layout for c in cols})
        lo, hi = used[0], used[-1] + 1
        x = g[lo:hi] if used == list(range(lo, hi)) else g[np.asarray(used)]
        where = {c: k for k, c in enumerate(used)}
        blocks = []
        for (_, _, cols), a, ref in zip(self.layout, matrices, references):
            d = (a - ref).astype(g.dtype)
            place = np.asarray([where[c] for c in cols])
            blocks.append(jnp.zeros((d.shape[0], len(used)), g.dtype).at[:, place].set(d))
        dz_all = jnp.concatenate(blocks) @ x  # [sum_i p'_i, m]
        out, row = [], 0
        for (start, monomials, cols), blk in zip(self.layout, blocks):
            dz, row = dz_all[row:row + blk.shape[0]], row + blk.shape[0]
            h, powers = g[start], {}
            for t, mono in enumerate(monomials[1:], 1):
                powers[mono] = dz[mono[0]] if len(mono) == 1 else powers[mono[:-1]] * dz[mono[-1]]
                h = h + g[start + t] * powers[mono]
            out.append(h)
        return jnp.stack(out)


def feature_proxy_table(proxies) -> FeatureProxyTable:
    """The :class:`FeatureProxyTable` of ``proxies`` (host-side, once; their per-datum arrays must be concrete)."""
    coefficients, columns, seen, layout, start = [], [], {}, [], 0
    for p in proxies:
        order = 2 if p.m3 is None else 3
        monomials = [m for k in range(order + 1) for m in itertools.combinations_with_replacement(
            range(p.reference.shape[0]), k)]
        derivs = [np.asarray(v, np.float64) for v in (p.value, p.d1, p.d2, p.d3)]
        coefficients.append(np.stack(
            [derivs[len(m)][(slice(None),) + m] / math.prod(math.factorial(m.count(i)) for i in set(m))
             for m in monomials], axis=1))
        x = np.asarray(p.covariates)
        cols = []
        for c in range(x.shape[1]):
            key = x[:, c].tobytes()
            if key not in seen:
                seen[key] = len(columns)
                columns.append(x[:, c])
            cols.append(seen[key])
        layout.append((start, tuple(monomials), cols))
        start += len(monomials)
    table = np.concatenate(coefficients + [np.stack(columns, axis=1)], axis=1)
    layout = tuple((s, m, tuple(start + c for c in cols)) for s, m, cols in layout)
    return FeatureProxyTable(jnp.asarray(table, proxies[0].value.dtype), layout)


class ArmControlVariates(NamedTuple):
    """Per-arm :class:`LinearFeatureProxy` control variates for one race, each at its arm's
    current feature matrix ``A_i``; the arms share the split into raced and exactly-read points.
    The race reads ``l_{i,n} - h_{i,n}(A_i) + E_n[h_{i,n}(A_i)]`` (Eq. 11's form).  With ``table``
    (:func:`feature_proxy_table` of ``proxies``, arm ``i`` its ``i``-th entry) the per-datum values
    come from its one row per point; the proxies still give the sums.

    ``exact_sums`` (optional, ``[D]``): each arm's log-likelihood summed over ``exact_indices``,
    ``S_i = sum_{n in E} l_{i,n}``, when the caller already has them; the race then adds them to the
    arms' offsets (Eq. 11's exactly-read part) instead of reading those points again.  An entry that
    is NaN is unknown: whoever builds the race must fill it (:func:`fill_exact_sums`) before the race.
    """

    proxies: tuple
    matrices: tuple
    raced_indices: jax.Array
    exact_indices: jax.Array
    table: Optional[FeatureProxyTable] = None
    exact_sums: Optional[jax.Array] = None

    @property
    def num_arms(self) -> int:
        return len(self.proxies)

    @property
    def size(self) -> int:
        return int(self.proxies[0].covariates.shape[0])

    def mean(self) -> jax.Array:
        n = self.raced_indices.shape[0]

        def one(p, a):
            if p.active is None:
                return p.total_sum(a)
            # an entry outside the proxy's active ones moved (its moments do not cover it): the sum over the
            # raced points' values instead, a real branch that costs O(N) only then
            return jax.lax.cond(p.moved_outside(a), lambda: jnp.sum(p.values(a, self.raced_indices)),
                                lambda: p.total_sum(a))

        return jnp.stack([one(p, a) for p, a in zip(self.proxies, self.matrices)]) / n

    def values(self, indices: jax.Array) -> jax.Array:
        if self.table is not None:
            return self.table.values(self.matrices, tuple(p.reference for p in self.proxies), indices)
        return jnp.stack([p.values(a, indices) for p, a in zip(self.proxies, self.matrices)])


def fill_exact_sums(cv: ArmControlVariates, arm_sums) -> ArmControlVariates:
    r"""``cv`` with every unknown (NaN) entry of ``cv.exact_sums`` filled: entry ``i`` becomes
    ``arm_sums[i]()``, the arm's log-likelihood summed over ``cv.exact_indices``,
    ``S_i = sum_{n in E} l_{i,n}`` (the exactly-read part of Eq. 11's estimate
    ``S_i + (N - |E|) (mean_raced(l_i - h_i) + E[h_i])``), computed in a real
    branch (``lax.cond``) that runs only when the entry is unknown.  A known entry costs nothing;
    ``cv.exact_sums=None`` is returned unchanged (the race then reads the points itself).

    Args:
        cv: the race's control variates.
        arm_sums: one zero-argument function per arm returning ``sum_{n in E} l_{i,n}`` (a scalar).
    """
    if cv.exact_sums is None:
        return cv
    known = jnp.asarray(cv.exact_sums)
    filled = [jax.lax.cond(jnp.isnan(known[i]), lambda f=f: jnp.asarray(f(), known.dtype), lambda i=i: known[i])
              for i, f in enumerate(arm_sums)]
    return cv._replace(exact_sums=jnp.stack(filled))
