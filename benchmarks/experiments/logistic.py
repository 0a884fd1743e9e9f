r"""Bayesian logistic regression at large N: RacingMH against NUTS and HMCECS.

Shared by ``benchmarks/logistic_regression.py`` and
``notebooks/logistic_regression_large_n.ipynb``.

* :func:`simulate` -- covariates ``x_n ~ N(0, I_d)``, coefficients fixed by a seed, labels
  ``y_n ~ Bernoulli(sigmoid(x_n^T w + b))``;
* :func:`logistic_model` (plain plate, for NUTS and RacingMH) and
  :func:`logistic_model_ecs` (``subsample_size`` plate with ``numpyro.subsample``, for
  HMCECS; RacingMH accepts it too);
* :func:`map_estimate` -- full-data Newton (the reference point of the Taylor proxies)
  and :func:`laplace_summary` (a cheap cross-check of the posterior), both on the
  package's one Laplace home (:mod:`subsample_mcmc.kernels.laplace`);
* :func:`make_kernel` -- the compared samplers by name (:data:`SAMPLERS`);
* :func:`timed_run` -- the timing protocol: ``warmup`` then ``run`` (end to end, compile
  included) and a continuation run of the same length from ``last_state`` (steady
  state: the compiled loop is reused, so no compilation is timed);
* :func:`likelihood_evals_per_iteration` -- per-datum log-likelihood evaluations per
  iteration of each method, from its extra fields;
* :func:`ess_summary`, :func:`compare_to_reference` -- ArviZ ESS and the errors of
  posterior means and sds in units of Monte Carlo standard error.

Parameters are always handled as a flat ``[draws, p]`` matrix with names
``w[0] .. w[d-1], b`` (:func:`flatten_samples`).
"""

from __future__ import annotations

import math
import time
from typing import Callable, NamedTuple, Optional

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import HMCECS, MCMC, NUTS
from subsample_mcmc.kernels.laplace import fit_laplace, laplace_approximation

__all__ = [
    "LogisticData", "simulate", "logistic_model", "logistic_model_ecs", "PRIOR_W_SCALE",
    "PRIOR_B_SCALE", "param_names", "flatten_samples", "map_estimate", "laplace_summary", "log_posterior",
    "log_likelihood", "log_prior",
    "SAMPLERS", "make_kernel", "model_for", "extra_fields_for", "model_args_for", "timed_run",
    "TimedRun", "steady_state_run", "mean_sd_mcse", "notebook_config", "compare_means",
    "figure_mean_comparison", "figure_cost_vs_n", "benchmark_points", "figure_autocorr",
    "likelihood_evals_per_iteration", "ess_summary", "compare_to_reference", "to_idata", "count_init",
]

#: prior scales: ``w ~ N(0, PRIOR_W_SCALE^2 I)``, ``b ~ N(0, PRIOR_B_SCALE^2)``
PRIOR_W_SCALE = 1.0
PRIOR_B_SCALE = 5.0


class LogisticData(NamedTuple):
    x: jax.Array  # [N, d] float32
    y: jax.Array  # [N] float32 in {0, 1}
    w_true: np.ndarray  # [d]
    b_true: float


def simulate(n: int, d: int = 10, seed: int = 0) -> LogisticData:
    """Simulated logistic-regression data.

    ``x_n ~ N(0, I_d)`` (float32), true coefficients ``w_j ~ N(0, 0.5^2)`` and intercept
    ``b = -0.5`` (fixed by ``seed`` and ``d``, not by ``n``, so that data sets of
    different sizes share the same truth), ``y_n ~ Bernoulli(sigmoid(x_n^T w + b))``.
    """
    rng = np.random.default_rng(seed)
    w_true = rng.normal(0.0, 0.5, size=d)
    b_true = -0.5
    kx, ky = jax.random.split(jax.random.PRNGKey(seed + 1))
    x = jax.random.normal(kx, (int(n), d), jnp.float32)
    logits = x @ jnp.asarray(w_true, jnp.float32) + b_true
    y = (jax.random.uniform(ky, (int(n),)) < jax.nn.sigmoid(logits)).astype(jnp.float32)
    return LogisticData(x, y, w_true, b_true)


def logistic_model(x, y=None):
    """Plain NumPyro model: ``w ~ N(0, I)``, ``b ~ N(0, 5^2)``, one data plate of size N."""
    d = x.shape[1]
    w = numpyro.sample("w", dist.Normal(0.0, PRIOR_W_SCALE).expand([d]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, PRIOR_B_SCALE))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=x @ w + b), obs=y)


def logistic_model_ecs(x, y, subsample_size: int = 1000):
    """The same model in HMCECS style: a ``subsample_size`` plate and ``numpyro.subsample``."""
    d = x.shape[1]
    w = numpyro.sample("w", dist.Normal(0.0, PRIOR_W_SCALE).expand([d]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, PRIOR_B_SCALE))
    with numpyro.plate("data", x.shape[0], subsample_size=subsample_size):
        xb = numpyro.subsample(x, event_dim=1)
        yb = numpyro.subsample(y, event_dim=0)
        numpyro.sample("y", dist.Bernoulli(logits=xb @ w + b), obs=yb)


def param_names(d: int) -> list[str]:
    return [f"w[{j}]" for j in range(d)] + ["b"]


def flatten_samples(samples: dict) -> np.ndarray:
    """``{"w": [..., d], "b": [...]}`` -> ``[..., d + 1]`` (float64 numpy)."""
    w = np.asarray(samples["w"], np.float64)
    b = np.asarray(samples["b"], np.float64)[..., None]
    return np.concatenate([w, b], axis=-1)


# -- posterior mode and Laplace approximation -------------------------------------------
def log_likelihood(theta, x, y):
    """Log-likelihood of ``theta = (w, b)`` summed over the rows of ``x``, ``y`` (labels 0/1)."""
    d = x.shape[1]
    return jnp.sum(jax.nn.log_sigmoid((2.0 * y - 1.0) * (x @ theta[:d] + theta[d])))


def log_prior(theta):
    """Log density (up to a constant) of :func:`logistic_model`'s priors at ``theta = (w, b)``."""
    w, b = theta[:-1], theta[-1]
    return -0.5 * jnp.sum((w / PRIOR_W_SCALE) ** 2) - 0.5 * (b / PRIOR_B_SCALE) ** 2


def log_posterior(theta, x, y):
    """Full-data log posterior of ``theta = (w, b)`` (the priors of :func:`logistic_model`)."""
    return log_likelihood(theta, x, y) + log_prior(theta)


def map_estimate(x, y, steps: int = 20) -> dict:
    """MAP of the logistic-regression posterior by safeguarded full-data Newton
    (:func:`subsample_mcmc.kernels.laplace.fit_laplace`; each step one pass for the
    gradient and Hessian, quadratic convergence from 0).  Returns ``{"w": [d], "b": ()}``."""
    d = x.shape[1]
    fit = jax.jit(lambda xx, yy: fit_laplace(lambda t: log_posterior(t, xx, yy), jnp.zeros((d + 1,), xx.dtype),
                                             max_steps=steps)[0])
    theta = fit(x, y).mode
    return {"w": theta[:d], "b": theta[d]}


def laplace_summary(x, y, mode: dict) -> tuple[np.ndarray, np.ndarray]:
    """Posterior means and sds of the Laplace approximation at ``mode`` (flat order;
    :func:`subsample_mcmc.kernels.laplace.laplace_approximation`).

    At large N the logistic-regression posterior is very nearly Gaussian (its skewness
    is O(N^{-1/2})), so this is a cheap cross-check of the NUTS reference.
    """
    theta = jnp.concatenate([mode["w"], jnp.atleast_1d(mode["b"])])
    hess = jax.jit(jax.hessian(log_posterior))(theta, x, y)
    la = laplace_approximation(theta, hess)
    cov = np.asarray(la.scale_tril, np.float64) @ np.asarray(la.scale_tril, np.float64).T
    return np.asarray(theta, np.float64), np.sqrt(np.diag(cov))


# -- the compared samplers ------------------------------------------------------------------
#: name -> description (used in tables)
SAMPLERS = {
    "nuts": "NumPyro NUTS, full data",
    "hmcecs": "NumPyro HMCECS (NUTS inner), Taylor proxy at the MAP",
    "racing_rw": "RacingMH random walk, no control variate",
    "racing_rw_taylor": "RacingMH random walk, Taylor control variate",
    "racing_langevin": "RacingMH Langevin, no control variate",
    "racing_langevin_taylor": "RacingMH Langevin, Taylor control variate",
}


def model_for(method: str):
    """The model a method runs on (HMCECS needs the subsample-style model)."""
    return logistic_model_ecs if method == "hmcecs" else logistic_model


def make_kernel(method: str, *, reference: Optional[dict] = None, num_blocks: int = 100,
                racing_options: Optional[dict] = None):
    """A fresh kernel for ``method`` (a key of :data:`SAMPLERS`).

    Args:
        reference: MAP ``{"w", "b"}`` for HMCECS's ``taylor_proxy`` (required for
            ``"hmcecs"``).  RacingMH finds its own (mini-batch Adam + full-data Newton
            steps at ``init``; that time is part of its end-to-end time).
        num_blocks: HMCECS block updates of the subsample indices (NumPyro's example
            uses 100).
        racing_options: extra keyword arguments of ``RacingMH``.
    """
    from subsample_mcmc.numpyro import RacingMH

    racing_options = dict(racing_options or {})
    if method == "nuts":
        return NUTS(logistic_model)
    if method == "hmcecs":
        if reference is None:
            raise ValueError("hmcecs needs a reference point (the MAP) for its Taylor proxy")
        return HMCECS(NUTS(logistic_model_ecs), num_blocks=num_blocks,
                      proxy=HMCECS.taylor_proxy(reference))
    if method.startswith("racing_"):
        proposal = "langevin" if "langevin" in method else "random_walk"
        cv = "taylor" if method.endswith("_taylor") else None
        return RacingMH(logistic_model, proposal=proposal, control_variate=cv, **racing_options)
    raise ValueError(f"unknown method {method!r}; choose from {list(SAMPLERS)}")


def extra_fields_for(method: str) -> tuple:
    if method == "nuts":
        return ("num_steps", "accept_prob")
    if method == "hmcecs":
        return ("hmc_state.num_steps", "accept_prob")
    return ("num_likelihood_evals", "accept_prob", "race_stage")


def model_args_for(method: str, data: LogisticData, subsample_size: int = 1000):
    if method == "hmcecs":
        return (data.x, data.y), {"subsample_size": int(subsample_size)}
    return (data.x, data.y), {}


# -- timing protocol ------------------------------------------------------------------------------
class TimedRun(NamedTuple):
    theta: np.ndarray  # [S, p] draws of the NumPyro sampling run (after warmup)
    extra: dict  # its extra fields
    theta_steady: np.ndarray  # [S_steady, p] draws of the steady-state continuation
    extra_steady: dict
    warmup_seconds: float  # init (incl. any MAP/proxy setup) + compilation + warmup
    sampling_seconds: float  # NumPyro sampling run, compilation of its loop included
    steady_compile_seconds: float  # compilation of the continuation (not timed as sampling)
    steady_seconds: float  # execution of the continuation only
    mcmc: MCMC
    retime: Callable[[], float]  # re-executes the compiled continuation, returns seconds


def _block(tree):
    return jax.tree.map(lambda a: a.block_until_ready() if hasattr(a, "block_until_ready") else a, tree)


def _get_field(state, name: str):
    for part in name.split("."):
        state = getattr(state, part)
    return state


def steady_state_run(kernel, state, model_args, model_kwargs, num_steps: int, extra_fields: tuple = ()):
    """Continue a chain for ``num_steps`` kernel steps from ``state``, compile excluded.

    The steps run in one ``jax.lax.scan`` over ``kernel.sample`` (what NumPyro's
    ``MCMC.run`` loop does, without its bookkeeping), compiled ahead of time
    (``jit(...).lower(...).compile()``); only the execution is timed.

    Why not simply ``mcmc.post_warmup_state = mcmc.last_state; mcmc.run(...)``: NumPyro
    0.22 recompiles its collection loop on every ``run`` (for NUTS as well; a few seconds
    each on this machine), so that wall time is not a steady-state cost.

    Returns:
        ``(theta [num_steps, p], extra {field: [num_steps]}, last_state, compile_seconds,
        run_seconds, rerun)``; ``rerun()`` executes the same compiled continuation again
        from the same state (same draws) and returns its wall time, so that timings can be
        repeated and interleaved across methods on a machine with a varying load.
    """
    post = kernel.postprocess_fn(model_args, model_kwargs)

    def chain(s, args):
        def body(c, _):
            c = kernel.sample(c, args, model_kwargs)
            return c, (post(c.z), {f: _get_field(c, f) for f in extra_fields})

        return jax.lax.scan(body, s, None, length=num_steps)

    t0 = time.perf_counter()
    compiled = jax.jit(chain).lower(state, tuple(model_args)).compile()
    t1 = time.perf_counter()
    last, (z, extra) = _block(compiled(state, tuple(model_args)))
    t2 = time.perf_counter()
    theta = flatten_samples({k: z[k] for k in ("w", "b")})

    def rerun() -> float:
        t = time.perf_counter()
        _block(compiled(state, tuple(model_args)))
        return time.perf_counter() - t

    return theta, {k: np.asarray(v) for k, v in extra.items()}, last, t1 - t0, t2 - t1, rerun


def count_init(kernel) -> dict:
    """Wrap ``kernel.init`` to count its calls and their time (``{"calls", "seconds"}``,
    updated in place; the time is part of the end-to-end time either way)."""
    log = {"calls": 0, "seconds": 0.0}
    original = kernel.init

    def init(*a, **kw):
        t = time.perf_counter()
        out = original(*a, **kw)
        jax.block_until_ready(out)
        log["calls"] += 1
        log["seconds"] += time.perf_counter() - t
        return out

    kernel.init = init
    return log


def timed_run(kernel, model_args, model_kwargs, *, num_warmup: int, num_samples: int, seed: int = 0,
              extra_fields: tuple = (), num_steady: Optional[int] = None, one_call: bool = False) -> TimedRun:
    """Time one chain end to end, then its steady-state cost.

    1. ``mcmc.warmup``: init (the kernel's own setup such as a MAP search or proxy sums),
       compilation of the warmup loop, ``num_warmup`` steps;
    2. ``mcmc.run`` for ``num_samples`` draws from the warmed-up state (compiles the
       sampling loop) -- 1 + 2 is the end-to-end cost of those draws;
    3. :func:`steady_state_run` for ``num_steady`` (default ``num_samples``) more steps
       from ``mcmc.last_state``: compiled first, then timed.

    With ``one_call``, 1 and 2 are the single ``mcmc.run`` a user makes (init, one
    compilation of the warmup-and-sampling loop, warmup, sampling): its time is
    ``warmup_seconds`` and ``sampling_seconds`` is 0.  The draws of 2 and 3 are
    consecutive stretches of one chain.
    """
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=1,
                progress_bar=False)
    key = jax.random.PRNGKey(seed)
    t0 = time.perf_counter()
    if one_call:
        mcmc.run(key, *model_args, extra_fields=extra_fields, **model_kwargs)
        samples = _block(mcmc.get_samples())
        t1 = t2 = time.perf_counter()
    else:
        mcmc.warmup(key, *model_args, extra_fields=extra_fields, collect_warmup=False, **model_kwargs)
        _block(mcmc.post_warmup_state)
        t1 = time.perf_counter()
        mcmc.run(mcmc.post_warmup_state.rng_key, *model_args, extra_fields=extra_fields, **model_kwargs)
        samples = _block(mcmc.get_samples())
        t2 = time.perf_counter()
    extra = {k: np.asarray(v) for k, v in mcmc.get_extra_fields().items()}
    theta_s, extra_s, _, comp, run, rerun = steady_state_run(
        mcmc.sampler, mcmc.last_state, model_args, model_kwargs,
        num_samples if num_steady is None else int(num_steady), extra_fields)
    return TimedRun(
        theta=flatten_samples(samples), extra=extra, theta_steady=theta_s, extra_steady=extra_s,
        warmup_seconds=t1 - t0, sampling_seconds=t2 - t1, steady_compile_seconds=comp,
        steady_seconds=run, mcmc=mcmc, retime=rerun,
    )


def likelihood_evals_per_iteration(method: str, extra: dict, n: int, *, subsample_size: int = 1000,
                                   num_blocks: int = 100) -> float:
    """Mean per-datum log-likelihood evaluations per iteration.

    * NUTS: ``N x num_steps`` (one full-data gradient per leapfrog step);
    * HMCECS: ``m x (num_steps + 1 + a) + m / num_blocks`` with ``m`` the subsample size:
      a gradient of the subsampled estimator per leapfrog step, the estimator at the
      proposed subsample for the pseudo-marginal index update, a refresh of potential and
      gradient when it is accepted (probability ``a``), and the proxy's per-datum Taylor
      terms (value, gradient, Hessian) at the reference for the new block of indices;
    * RacingMH: its ``num_likelihood_evals`` field (both arms of the race, plus the
      mini-batch gradients of the Langevin proposal).
    """
    if method == "nuts":
        return float(n * np.mean(extra["num_steps"]))
    if method == "hmcecs":
        steps = np.mean(extra["hmc_state.num_steps"])
        acc = np.mean(extra["accept_prob"])
        return float(subsample_size * (steps + 1 + acc) + math.ceil(subsample_size / num_blocks))
    return float(np.mean(extra["num_likelihood_evals"]))


# -- diagnostics ----------------------------------------------------------------------------------
def to_idata(theta: np.ndarray, names: Optional[list] = None) -> az.InferenceData:
    """``[S, p]`` (one chain) or ``[C, S, p]`` draws -> InferenceData with one variable per parameter."""
    theta = np.asarray(theta, np.float64)
    if theta.ndim == 2:
        theta = theta[None]
    names = names or param_names(theta.shape[-1] - 1)
    return az.from_dict(posterior={nm: theta[..., j] for j, nm in enumerate(names)})


def ess_summary(theta: np.ndarray) -> dict:
    """ArviZ bulk ESS per parameter, with its min and median."""
    idata = to_idata(theta)
    ess = az.ess(idata)
    vals = np.array([float(ess[v]) for v in idata.posterior.data_vars])
    return {"ess": vals.tolist(), "min_ess": float(vals.min()), "median_ess": float(np.median(vals))}


def mean_sd_mcse(theta: np.ndarray) -> dict:
    """Posterior means, sds and their ArviZ MCSEs (``method="mean"`` / ``"sd"``)."""
    idata = to_idata(theta)
    names = list(idata.posterior.data_vars)
    mcse_mean = az.mcse(idata, method="mean")
    mcse_sd = az.mcse(idata, method="sd")
    flat = np.asarray(theta, np.float64).reshape(-1, np.shape(theta)[-1])
    return {
        "mean": flat.mean(0), "sd": flat.std(0, ddof=1),
        "mcse_mean": np.array([float(mcse_mean[v]) for v in names]),
        "mcse_sd": np.array([float(mcse_sd[v]) for v in names]),
    }


def compare_to_reference(theta: np.ndarray, reference: dict) -> dict:
    r"""Errors of posterior means and sds against a reference, in MCSE units.

    ``z_mean_j = |mean_j - ref_mean_j| / sqrt(mcse_j^2 + ref_mcse_j^2)`` (both chains'
    Monte Carlo errors; the reference's is small when it is long) and the same for the sds.
    For a correct sampler each ``z`` is roughly ``|N(0, 1)|``: with p = 11 parameters
    the largest exceeds 2 with probability about 0.4, so also reported are the number of
    parameters with ``z > 2`` and the chi-square statistic ``sum_j z_j^2`` (~ chi2_p) with
    its p-value.  The method's own means, sds and MCSEs come back too (``method_*``), so that
    its draws can be scored against another reference later.

    Args:
        theta: ``[S, p]`` or ``[C, S, p]`` draws of the method.
        reference: output of :func:`mean_sd_mcse` for the reference chains.
    """
    from scipy import stats

    mine = mean_sd_mcse(theta)
    zm = np.abs(mine["mean"] - reference["mean"]) / np.sqrt(mine["mcse_mean"] ** 2 + reference["mcse_mean"] ** 2)
    zs = np.abs(mine["sd"] - reference["sd"]) / np.sqrt(mine["mcse_sd"] ** 2 + reference["mcse_sd"] ** 2)
    p = zm.shape[0]
    chi2 = float(np.sum(zm**2))
    return {
        "z_mean": zm.tolist(), "z_sd": zs.tolist(),
        "max_z_mean": float(zm.max()), "max_z_sd": float(zs.max()),
        "num_z_mean_over_2": int(np.sum(zm > 2)), "num_z_sd_over_2": int(np.sum(zs > 2)),
        "chi2_mean": chi2, "chi2_mean_pvalue": float(stats.chi2.sf(chi2, p)),
        "max_abs_mean_error_in_sd": float(np.max(np.abs(mine["mean"] - reference["mean"]) / reference["sd"])),
        "sd_ratio_min": float(np.min(mine["sd"] / reference["sd"])),
        "sd_ratio_max": float(np.max(mine["sd"] / reference["sd"])),
        "method_mean": mine["mean"].tolist(), "method_mcse_mean": mine["mcse_mean"].tolist(),
        "method_sd": mine["sd"].tolist(), "method_mcse_sd": mine["mcse_sd"].tolist(),
    }


# -- notebook helpers -----------------------------------------------------------------------------
def notebook_config() -> dict:
    """Sizes of ``notebooks/logistic_regression_large_n.ipynb``.

    ``SUBSAMPLE_MCMC_NOTEBOOK_SIZE=small`` (CI): N = 20,000 and short chains (the
    notebook runs in well under a minute); otherwise N = 1,000,000 with RacingMH chains
    long enough for a few thousand effective draws and a NUTS comparison of 1000 draws.
    """
    import os

    if os.environ.get("SUBSAMPLE_MCMC_NOTEBOOK_SIZE", "").lower() == "small":
        return {"size": "small", "n": 20_000, "warmup": 500, "samples": 2000,
                "nuts_warmup": 300, "nuts_samples": 500}
    return {"size": "full", "n": 1_000_000, "warmup": 2000, "samples": 20000,
            "nuts_warmup": 500, "nuts_samples": 1000}


def _flat_from_idata(idata) -> np.ndarray:
    post = idata.posterior
    w = np.asarray(post["w"])  # [C, S, d]
    b = np.asarray(post["b"])[..., None]
    return np.concatenate([w, b], axis=-1)


def compare_means(idata, idata_ref):
    """Posterior means of two ``from_numpyro`` InferenceData side by side.

    Returns a pandas DataFrame indexed by parameter with both means, both MCSEs, the
    difference in posterior sds of the reference and ``z = |diff| / sqrt(mcse^2 +
    mcse_ref^2)``.
    """
    import pandas as pd

    a, b = _flat_from_idata(idata), _flat_from_idata(idata_ref)
    sa, sb = mean_sd_mcse(a), mean_sd_mcse(b)
    diff = sa["mean"] - sb["mean"]
    return pd.DataFrame({
        "mean": sa["mean"], "mcse": sa["mcse_mean"], "mean_ref": sb["mean"], "mcse_ref": sb["mcse_mean"],
        "sd": sa["sd"], "sd_ref": sb["sd"],
        "diff_in_sd": diff / sb["sd"],
        "z": np.abs(diff) / np.sqrt(sa["mcse_mean"] ** 2 + sb["mcse_mean"] ** 2),
    }, index=param_names(a.shape[-1] - 1))


def figure_mean_comparison(table, label: str = "RacingMH", ref_label: str = "NUTS"):
    """Posterior means +- 2 MCSE of both samplers, in reference-sd units around the reference."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    k = np.arange(len(table))
    sd = table["sd_ref"].to_numpy()
    ax.errorbar(k - 0.1, np.zeros(len(k)), yerr=2 * table["mcse_ref"] / sd, fmt="o", label=f"{ref_label} (+-2 MCSE)")
    ax.errorbar(k + 0.1, table["diff_in_sd"], yerr=2 * table["mcse"] / sd, fmt="s", label=f"{label} (+-2 MCSE)")
    ax.axhline(0, color="gray", lw=0.5)
    ax.set_xticks(k, table.index, rotation=45)
    ax.set_ylabel(f"mean - {ref_label} mean\n(posterior sd)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def figure_cost_vs_n(points, nuts_steps: float, ns=None):
    """Per-datum likelihood evaluations per iteration against N.

    Args:
        points: ``[(label, N, evals_per_iteration), ...]`` measured points (RacingMH,
            HMCECS, ...), drawn as markers joined per label.
        nuts_steps: mean leapfrog steps of NUTS per iteration; NUTS costs ``N x steps``
            (drawn as a line over ``ns``).
    """
    import matplotlib.pyplot as plt

    ns = np.array(sorted({p[1] for p in points}) if ns is None else ns, float)
    grid = np.geomspace(ns.min() / 2, ns.max() * 2, 50)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.loglog(grid, nuts_steps * grid, "k-", label=f"NUTS: N x {nuts_steps:.1f} leapfrog steps")
    ax.loglog(grid, 2 * grid, "k:", label="exact MH: 2N")
    labels = []
    for lab, _, _ in points:
        if lab not in labels:
            labels.append(lab)
    for lab in labels:
        xs = [p[1] for p in points if p[0] == lab]
        ys = [p[2] for p in points if p[0] == lab]
        order = np.argsort(xs)
        ax.loglog(np.array(xs)[order], np.array(ys)[order], "o-", label=lab)
    ax.set_xlabel("N")
    ax.set_ylabel("likelihood evaluations / iteration")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def benchmark_points(path) -> list:
    """``(label, N, evals/iter)`` of every method in a ``logistic_regression.json``
    (``[]`` when the file does not exist)."""
    import json
    from pathlib import Path

    p = Path(path)
    if not p.exists():
        return []
    res = json.loads(p.read_text())["results"]
    return [(r["method"] + " (benchmark)", r["n"], r["evals_per_iter"]) for r in res if r["method"] != "nuts"]


def figure_autocorr(idata, max_lag: int = 100):
    """Autocorrelation of every parameter (``w[j]`` and ``b``) of the first chain, overlaid."""
    import matplotlib.pyplot as plt

    theta = _flat_from_idata(idata)[0]  # [S, p]
    names = param_names(theta.shape[-1] - 1)
    lags = np.arange(min(max_lag, theta.shape[0] - 1) + 1)
    fig, ax = plt.subplots(figsize=(7, 3))
    for j, nm in enumerate(names):
        ac = az.autocorr(theta[:, j])[: lags.size]
        ax.plot(lags, ac, lw=1, label=nm, color="k" if nm == "b" else None)
    ax.axhline(0, color="gray", lw=0.5)
    ax.set_xlabel("lag (iterations)")
    ax.set_ylabel("autocorrelation")
    ax.legend(fontsize=6, ncol=6)
    fig.tight_layout()
    return fig
