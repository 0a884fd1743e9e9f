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

from ..racing import make_data_bins, taylor_control_variate

__all__ = ["DataSpaceControlVariate"]


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
        idx = jnp.unique(jnp.linspace(0, self.size - 1, 8).astype(jnp.int32))
        ours = jax.vmap(lambda y: self.datum_log_likelihood_fn(values, y))(self.bins.data[idx])
        model = model_log_likelihood(values, idx)
        ours, model = np.asarray(ours, np.float64), np.asarray(model, np.float64)
        bad = ~np.isclose(ours, model, rtol=1e-3, atol=1e-3 * (1 + np.abs(model).max()))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"{name}.datum_log_likelihood_fn disagrees with the model at data index {int(idx[i])}: "
                f"{ours[i]:.6g} vs {model[i]:.6g}; it must return log p(data[n] | values) for datum n"
            )
