r"""Data-space control variates for the NumPyro kernels (Sec. 3.4, Eq. 11; App. C.2).

The paper's control variate expands each arm's per-datum log-likelihood to second
order *in data space* around per-bin reference points
(:func:`~subsample_mcmc.racing.taylor_control_variate`).  A NumPyro model does not
expose its likelihood as a function of a datum, so the user states it once:
``datum_log_likelihood_fn(values, y)`` returns ``log p(y | values)`` for one datum
``y = data[n]`` (a row of the array the bins are built on, which may stack a response
with its covariates or lags, e.g. ``z_t = (r_t, alpha_0 + alpha^T r_{t-q:t-1})``
for ARCH).  The kernels check at ``init`` that it agrees with the model on a few
data points.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..racing import linear_feature_proxy, make_data_bins, taylor_control_variate

__all__ = ["DataSpaceControlVariate", "LinearFeatureControlVariate"]


class DataSpaceControlVariate:
    """A data-space Taylor control variate for :class:`RacingGibbs` / :class:`RacingMH`.

    Args:
        datum_log_likelihood_fn: ``(values, y) -> log p(y | values)`` for one datum ``y``
            (``values``: the constrained latent values as a dict).
        data: ``[N]`` or ``[N, p]`` array, row ``n`` being datum ``n`` of the data plate.
        num_bins: quantile bins (one reference point each), 100 in App. C.2.
        exact_fraction: fraction of points, farthest from their reference, read exactly
            in every race (0.2 in App. C.2).
    """

    def __init__(self, datum_log_likelihood_fn: Callable, data, *, num_bins: int = 100, exact_fraction: float = 0.0):
        if not callable(datum_log_likelihood_fn):
            raise TypeError("datum_log_likelihood_fn must be a function (values, y) -> log p(y | values)")
        self.datum_log_likelihood_fn = datum_log_likelihood_fn
        self.bins = make_data_bins(data, num_bins=num_bins, exact_fraction=exact_fraction)

    @property
    def size(self) -> int:
        return int(self.bins.data.shape[0])

    def for_arms(self, arm_values):
        """The race's control variate for arms with latent values ``arm_values(i)``.

        ``arm_values`` is a batched dict (leading axis = arms).
        """
        fn = self.datum_log_likelihood_fn

        def per_datum(y):
            return jax.vmap(lambda v: fn(v, y))(arm_values)

        return taylor_control_variate(per_datum, self.bins)

    def validate(self, subsampler, model_args, model_kwargs) -> None:
        """Raise unless this control variate fits the model's data plate (size, values)."""
        if self.size != subsampler.size:
            raise ValueError(
                f"control_variate was built on {self.size} data points, the data plate "
                f"{subsampler.plate!r} has {subsampler.size}"
            )
        values = {k: subsampler.prototype_trace[k]["value"] for k in subsampler.latent_sites}
        self.check(lambda v, idx: subsampler.log_likelihood(v, idx, model_args, model_kwargs), values)

    def check(self, model_log_likelihood, values, name: str = "control_variate") -> None:
        """Raise if ``datum_log_likelihood_fn`` disagrees with the model on a few data points."""
        _check_against_model(
            lambda idx: jax.vmap(lambda y: self.datum_log_likelihood_fn(values, y))(self.bins.data[idx]),
            lambda idx: model_log_likelihood(values, idx), self.size,
            f"{name}.datum_log_likelihood_fn disagrees with the model",
            "it must return log p(data[n] | values) for datum n")


class LinearFeatureControlVariate:
    r"""A per-datum Taylor proxy in linear features, for :class:`~subsample_mcmc.ModelSelection`'s model race.

    For models whose datum log-likelihood sees the parameters only through a few linear
    features of the datum, ``log p(datum n | values) = log_likelihood_fn(A(values) @ x_n, w_n)``
    (``A = features_fn(values)`` a ``[p', p]`` matrix, ``x_n = covariates[n]``, ``w_n =
    response[n]``): GLMs (``z = beta^T x``), or ARCH(q) with ``z_t = (alpha_0 + alpha^T
    r^2_{t-q:t-1}, nu)`` on ``x_t = (1, r^2_{t-1}, ..)`` (App. C.2's features).  At ``init`` the
    kernel expands ``log_likelihood_fn`` in ``z`` to ``order`` around every datum's features at
    the model's MAP and precomputes the expansion's sums
    (:class:`~subsample_mcmc.racing.LinearFeatureProxy`); the race then reads residuals of
    order ``|Delta z|^{order+1}``, each costing O(p' p) beyond the model's own evaluation.
    The points with the largest residuals at a few pseudoprior draws (``exact_fraction`` of
    them, App. C.2 reads 20% of its outliers this way) are summed exactly in every race.
    ``init`` checks that ``log_likelihood_fn`` agrees with the model on a few data points.

    Args:
        features_fn: ``values -> A`` ``[p', p]`` (``values``: the model's constrained latent values,
            a dict by site name).
        log_likelihood_fn: ``(z [p'], w) -> log p(datum)``; ``w`` is a row of ``response``
            (``None`` without one).
        covariates: ``[N, p]`` rows ``x_n`` of the data plate, a constant column included where
            ``A`` needs one (intercepts, scale or shape parameters).
        response: ``[N]`` or ``[N, k]`` what the features do not mix (e.g. the observations).
        order: the Taylor order, 2 or 3 (default 3).
        exact_fraction: fraction of points read exactly in every race (default 0.01).

    Example (logistic regression, ``z = beta^T x``)::

        cv = LinearFeatureControlVariate(
            lambda v: jnp.concatenate([v["b0"][None], v["beta"]])[None],
            lambda z, w: w * z[0] - jnp.logaddexp(0.0, z[0]),
            np.c_[np.ones(len(x)), x], y)
    """

    def __init__(self, features_fn: Callable, log_likelihood_fn: Callable, covariates, response=None, *,
                 order: int = 3, exact_fraction: float = 0.01):
        if not callable(features_fn) or not callable(log_likelihood_fn):
            raise TypeError("features_fn (values -> A [p', p]) and log_likelihood_fn ((z, w) -> log p) must be "
                            "functions")
        x = np.asarray(covariates, np.float64)
        if x.ndim != 2 or x.shape[0] < 2:
            raise ValueError(f"covariates must have shape [N, p] with N >= 2, got {x.shape}")
        if response is not None and np.shape(response)[0] != x.shape[0]:
            raise ValueError(f"covariates have {x.shape[0]} rows and response {np.shape(response)[0]}: both need one "
                             "row per datum of the model's data plate, in its order")
        if order not in (2, 3):
            raise ValueError(f"order must be 2 or 3, got {order!r}")
        if not (0.0 <= float(exact_fraction) < 0.5):
            raise ValueError(f"exact_fraction must lie in [0, 0.5), got {exact_fraction}")
        self.features_fn, self.log_likelihood_fn = features_fn, log_likelihood_fn
        self.covariates = jnp.asarray(x, jnp.result_type(float))
        self.response = None if response is None else jnp.asarray(response, jnp.result_type(float))
        self.order, self.exact_fraction = int(order), float(exact_fraction)

    @property
    def size(self) -> int:
        return int(self.covariates.shape[0])

    def matrix(self, values, name: str = "control_variate") -> jax.Array:
        """``A(values)`` as a ``[p', p]`` array (checked; ``name`` names this control variate in errors)."""
        try:
            a = jnp.asarray(self.features_fn(values))
        except KeyError as e:
            raise ValueError(f"{name}: features_fn reads {e.args[0]!r}, which is not a latent site of the model; its "
                             f"sites are {sorted(values)}") from e
        p = self.covariates.shape[1]
        if a.ndim != 2 or a.shape[1] != p:
            raise ValueError(f"{name}: features_fn must return a [p', {p}] matrix, one column per covariate column "
                             f"(covariates has {p}, a constant column included where A needs an intercept or a scale), "
                             f"got shape {a.shape}")
        return a.astype(self.covariates.dtype)

    def log_likelihood_points(self, a, indices=None, data=None) -> jax.Array:
        """``log_likelihood_fn(A x_n, w_n)`` at ``indices`` (default every point).  ``data``:
        ``(covariates, response)`` in place of the stored arrays, e.g. as a jitted function's
        arguments (arrays it closes over are compiled in as constants, folded at compile time)."""
        x, w = (self.covariates, self.response) if data is None else data
        if indices is not None:
            x, w = x[indices], None if w is None else w[indices]
        z = x @ jnp.asarray(a, x.dtype).T
        if w is None:
            return jax.vmap(lambda zi: self.log_likelihood_fn(zi, None))(z)
        return jax.vmap(self.log_likelihood_fn)(z, w)

    def proxy(self, values, raced_indices=None, sums: bool = True):
        """The :class:`~subsample_mcmc.racing.LinearFeatureProxy` at ``values`` (the reference); with
        ``sums=False`` its per-datum values only (``LinearFeatureProxy.restricted`` adds the sums)."""
        return linear_feature_proxy(self.log_likelihood_fn, np.asarray(self.matrix(values)),
                                    np.asarray(self.covariates), None if self.response is None else
                                    np.asarray(self.response), order=self.order, raced_indices=raced_indices,
                                    sums=sums)

    def check(self, model_log_likelihood, values, name: str = "control_variate") -> None:
        """Raise if the features' log-likelihood disagrees with the model on a few data points."""
        a = self.matrix(values, name)
        try:
            out = self.log_likelihood_points(a, jnp.arange(2))
        except TypeError as e:
            if self.response is not None:
                raise
            raise ValueError(f"{name}: log_likelihood_fn(z, w) failed with w = None ({e}); this control variate was "
                             "built without response=, so w is None: pass response= (the observed values, one row "
                             "per datum) or make log_likelihood_fn ignore w") from e
        if out.shape != (2,):
            raise ValueError(f"{name}: log_likelihood_fn must return one datum's log-likelihood as a scalar, got shape "
                             f"{out.shape[1:]} per datum (index the features inside it, e.g. z[0])")
        _check_against_model(
            lambda idx: self.log_likelihood_points(a, idx), lambda idx: model_log_likelihood(values, idx), self.size,
            f"{name}: log_likelihood_fn(features_fn(values) @ covariates[n], response[n]) disagrees with the model",
            "covariates and response must be the rows of the model's data plate, in its order")


def _check_against_model(ours_fn, model_fn, size: int, what: str, fix: str) -> None:
    """Raise ``ValueError`` (``what``, the data index and values, ``fix``) where a control variate's
    per-datum log-likelihood disagrees with the model's at 8 spread data indices."""
    idx = jnp.unique(jnp.linspace(0, size - 1, 8).astype(jnp.int32))
    ours, model = np.asarray(ours_fn(idx), np.float64), np.asarray(model_fn(idx), np.float64)
    if ours.shape != model.shape:
        raise ValueError(f"{what}: it gives shape {ours.shape} at {idx.shape[0]} data points, the model {model.shape}; "
                         f"{fix}")
    bad = ~np.isclose(ours, model, rtol=1e-3, atol=1e-3 * (1 + np.abs(model).max()))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{what} at data index {int(idx[i])}: {ours[i]:.6g} vs {model[i]:.6g}; {fix}")
