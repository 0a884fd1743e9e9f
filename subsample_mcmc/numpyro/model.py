r"""From a NumPyro model to per-datum log-likelihoods at the indices a race reads.

The only place (with the kernels of this subpackage) that touches NumPyro internals.
A :class:`ModelSubsampler` inspects a model once and then evaluates, through NumPyro's
own handlers (``substitute``, ``trace`` and a plate-index messenger), with the model
code itself and no second hand-written copy of it:

* ``log_likelihood(values, idx)``: ``[len(idx)]`` per-datum log-likelihoods
  ``log p(y_n | theta)`` of the observed sites inside the data plate, for the data
  points ``idx`` only;
* ``log_prior(values)``: every other log-density term (latent sites, observed sites
  outside the data plate), evaluated on a single datum so that it costs O(1) in N.

Model contract
--------------
* **Plain models** -- ``with numpyro.plate("data", N): numpyro.sample("y", ..., obs=y)``.
  The data plate's indices are replaced by ``idx`` and every model argument (positional
  or keyword) that is an array whose leading dimension equals N is indexed by ``idx``
  along axis 0, so the model computes the likelihood of ``idx`` only.  Arrays of
  leading size N that are *not* per-datum data must therefore not be passed as
  arguments (close over them instead).
* **HMCECS models** -- ``numpyro.plate("data", N, subsample_size=b)`` with
  ``numpyro.subsample(data, event_dim=...)``: the plate's indices are replaced by ``idx``
  and NumPyro itself subsamples the data; arguments are left alone.
* One plate holding observed sites is the data plate; with several candidates,
  ``data_plate=`` picks one (its absence is an error naming the candidates).  Latent
  sample sites inside the data plate (local latent variables) are not supported.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.distributions import biject_to
from numpyro.infer.gibbs import GIBBS_SITES_KWARG
from numpyro.primitives import Messenger

__all__ = ["ModelSubsampler", "PlateIndices"]


class PlateIndices(Messenger):
    """Replace the indices of plate ``name`` (of full size ``size``) by ``indices``."""

    def __init__(self, fn=None, *, name: str, indices, size: int):
        self.name, self.indices, self.size = name, indices, size
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] == "plate" and msg["name"] == self.name:
            msg["value"] = self.indices
            msg["args"] = (self.size, int(self.indices.shape[0]))


def _leading(x, n: int) -> bool:
    return hasattr(x, "shape") and len(np.shape(x)) >= 1 and np.shape(x)[0] == n


class ModelSubsampler:
    """Inspect ``model`` once; evaluate its likelihood on subsets of the data plate.

    Args:
        model: a NumPyro model.
        model_args, model_kwargs: arguments used to inspect the model.
        data_plate: name of the data plate when several plates hold observed sites.

    Raises:
        ValueError: no plate holds an observed site; several do and ``data_plate`` is
            missing or unknown; a latent site lives inside the data plate.
    """

    def __init__(self, model, model_args=(), model_kwargs=None, data_plate: Optional[str] = None):
        self.model = model
        model_kwargs = dict(model_kwargs or {})
        proto = handlers.trace(handlers.seed(model, 0)).get_trace(*model_args, **model_kwargs)
        plates = {n: s for n, s in proto.items() if s["type"] == "plate"}
        observed_in = {}
        for name, site in proto.items():
            if site["type"] == "sample" and site["is_observed"]:
                for frame in site["cond_indep_stack"]:
                    observed_in.setdefault(frame.name, []).append(name)
        candidates = [p for p in plates if p in observed_in]
        if data_plate is None:
            if not candidates:
                observed = [n for n, s in proto.items() if s["type"] == "sample" and s["is_observed"]]
                if not observed:
                    raise ValueError(
                        "the model has no observed sample site: subsampling needs a likelihood "
                        "(numpyro.sample(..., obs=data)) inside a data plate"
                    )
                raise ValueError(
                    f"no plate contains the observed sites {observed}; wrap the likelihood in "
                    "`with numpyro.plate('data', N): ...` so the data can be subsampled"
                )
            if len(candidates) > 1:
                raise ValueError(
                    f"several plates contain observed sites: {candidates}; pass data_plate= "
                    "to choose the one to subsample"
                )
            data_plate = candidates[0]
        elif data_plate not in plates:
            raise ValueError(f"data_plate={data_plate!r} is not a plate of the model; plates: {list(plates)}")
        elif data_plate not in candidates:
            raise ValueError(f"data_plate={data_plate!r} contains no observed site; candidates: {candidates}")
        self.plate = data_plate
        size, sub = plates[data_plate]["args"]
        self.size = int(size)
        self.subsample_style = sub is not None and sub != size
        self.data_sites = tuple(observed_in[data_plate])
        latent = {n: s for n, s in proto.items() if s["type"] == "sample" and not s["is_observed"]
                  and not s.get("infer", {}).get("enumerate") == "parallel"}
        local = [n for n, s in latent.items() if any(f.name == data_plate for f in s["cond_indep_stack"])]
        if local:
            raise ValueError(
                f"latent sites {local} live inside the data plate {data_plate!r}; local latent "
                "variables cannot be subsampled (marginalise them or move them out of the plate)"
            )
        self.latent_sites = tuple(latent)
        self.discrete_sites = tuple(n for n, s in latent.items() if s["fn"].support.is_discrete)
        self.continuous_sites = tuple(n for n in latent if n not in self.discrete_sites)
        self.transforms = {n: biject_to(latent[n]["fn"].support) for n in self.continuous_sites}
        self.prototype_trace = proto

    # -- argument handling --------------------------------------------------------
    def _slice(self, idx, model_args, model_kwargs):
        if self.subsample_style:
            return model_args, model_kwargs
        n = self.size

        def take(x):
            return x[idx] if _leading(x, n) else x

        args = tuple(jax.tree.map(take, a) if not isinstance(a, dict) else a for a in model_args)
        kwargs = {k: (v if k == GIBBS_SITES_KWARG else jax.tree.map(take, v)) for k, v in model_kwargs.items()}
        return args, kwargs

    def _trace(self, values, idx, model_args, model_kwargs):
        args, kwargs = self._slice(idx, model_args, dict(model_kwargs or {}))
        model = handlers.substitute(handlers.seed(self.model, 0), data=values)
        model = PlateIndices(model, name=self.plate, indices=idx, size=self.size)
        return handlers.trace(model).get_trace(*args, **kwargs)

    def _per_datum(self, site, m: int):
        lp = site["fn"].log_prob(site["value"])
        if site.get("mask") is not None:
            lp = jnp.where(site["mask"], lp, 0.0)
        dim = [f.dim for f in site["cond_indep_stack"] if f.name == self.plate][0]
        lp = jnp.broadcast_to(lp, jnp.broadcast_shapes(jnp.shape(lp), (m,) + (1,) * (-dim - 1)))
        lp = jnp.moveaxis(lp, dim, 0)
        return lp.reshape(m, -1).sum(1)

    # -- the two functions the kernels need -----------------------------------------
    def log_likelihood(self, values, idx, model_args=(), model_kwargs=None):
        """``[len(idx)]`` per-datum log-likelihoods at constrained ``values``."""
        idx = jnp.asarray(idx)
        tr = self._trace(values, idx, model_args, model_kwargs)
        m = idx.shape[0]
        return sum(self._per_datum(tr[name], m) for name in self.data_sites)

    def log_prior(self, values, model_args=(), model_kwargs=None):
        """All log-density terms outside the data plate's observed sites (O(1) in N)."""
        tr = self._trace(values, jnp.zeros((1,), jnp.int32), model_args, model_kwargs)
        total = jnp.zeros(())
        for name, site in tr.items():
            if site["type"] != "sample" or name in self.data_sites:
                continue
            if site["is_observed"] or name in self.latent_sites:
                lp = site["fn"].log_prob(site["value"])
                if site.get("mask") is not None:
                    lp = jnp.where(site["mask"], lp, 0.0)
                scale = site.get("scale")
                total = total + (jnp.sum(lp) if scale is None else scale * jnp.sum(lp))
        return total

    def deterministic(self, values, model_args=(), model_kwargs=None):
        """Deterministic sites outside the data plate at ``values``."""
        tr = self._trace(values, jnp.zeros((1,), jnp.int32), model_args, model_kwargs)
        return {n: s["value"] for n, s in tr.items() if s["type"] == "deterministic"
                and not any(f.name == self.plate for f in s["cond_indep_stack"])}

    # -- unconstrained parameterisation ----------------------------------------------
    def constrain(self, unconstrained: dict) -> dict:
        return {k: self.transforms[k](v) for k, v in unconstrained.items()}

    def unconstrain(self, constrained: dict) -> dict:
        return {k: self.transforms[k].inv(v) for k, v in constrained.items()}

    def log_abs_det_jacobian(self, unconstrained: dict):
        total = jnp.zeros(())
        for k, u in unconstrained.items():
            t = self.transforms[k]
            total = total + jnp.sum(t.log_abs_det_jacobian(u, t(u)))
        return total
