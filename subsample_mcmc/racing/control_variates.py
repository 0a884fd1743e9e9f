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

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["DataBins", "make_data_bins", "TaylorControlVariate", "taylor_control_variate"]


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
