"""The main job: Bayesian ARCH order selection on a real return series, racing vs exact.

``subsample-mcmc arch`` (also ``python -m subsample_mcmc arch``) calls :func:`run_job`: load the
series (the Dow Jones Industrial Average 1885-2023 by default), build one NumPyro ARCH(q) model
per candidate order (:func:`~subsample_mcmc.models.arch.arch_models`), fit the product space's
pseudopriors once (:class:`~subsample_mcmc.ModelSelection`'s ``init``), then run the racing
``ModelSelection`` and its exact counterpart (``method="exact"``) on those same pseudopriors in
``numpyro.infer.MCMC`` and write ArviZ InferenceData, PNG figures and ``summary.json``.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Optional, Sequence, Union

import numpy as np

from .arch import (
    DEFAULT_ORDERS, DEFAULT_SERIES, SERIES, SHIPPED, ReturnSeries, arch_control_variates, arch_models, fit_laplace,
    load_returns, prepare,
    simulate_arch, validate_orders,
)
from .outputs import check_output

__all__ = ["load_series", "bic_check", "ArchRun", "run_sampler", "diagnostics", "total_variation", "make_figures",
           "check_output", "run_job", "METHODS"]

#: the job's two samplers: name -> ModelSelection's ``method``
METHODS = {"racing": "normal", "exact": "exact"}
_FIELDS = ("num_likelihood_evals", "race_stage", "accept_prob", "log_prior_adjustment", "model_draw_checked",
           "model_draw_disagrees")


def load_series(data: str, *, orders: Sequence[int], simulated_size: int = 100_000, simulated_order: int = 10,
                seed: int = 0, column: Optional[str] = None, kind: Optional[str] = None):
    """``(ReturnSeries, true_order or None)`` for ``--data djia|sp500-1950|sp500|nasdaq|simulated|PATH.csv``."""
    if data == "simulated":
        r, _ = simulate_arch(simulated_size + max(orders), order=simulated_order, seed=seed)
        r = r - r.mean()
        return ReturnSeries(f"simulated ARCH({simulated_order})", r, None, 0.0), simulated_order
    if data in SERIES or data in SHIPPED:
        return load_returns(data), None
    if not (data.lower().endswith(".csv") or os.path.exists(data)):
        raise ValueError(f"--data must be one of {tuple(SHIPPED) + SERIES + ('simulated',)} or a path to a CSV "
                         f"file, got {data!r}")
    return load_returns(data, column=column, kind=kind), None


def bic_check(returns: np.ndarray, orders: Sequence[int], laplace) -> dict:
    """Each order's maximum-likelihood fit: the ``arch`` package and the conditional likelihood.

    ``arch_model(r, mean="Zero", vol="ARCH", p=q, dist="t")`` maximises the likelihood of
    all ``T`` returns with pre-sample variances *backcast* (an exponential smoothing of the
    first returns), so its sample differs from ours by the first ``max(Q)`` terms; the
    conditional column uses exactly our ``N`` terms (log-likelihood at the MAP, a hair
    below the maximum).  ``BIC = -2 log L + k log n`` with ``k = q + 2``.
    """
    from arch import arch_model

    q_max = max(orders)
    rows = []
    n_cond = len(returns) - q_max
    for j, q in enumerate(orders):
        res = arch_model(returns, mean="Zero", vol="ARCH", p=q, dist="t").fit(disp="off")
        k = q + 2
        rows.append({
            "order": q,
            "arch_loglik": float(res.loglikelihood),
            "arch_bic": float(res.bic),
            "arch_nobs": int(res.nobs),
            "conditional_loglik": float(laplace.max_log_likelihood[j]),
            "conditional_bic": float(-2 * laplace.max_log_likelihood[j] + k * math.log(n_cond)),
            "laplace_log_evidence": float(laplace.log_evidence[j]),
        })
    best = {key: int(orders[int(np.argmin([r[key] for r in rows]))]) for key in ("arch_bic", "conditional_bic")}
    best["laplace_log_evidence"] = int(orders[int(np.argmax([r["laplace_log_evidence"] for r in rows]))])
    return {"per_order": rows, "favoured": best}


class ArchRun:
    """One sampler's run: the fitted MCMC object, its posterior over ``q``, the warmup's
    Wang-Landau trajectory and extra fields, and wall times."""

    def __init__(self, name, mcmc, orders, warmup_fields, fields, seconds, num_terms):
        from subsample_mcmc import model_posterior

        self.name, self.mcmc, self.orders, self.num_terms = name, mcmc, tuple(orders), num_terms
        self.warmup_fields, self.fields, self.seconds = warmup_fields, fields, seconds
        self.model_index = np.asarray(mcmc.get_samples(group_by_chain=True)["model"])  # [C, S]
        self.q = np.asarray(self.orders)[self.model_index]
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.posterior = model_posterior(mcmc)
        for w in caught:  # the job's user sets draws by the command line: say which option
            warnings.warn(f"{name} sampler: {w.message} (command line: raise --num-samples or --chains)",
                          w.category, stacklevel=3)


_COMPILE = {"seconds": 0.0, "listening": False}


def fit_pseudopriors(y: np.ndarray, orders: Sequence[int], *, pseudoprior: str, seed: int, num_adapt: int,
                     cache: bool = True) -> tuple[dict, dict, bool]:
    """The product space's pseudopriors (``ModelSelection(arch_models(orders), pseudoprior=...)``'s
    ``init``: a Laplace fit per order, refitted from a NUTS pilot where it misses), fitted once and
    shared by both samplers.  With ``cache``, kept on disk under
    ``cache_root()/pseudopriors/<key>.pkl``, the key a SHA-256 of the terms ``y`` (bytes, dtype,
    shape), the orders, ``pseudoprior``, ``seed``, ``num_adapt``, the package version and JAX's
    x64 flag: a repeated job on the same data loads them instead of refitting.  Returns
    ``(pseudopriors, auto_choice, loaded_from_cache)``."""
    import hashlib
    import pickle

    import jax

    import subsample_mcmc
    from subsample_mcmc import ModelSelection
    from subsample_mcmc.cli import cache_root

    y = np.ascontiguousarray(y)
    h = hashlib.sha256(y.tobytes())
    h.update(repr((str(y.dtype), y.shape, tuple(int(q) for q in orders), pseudoprior, int(seed), int(num_adapt),
                   subsample_mcmc.__version__, bool(jax.config.jax_enable_x64))).encode())
    path = os.path.join(cache_root(), "pseudopriors", h.hexdigest()[:24] + ".pkl")
    if cache and os.path.exists(path):
        try:
            with open(path, "rb") as fh:
                saved = pickle.load(fh)
            return saved["pseudopriors"], saved["auto_choice"], True
        except (OSError, EOFError, pickle.UnpicklingError, KeyError, AttributeError):
            pass  # a stale or broken file: refit and overwrite it
    fitter = ModelSelection(arch_models(orders), pseudoprior=pseudoprior)
    state = fitter.init(jax.random.PRNGKey(seed + 10_000), num_adapt, None, (y,), None)
    pseudopriors = jax.tree.map(np.asarray, fitter.pseudopriors(state))
    auto_choice = dict(fitter.auto_choice)
    if cache:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            pickle.dump({"pseudopriors": pseudopriors, "auto_choice": auto_choice}, fh)
        os.replace(tmp, path)
    return pseudopriors, auto_choice, False


def compile_seconds() -> float:
    """XLA backend compile seconds in this process since the first call (all programs; from
    ``jax.monitoring``'s ``/jax/core/compile/backend_compile_duration`` events): the job reads it
    before and after each phase to report compilation apart from sampling."""
    import jax.monitoring

    if not _COMPILE["listening"]:
        def listener(event, seconds, **_):
            if event == "/jax/core/compile/backend_compile_duration":
                _COMPILE["seconds"] += seconds

        jax.monitoring.register_event_duration_secs_listener(listener)
        _COMPILE["listening"] = True
    return _COMPILE["seconds"]


def run_sampler(name: str, models: dict, y, *, pseudopriors: dict, num_warmup: int, num_samples: int,
                num_chains: int, seed: int, delta: float, check_decisions: int, progress_bar: bool,
                orders: Sequence[int], series=None) -> ArchRun:
    """Warmup (Wang-Landau on) then sampling of one ``ModelSelection`` (``METHODS[name]``) in NumPyro's
    ``MCMC`` on the given pseudopriors, timed apart; chains run one after another.  ``series``: the models'
    ``series`` argument (:attr:`~subsample_mcmc.models.arch.ArchData.series`: subsets' rows read from the
    series; None: from ``y``)."""
    import jax
    from numpyro.infer import MCMC

    from subsample_mcmc import ModelSelection

    racing = name == "racing"
    cv = arch_control_variates(y, orders) if racing else None  # App. C.2's control variate for the model race
    kernel = ModelSelection(models, method=METHODS[name], delta=delta, pseudoprior=pseudopriors,
                            check_decisions=int(check_decisions) if racing else 0, control_variate=cv)
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                chain_method="sequential", progress_bar=progress_bar)
    _release_compiled_programs()
    key = jax.random.PRNGKey(seed)
    c0, t0 = compile_seconds(), time.perf_counter()
    data = {} if series is None else {"series": series}
    mcmc.warmup(key, y, collect_warmup=True, extra_fields=_FIELDS, **data)
    warm = {k: np.asarray(v) for k, v in mcmc.get_extra_fields(group_by_chain=True).items()}
    c1, t1 = compile_seconds(), time.perf_counter()
    mcmc.run(mcmc.post_warmup_state.rng_key, y, extra_fields=_FIELDS, **data)
    c2, t2 = compile_seconds(), time.perf_counter()
    fields = {k: np.asarray(v) for k, v in mcmc.get_extra_fields(group_by_chain=True).items()}
    seconds = {"warmup": t1 - t0, "sample": t2 - t1, "end_to_end": t2 - t0,
               "compile_warmup": c1 - c0, "compile_sample": c2 - c1, "compile": c2 - c0}
    return ArchRun(name, mcmc, orders, warm, fields, seconds, int(y.shape[0]))


def _release_compiled_programs() -> None:
    """Drop JAX's compiled programs before a sampler compiles its own: every XLA CPU executable
    holds memory mappings, and the job's pilots, mode searches and two samplers over six models
    exceeded the process's mapping limit (``vm.max_map_count``; LLVM "Cannot allocate memory",
    then a segfault) on the DJIA.  Programs are not shared between the phases, and with the
    persistent compilation cache a reload is cheap."""
    import gc

    import jax

    jax.clear_caches()
    gc.collect()


def wang_landau_settle(run: ArchRun, tolerance: float = 1.0) -> dict:
    """When Wang-Landau's adjusted prior settles: the first warmup sweep after which every
    ``a_k`` (centred) stays within ``tolerance`` nats of its frozen value, per chain; the
    likelihood evaluations and the seconds (the warmup's time prorated by sweeps) up to it.
    A chain still moving by more than ``tolerance`` at the last sweep is censored there
    (reported, not dropped)."""
    a = run.warmup_fields["log_prior_adjustment"].astype(np.float64)  # [C, T, K]
    a = a - a.mean(-1, keepdims=True)
    evals = run.warmup_fields["num_likelihood_evals"].astype(np.float64)  # [C, T]
    c, t, _ = a.shape
    out = {"sweeps": [], "likelihood_evaluations": [], "seconds": [], "censored": []}
    for i in range(c):
        far = np.max(np.abs(a[i] - a[i, -1]), -1) >= tolerance
        last_far = int(np.nonzero(far)[0].max()) if far.any() else -1
        settle = last_far + 1
        censored = bool(settle >= t - max(1, t // 20))  # moving within the last 5% of warmup
        out["sweeps"].append(settle)
        out["likelihood_evaluations"].append(float(evals[i, :settle].sum()))
        out["seconds"].append(run.seconds["warmup"] / c * settle / t)
        out["censored"].append(censored)
    out["tolerance_nats"] = tolerance
    return out


def diagnostics(run: ArchRun) -> dict:
    """ESS (bulk) and R-hat of ``q`` from ArviZ, likelihood evaluations, wall time, switches."""
    import arviz as az

    q = run.q.astype(np.float64)
    ess = float(az.ess(q)) if q.shape[1] >= 4 else float("nan")
    rhat = float(az.rhat(q)) if q.shape[0] >= 2 and q.shape[1] >= 4 else float("nan")
    evals = float(run.fields["num_likelihood_evals"].astype(np.float64).sum())
    sweeps = run.fields["num_likelihood_evals"].size
    stages = run.fields["race_stage"]
    return {
        "ess_q": ess, "rhat_q": rhat,
        "likelihood_evaluations": evals,
        "likelihood_evaluations_warmup": float(run.warmup_fields["num_likelihood_evals"].astype(np.float64).sum()),
        "evaluations_per_iteration_over_n": evals / sweeps / run.num_terms,
        "seconds": run.seconds,
        "ess_per_million_evaluations": ess / evals * 1e6 if evals else float("nan"),
        "ess_per_second": ess / run.seconds["sample"] if run.seconds.get("sample") else float("nan"),
        # the seconds a user waits for this sampler: warmup and sampling with their compilation
        "ess_per_second_end_to_end": (ess / run.seconds["end_to_end"] if run.seconds.get("end_to_end")
                                      else float("nan")),
        "acceptance_rate": float(run.fields["accept_prob"].mean()),
        "model_switches": int(np.sum(run.model_index[:, 1:] != run.model_index[:, :-1])),
        "raced_model_draws": float(np.mean(stages > 0)),
        "exact_model_draw_after_warmup": [bool(v) for v in np.atleast_1d(
            np.asarray(run.mcmc.last_state.exact_model_draw))],
        "wang_landau_settle": wang_landau_settle(run),
    }


def total_variation(run_a: ArchRun, run_b: ArchRun) -> tuple[float, float]:
    """``0.5 sum_q |p_a(q) - p_b(q)|`` and its Monte Carlo standard error by the delta method
    (each run's MCSEs from :func:`~subsample_mcmc.model_posterior`, independent runs):
    ``se^2 = 1/4 sum_q (se_a(q)^2 + se_b(q)^2)``.  Monte Carlo noise alone makes the TV
    positive: compare it with its standard error."""
    pa, pb = run_a.posterior.probabilities, run_b.posterior.probabilities
    tv = 0.5 * float(np.abs(pa - pb).sum())
    se = 0.5 * float(np.sqrt(np.sum(run_a.posterior.stderr ** 2 + run_b.posterior.stderr ** 2)))
    return tv, se


def decision_error_rate(run: ArchRun) -> dict:
    """The racing model draws that the exact draw (same Gumbel noise) would have decided
    otherwise, warmup and sampling together, with a Clopper-Pearson 95% interval."""
    from scipy.stats import beta

    checked = np.concatenate([run.warmup_fields["model_draw_checked"].ravel(), run.fields["model_draw_checked"].ravel()])
    wrong = np.concatenate([run.warmup_fields["model_draw_disagrees"].ravel(),
                            run.fields["model_draw_disagrees"].ravel()])
    n, e = int(checked.sum()), int(wrong[checked.astype(bool)].sum())
    lo = float(beta.ppf(0.025, e, n - e + 1)) if e > 0 else 0.0
    hi = float(beta.ppf(0.975, e + 1, n - e)) if n > e else 1.0
    return {"errors": e, "decisions": n, "rate": e / n if n else float("nan"), "ci95": [lo, hi]}


def make_figures(series: ReturnSeries, runs: dict, out_dir: str, *, max_lag: int = 50) -> list:
    """PNG figures: returns, posterior over q, trace and autocorrelation of q, Wang-Landau curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []

    def save(fig, name):
        path = os.path.join(out_dir, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)

    fig, ax = plt.subplots(figsize=(9, 3))
    x = series.dates if series.dates is not None and len(series.dates) == len(series.returns) else np.arange(len(series.returns))
    ax.plot(x, series.returns, lw=0.4, color="k")
    ax.set_title(f"{series.name}: demeaned log returns (%)")
    save(fig, "returns.png")

    first = next(iter(runs.values()))
    orders = np.asarray(first.orders)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / len(runs)
    for i, (name, run) in enumerate(runs.items()):
        ax.bar(np.arange(len(orders)) + (i - (len(runs) - 1) / 2) * width, run.posterior.probabilities, width,
               yerr=2 * run.posterior.stderr, label=name)
    ax.set_xticks(np.arange(len(orders)), orders)
    ax.set_xlabel("order q")
    ax.set_ylabel("p(q | r) (± 2 MCSE)")
    ax.legend()
    save(fig, "posterior_q.png")

    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.2 * len(runs)), sharex=True, squeeze=False)
    for ax, (name, run) in zip(axes[:, 0], runs.items()):
        ax.plot(run.q[0], lw=0.5, drawstyle="steps-mid")
        ax.set_ylabel(f"q ({name})")
    axes[-1, 0].set_xlabel("iteration (chain 0, adjusted prior frozen)")
    save(fig, "trace_q.png")

    from numpyro.diagnostics import autocorrelation  # ArviZ 1.x has no az.autocorr

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, run in runs.items():
        q = run.q.astype(float)
        lags = min(max_lag, q.shape[1] - 1)
        acf = np.mean([autocorrelation(c)[: lags + 1] if c.std() > 0 else np.ones(lags + 1) for c in q], axis=0)
        ax.plot(np.arange(lags + 1), acf, label=name)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("lag")
    ax.set_ylabel("autocorrelation of q")
    ax.legend()
    save(fig, "autocorr_q.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    for (name, run), style in zip(runs.items(), ("--", "-")):
        a = run.warmup_fields["log_prior_adjustment"][0].astype(np.float64)  # chain 0, [T, K]
        if a.shape[0] == 0:
            continue
        est = -(a - a.mean(-1, keepdims=True))  # -a_k: the Wang-Landau estimate of log p(q | r) + const
        cum = np.cumsum(run.warmup_fields["num_likelihood_evals"][0].astype(np.float64))
        for j, q in enumerate(orders):
            ax.plot(cum, est[:, j], style, color=f"C{j}", lw=1, label=f"q={q}" if name == "exact" else None)
    ax.set_xscale("log")
    ax.set_xlabel("likelihood evaluations (chain 0, warmup)")
    ax.set_ylabel("-a_q: estimated log p(q | r) + const")
    ax.set_title("Wang-Landau estimate (solid: exact, dashed: racing)")
    ax.legend(fontsize=7, ncol=2)
    save(fig, "wang_landau.png")
    return paths


def run_job(*, data: str = DEFAULT_SERIES, orders: Sequence[int] = DEFAULT_ORDERS, num_adapt: int = 1000,
            num_samples: int = 1000, num_chains: int = 2, seed: int = 0, output: str = "arch-output",
            delta: float = 0.05, pseudoprior: str = "auto", check_decisions: Union[int, str] = "auto",
            simulated_size: int = 100_000, simulated_order: int = 10, column: Optional[str] = None,
            kind: Optional[str] = None, bic: bool = True, progress_bar: bool = True, log_likelihood: bool = False,
            cache: bool = True, log=print) -> dict:
    """Run the racing and exact ``ModelSelection`` samplers on one series and write the outputs.

    ``num_adapt`` warmup sweeps per chain (Wang-Landau on), then ``num_samples`` with the adjusted
    prior frozen (NumPyro compiles the warmup and the sampling loops apart, each with its length as a
    static argument: with equal lengths the second is the first program again, served by JAX's
    persistent compilation cache); ``pseudoprior`` is ``ModelSelection``'s (fitted once, shared by both samplers);
    ``check_decisions``: the racing sampler re-draws every ``m``-th raced model index exactly for
    the decision error rate (0: none; ``"auto"``: ``m = 10 K``, so that the audit's full passes over
    the ``K`` orders cost at most ``0.1 N`` evaluations per sweep).  ``log_likelihood``: write the
    pointwise log-likelihood into the InferenceData (``K N`` values per draw).  ``cache``: keep the
    pseudopriors on disk (:func:`fit_pseudopriors`).  Returns the summary written to
    ``summary.json``."""
    orders = validate_orders(orders)
    check_output(output)
    for label, value in (("num_adapt", num_adapt), ("num_samples", num_samples), ("num_chains", num_chains)):
        if int(value) != value or value < 1:
            raise ValueError(f"{label} must be a positive integer, got {value!r}")
    series, true_order = load_series(data, orders=orders, simulated_size=simulated_size,
                                     simulated_order=simulated_order, seed=seed, column=column, kind=kind)
    arch_data = prepare(series.returns, orders)
    y = np.asarray(arch_data.y)
    models = arch_models(orders)
    log(f"ARCH order selection on {series.name}: T = {len(series.returns):,} returns, N = {y.shape[0]:,} "
        f"terms, orders {list(orders)}, delta = {delta}")
    job_c0, job_t0 = compile_seconds(), time.perf_counter()
    pseudopriors, auto_choice, cached = fit_pseudopriors(y, orders, pseudoprior=pseudoprior, seed=seed,
                                                         num_adapt=num_adapt, cache=cache)
    fit_seconds = time.perf_counter() - job_t0
    kinds = ", ".join(f"q={q}: {c.get('pseudoprior')}" for q, c in zip(orders, auto_choice.values()))
    log(f"  pseudopriors of the {len(orders)} orders {'loaded from the cache' if cached else 'fitted'} in "
        f"{fit_seconds:.1f} s ({kinds or pseudoprior})")
    if check_decisions == "auto":  # the audit's full passes (K N each) at most 0.1 N per sweep
        check_decisions = 10 * len(orders)
    runs = {}
    for name in METHODS:
        t0 = time.perf_counter()
        runs[name] = run_sampler(name, models, y, pseudopriors=pseudopriors, num_warmup=num_adapt,
                                 num_samples=num_samples, num_chains=num_chains, seed=seed, delta=delta,
                                 check_decisions=check_decisions, progress_bar=progress_bar, orders=orders)
        sec = runs[name].seconds
        log(f"  {name:6s} sampler: {time.perf_counter() - t0:.1f} s (warmup {sec['warmup']:.1f} s, sampling "
            f"{sec['sample']:.1f} s; XLA compilation {sec['compile']:.1f} s of them)")
    diag = {m: diagnostics(r) for m, r in runs.items()}
    tv, tv_se = total_variation(runs["racing"], runs["exact"])
    post = {m: r.posterior.probabilities.tolist() for m, r in runs.items()}
    summary = {
        "series": series.name, "num_returns": int(len(series.returns)), "num_terms": int(y.shape[0]),
        "orders": list(orders), "true_order": true_order, "delta": delta, "pseudoprior": pseudoprior,
        "pseudoprior_choice": {str(q): c for q, c in zip(orders, auto_choice.values())},
        "pseudoprior_fit_seconds": fit_seconds, "pseudoprior_from_cache": cached,
        "check_decisions_every": int(check_decisions),
        "num_adapt": num_adapt, "num_samples": num_samples, "num_chains": num_chains, "seed": seed,
        "posterior_q": post,
        "posterior_q_stderr": {m: r.posterior.stderr.tolist() for m, r in runs.items()},
        "posterior_mode": {m: int(orders[int(np.argmax(p))]) for m, p in post.items()},
        "total_variation": {"racing_vs_exact": tv, "monte_carlo_se": tv_se},
        "likelihood_evaluations": {m: d["likelihood_evaluations"] for m, d in diag.items()},
        "diagnostics": diag,
        "adjusted_log_prior": {m: np.asarray(r.mcmc.last_state.log_prior_adjustment).reshape(-1, len(orders)).tolist()
                               for m, r in runs.items()},
    }
    if check_decisions:
        summary["decision_error_rates"] = {"model": decision_error_rate(runs["racing"])}
    if bic and true_order is None:
        t0 = time.perf_counter()
        summary["bic_check"] = bic_check(series.returns, orders, fit_laplace(arch_data))
        log(f"  maximum-likelihood fits (arch package) in {time.perf_counter() - t0:.1f} s")
    import arviz as az

    for m, r in runs.items():
        # dims={}, pred_dims={}: the sites have no plate dimensions to name, and ArviZ 1.x's inference of them
        # fails on NumPyro 0.22 (it reads numpyro.infer.initialization through a lazy module)
        # log_likelihood: the pointwise log-likelihood of every order at every term and draw is
        # K N x draws numbers (GBs for the default job); kept only on request
        az.from_numpyro(r.mcmc, log_likelihood=bool(log_likelihood), dims={}, pred_dims={}).to_netcdf(
            os.path.join(output, f"{m}.nc"))
    summary["figures"] = [os.path.basename(p) for p in make_figures(series, runs, output)]
    summary["seconds"] = {"end_to_end": time.perf_counter() - job_t0, "compile": compile_seconds() - job_c0,
                          "pseudopriors": fit_seconds}
    with open(os.path.join(output, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    _print_summary(summary, log)
    sizes = sum(os.path.getsize(os.path.join(output, f"{m}.nc")) for m in runs) / 1e6
    log(f"  wrote {output}/summary.json, racing.nc and exact.nc ({sizes:.1f} MB) and {len(summary['figures'])} figures")
    return summary


def _print_summary(s: dict, log) -> None:
    log("")
    log("  order q        " + "".join(f"{q:>8d}" for q in s["orders"]))
    for m in METHODS:
        log(f"  p(q|r) {m:7s} " + "".join(f"{p:8.3f}" for p in s["posterior_q"][m]))
    tv = s["total_variation"]
    log(f"  total variation racing vs exact: {tv['racing_vs_exact']:.3f} (Monte Carlo s.e. {tv['monte_carlo_se']:.3f})")
    for m in METHODS:
        d = s["diagnostics"][m]
        log(f"  {m:6s}: {d['likelihood_evaluations']:.3g} likelihood evaluations ({d['evaluations_per_iteration_over_n']:.2f} N "
            f"per iteration), ESS(q) {d['ess_q']:.0f}, R-hat {d['rhat_q']:.3f}, {d['model_switches']} switches, "
            f"{d['ess_per_million_evaluations']:.2f} ESS per 1e6 evaluations, {d['seconds']['sample']:.1f} s sampling")
    e2e = {m: s["diagnostics"][m]["ess_per_second_end_to_end"] for m in METHODS}
    log(f"  ESS(q) per second, warmup and sampling with their compilation: racing {e2e['racing']:.2f}, exact "
        f"{e2e['exact']:.2f} (racing / exact {e2e['racing'] / e2e['exact']:.2f}x); XLA compilation "
        + ", ".join(f"{m} {s['diagnostics'][m]['seconds']['compile']:.1f} s" for m in METHODS))
    if "seconds" in s:
        log(f"  job end to end {s['seconds']['end_to_end']:.1f} s (pseudopriors {s['seconds']['pseudopriors']:.1f} s, "
            f"XLA compilation {s['seconds']['compile']:.1f} s)")
    if "decision_error_rates" in s:
        for name, e in s["decision_error_rates"].items():
            log(f"  racing {name} decisions: {e['errors']} / {e['decisions']} differ from the exact decision "
                f"(rate {e['rate']:.2e}, 95% CI [{e['ci95'][0]:.1e}, {e['ci95'][1]:.1e}]; delta = {s['delta']})")
    if "bic_check" in s:
        f = s["bic_check"]["favoured"]
        log(f"  favoured order: posterior mode {s['posterior_mode']['exact']} (exact) / {s['posterior_mode']['racing']} (racing); "
            f"BIC arch package {f['arch_bic']}, conditional BIC {f['conditional_bic']}, Laplace evidence {f['laplace_log_evidence']}")
    if s.get("true_order") is not None:
        i = s["orders"].index(s["true_order"])
        log(f"  true order {s['true_order']}: posterior mass {s['posterior_q']['exact'][i]:.3f} (exact), "
            f"{s['posterior_q']['racing'][i]:.3f} (racing)")
