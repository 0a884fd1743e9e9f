"""Diagnostics of discrete sites across chains: what R-hat cannot say about them.

R-hat compares the between-chain and within-chain variances of a scalar.  For a discrete site
whose chains are each constant (a chain that never left the configuration it started in), the
within-chain variance is 0: R-hat is NaN where the chains agree and infinite (NumPyro) or about
1e15 (ArviZ) where they do not, printed among the other sites' R-hats without comment.  A chain
of a coupled discrete-continuous model held in a poor configuration looks exactly like that.
:func:`check_discrete_chains` says what it means.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping, NamedTuple, Optional, Sequence

import numpy as np
from numpyro.diagnostics import split_gelman_rubin

__all__ = ["DiscreteChainReport", "check_discrete_chains"]

#: a split R-hat of a value's indicator above this is reported (Vehtari et al. 2021 recommend 1.01
#: for continuous summaries; an indicator of a rarely visited value is noisier)
RHAT_MAX = 1.05


class DiscreteChainReport(NamedTuple):
    """One scalar discrete site (one element of an array site) across chains.

    Attributes:
        site: the site's name, with ``[i, ...]`` for an element of an array site.
        modal: ``[chains]`` each chain's most frequent value.
        switch_rate: ``[chains]`` the fraction of consecutive draws whose value differs.
        constant_disagree: every chain is constant and not all at the same value (R-hat infinite).
        max_rhat: the largest split R-hat (Gelman et al. 2013, Eq. 11.4, as
            :func:`numpyro.diagnostics.split_gelman_rubin`) of the indicators ``1[x = v]`` over the values
            ``v`` seen; NaN where every chain is constant.
        problem: a sentence when the chains disagree, else ``None``.
    """

    site: str
    modal: np.ndarray
    switch_rate: np.ndarray
    constant_disagree: bool
    max_rhat: float
    problem: Optional[str]


def _by_chain(samples: Any) -> Mapping[str, np.ndarray]:
    """``{site: [chains, draws, ...]}`` from an ``MCMC``, an InferenceData/DataTree or a mapping."""
    if hasattr(samples, "get_samples") and hasattr(samples, "num_chains"):  # numpyro.infer.MCMC
        if getattr(samples, "_states", None) is None:
            raise ValueError("samples: this MCMC has no draws yet; call mcmc.run(...) before check_discrete_chains")
        return {k: np.asarray(v) for k, v in samples.get_samples(group_by_chain=True).items()}
    posterior = getattr(samples, "posterior", None)  # ArviZ InferenceData or DataTree
    if posterior is not None:
        names = list(getattr(posterior, "data_vars", posterior))
        return {k: np.asarray(posterior[k].values if hasattr(posterior[k], "values") else posterior[k])
                for k in names}
    if isinstance(samples, Mapping):
        draws = {k: np.asarray(v) for k, v in samples.items()}
        # a dict of flat draws (mcmc.get_samples() without group_by_chain) has no chain axis: its scalar
        # sites are 1-D and an array site's [draws, k] would be read as k draws of `draws` chains
        flat = [k for k, v in draws.items() if v.ndim < 2 or v.shape[0] > v.shape[1]]
        if flat:
            raise ValueError(f"samples: sites {flat} have shapes {[draws[k].shape for k in flat]}, not [chains, "
                             "draws, ...] (fewer chains than draws): pass mcmc.get_samples(group_by_chain=True), "
                             "the MCMC itself, or its InferenceData")
        return draws
    raise TypeError("samples must be a numpyro.infer.MCMC after run(), an ArviZ InferenceData/DataTree, or a "
                    f"dict {{site: [chains, draws, ...] array}} (e.g. mcmc.get_samples(group_by_chain=True)); "
                    f"got {type(samples).__name__}")


def _integer_valued(x: np.ndarray) -> bool:
    if x.dtype.kind in "biu":
        return True
    return x.dtype.kind == "f" and x.size > 0 and bool(np.all(np.isfinite(x))) and bool(np.all(x == np.round(x)))


def check_discrete_chains(samples: Any, sites: Optional[str | Sequence[str]] = None, *,
                          warn: bool = True) -> list[DiscreteChainReport]:
    r"""Report discrete sites whose chains disagree, where R-hat is NaN or blind.

    For each scalar discrete site (each element of an array site) and each value ``v`` seen, the
    split R-hat of the indicator ``1[x_t = v]`` across chains; where every chain is constant the
    within-chain variance is 0 and R-hat is NaN or infinite: chains constant at **different** values (a chain
    held in the configuration it started in) are then reported, chains constant at one value are not
    (a posterior concentrated on it, or chains that all started there: with
    :class:`~subsample_mcmc.RacingGibbs`'s dispersed starts they start in different configurations).
    A value's indicator with split R-hat above ``RHAT_MAX`` (1.05) is reported too.

    Args:
        samples: a ``numpyro.infer.MCMC`` after ``run`` (more than one chain), an ArviZ
            ``InferenceData``/``DataTree``, or a dict ``{site: [chains, draws, ...]}``.
        sites: a site name or the names of the sites to check; default every site whose values are
            integers (integer or bool dtype, or floats that are all whole numbers).
        warn: emit one ``UserWarning`` naming every problem found.

    Returns:
        A :class:`DiscreteChainReport` per scalar checked.

    Example::

        mcmc = MCMC(RacingGibbs(model, inner_kernel=RacingMH(model)), num_warmup=500, num_samples=1000,
                    num_chains=4, chain_method="vectorized")
        mcmc.run(jax.random.PRNGKey(0), y=y)
        check_discrete_chains(mcmc)   # warns if chains of a discrete site disagree
    """
    draws = _by_chain(samples)
    if isinstance(sites, str):
        sites = [sites]
    if sites is None:
        sites = [k for k, v in draws.items() if v.ndim >= 2 and _integer_valued(v)]
        if not sites and warn:
            warnings.warn(f"check_discrete_chains: no site of {sorted(draws)} has integer values; nothing was "
                          "checked (name the sites with sites=[...])", UserWarning, stacklevel=2)
    else:
        missing = [k for k in sites if k not in draws]
        if missing:
            raise KeyError(f"sites {missing} are not among the samples' sites {sorted(draws)}")
        continuous = [k for k in sites if not _integer_valued(draws[k])]
        if continuous:
            raise ValueError(f"sites {continuous} do not hold integer values: check_discrete_chains reads discrete "
                             "sites; use R-hat and ESS (numpyro.diagnostics.summary, arviz.summary) for continuous ones")
    reports = []
    for name in sites:
        x = draws[name]
        if x.ndim < 2 or x.shape[0] < 2:
            raise ValueError(f"site {name!r} has shape {x.shape}: check_discrete_chains needs [chains >= 2, draws, "
                             "...] (run more than one chain; with an MCMC, group_by_chain is applied for you)")
        flat = x.reshape(x.shape[0], x.shape[1], -1)
        for j in range(flat.shape[2]):
            label = name if x.ndim == 2 else f"{name}{[int(i) for i in np.unravel_index(j, x.shape[2:])]}"
            reports.append(_one(label, flat[:, :, j]))
    problems = [r.problem for r in reports if r.problem]
    if warn and problems:
        warnings.warn("check_discrete_chains: " + " ".join(problems), UserWarning, stacklevel=2)
    return reports


def _one(label: str, x: np.ndarray) -> DiscreteChainReport:
    values = np.unique(x)
    modal = np.array([values[np.argmax([(c == v).sum() for v in values])] for c in x])
    switch = np.mean(x[:, 1:] != x[:, :-1], axis=1) if x.shape[1] > 1 else np.zeros(x.shape[0])
    constant = bool(np.all(switch == 0))
    disagree = constant and np.unique(x[:, 0]).size > 1
    rhats = []
    if not constant and x.shape[1] >= 4:
        for v in values:
            ind = (x == v).astype(np.float64)
            if np.all(ind.var(axis=1) == 0) and np.unique(ind[:, 0]).size == 1:
                continue
            rhats.append(float(split_gelman_rubin(ind)))
    max_rhat = float(np.nanmax(rhats)) if rhats and np.any(np.isfinite(rhats)) else float("nan")
    problem = None
    if disagree:
        problem = (f"site {label!r}: every chain is constant, at different values {modal.tolist()}: the chains never "
                   "left the values they started at, so at most one of them samples the posterior (R-hat is infinite). "
                   "Where a discrete value moves the continuous posterior (a degrees of freedom, a change point, a "
                   "link), a one-site-at-a-time chain cannot leave it; compare the values' fits and use a sampler "
                   "that moves the discrete and continuous sites together (RacingGibbs does with at most 64 "
                   "configurations).")
    elif max_rhat > RHAT_MAX:
        problem = (f"site {label!r}: chains disagree on how often they visit its values (split R-hat of a value's "
                   f"indicator {max_rhat:.2f} > {RHAT_MAX}; modal values {modal.tolist()}, switch rates "
                   f"{np.round(switch, 3).tolist()}): run longer or check that the chains can move between values.")
    return DiscreteChainReport(label, modal, switch, disagree, max_rhat, problem)
