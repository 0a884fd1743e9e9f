"""The main job: Bayesian ARCH order selection on a real return series, racing vs exact.

``subsample-mcmc arch`` (also ``python -m subsample_mcmc arch``) calls :func:`run_job`:
load the series, fit the per-order Laplace approximations, run the racing sampler
(every decision re-checked exactly) and the exact sampler from the same state, and write
ArviZ InferenceData, PNG figures and ``summary.json`` to the output directory.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Optional, Sequence

import numpy as np

from .arch import DEFAULT_ORDERS, SERIES, ReturnSeries, load_returns, prepare, simulate_arch, validate_orders
from .arch_sampler import ArchOrderSampler, ArchRun, total_variation

__all__ = ["load_series", "bic_check", "diagnostics", "make_figures", "run_job"]


def load_series(data: str, *, orders: Sequence[int], simulated_size: int = 100_000, simulated_order: int = 10,
                seed: int = 0, column: Optional[str] = None, kind: Optional[str] = None):
    """``(ReturnSeries, true_order or None)`` for ``--data sp500|nasdaq|simulated|PATH.csv``."""
    if data == "simulated":
        r, _ = simulate_arch(simulated_size + max(orders), order=simulated_order, seed=seed)
        r = r - r.mean()
        return ReturnSeries(f"simulated ARCH({simulated_order})", r, None, 0.0), simulated_order
    if data in SERIES:
        return load_returns(data), None
    if not (data.lower().endswith(".csv") or os.path.exists(data)):
        raise ValueError(f"--data must be one of {SERIES + ('simulated',)} or a path to a CSV file, got {data!r}")
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


def diagnostics(run: ArchRun) -> dict:
    """ESS (bulk) and R-hat of ``q`` from ArviZ, likelihood evaluations and wall time."""
    import arviz as az

    q = run.q.astype(np.float64)
    ess = float(az.ess(q)) if q.shape[1] >= 4 else float("nan")
    rhat = float(az.rhat(q)) if q.shape[0] >= 2 and q.shape[1] >= 4 else float("nan")
    evals = float(run.evals.sum())
    return {
        "ess_q": ess, "rhat_q": rhat,
        "likelihood_evaluations": evals,
        "likelihood_evaluations_adaptive": float(run.adapt_evals.sum()),
        "evaluations_per_iteration_over_n": float(run.evals.mean() / run.num_data),
        "seconds": run.seconds,
        "ess_per_million_evaluations": ess / evals * 1e6 if evals else float("nan"),
        "ess_per_second": ess / run.seconds["sample"] if run.seconds.get("sample") else float("nan"),
        "acceptance_rate": float(run.accepted.mean()),
    }


def make_figures(series: ReturnSeries, runs: dict, out_dir: str, *, max_lag: int = 50) -> list:
    """PNG figures: returns, posterior over q, trace and autocorrelation of q, Wang-Landau curves."""
    import arviz as az
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
        ax.bar(np.arange(len(orders)) + (i - (len(runs) - 1) / 2) * width, run.posterior_q(), width, label=name)
    ax.set_xticks(np.arange(len(orders)), orders)
    ax.set_xlabel("order q")
    ax.set_ylabel("p(q | r)")
    ax.legend()
    save(fig, "posterior_q.png")

    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.2 * len(runs)), sharex=True, squeeze=False)
    for ax, (name, run) in zip(axes[:, 0], runs.items()):
        ax.plot(run.q[0], lw=0.5, drawstyle="steps-mid")
        ax.set_ylabel(f"q ({name})")
    axes[-1, 0].set_xlabel("iteration (chain 0, fixed adjusted prior)")
    save(fig, "trace_q.png")

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, run in runs.items():
        q = run.q.astype(float)
        lags = min(max_lag, q.shape[1] - 1)
        acf = np.mean([az.autocorr(c)[: lags + 1] for c in q], axis=0)
        ax.plot(np.arange(lags + 1), acf, label=name)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("lag")
    ax.set_ylabel("autocorrelation of q")
    ax.legend()
    save(fig, "autocorr_q.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    for (name, run), style in zip(runs.items(), ("--", "-")):
        if run.adapt_evals.shape[1] == 0:
            continue
        cum = np.cumsum(run.adapt_evals[0])
        est = run.estimated_log_posterior_adaptive()[0]
        for j, q in enumerate(orders):
            ax.plot(cum, est[:, j], style, color=f"C{j}", lw=1, label=f"q={q}" if name == "exact" or len(runs) == 1 else None)
    ax.set_xscale("log")
    ax.set_xlabel("likelihood evaluations (chain 0, adaptive phase)")
    ax.set_ylabel("estimated log p(q | r)")
    ax.set_title("Wang-Landau estimate (solid: exact, dashed: racing)")
    ax.legend(fontsize=7, ncol=2)
    save(fig, "wang_landau.png")
    return paths


def run_job(*, data: str = "sp500", orders: Sequence[int] = DEFAULT_ORDERS, num_adapt: int = 1000,
            num_samples: int = 2000, num_chains: int = 4, seed: int = 0, output: str = "arch-output",
            delta: float = 0.05, control_variate: str = "data", check_decisions: bool = True,
            simulated_size: int = 100_000, simulated_order: int = 10, column: Optional[str] = None,
            kind: Optional[str] = None, bic: bool = True, progress_bar: bool = True,
            initial_prior: str = "uniform", log=print) -> dict:
    """Run racing and exact samplers on one series and write the outputs; returns the summary."""
    orders = validate_orders(orders)
    series, true_order = load_series(data, orders=orders, simulated_size=simulated_size,
                                     simulated_order=simulated_order, seed=seed, column=column, kind=kind)
    arch_data = prepare(series.returns, orders)
    os.makedirs(output, exist_ok=True)
    log(f"ARCH order selection on {series.name}: T = {len(series.returns):,} returns, N = {arch_data.y.shape[0]:,} "
        f"terms, orders {list(orders)}, delta = {delta}, control variate: {control_variate}")
    t0 = time.perf_counter()
    sampler = ArchOrderSampler(arch_data, delta=delta, control_variate=control_variate)
    log(f"  Laplace fits of the {len(orders)} orders (pseudopriors) in {time.perf_counter() - t0:.1f} s")
    runs = {}
    for method in ("racing", "exact"):
        t0 = time.perf_counter()
        runs[method] = sampler.run(seed, method=method, num_adapt=num_adapt, num_samples=num_samples,
                                   num_chains=num_chains, check_decisions=check_decisions and method == "racing",
                                   progress_bar=progress_bar, initial_prior=initial_prior)
        log(f"  {method:6s} sampler: {time.perf_counter() - t0:.1f} s")
    diag = {m: diagnostics(r) for m, r in runs.items()}
    tv, tv_se = total_variation(runs["racing"], runs["exact"])
    post = {m: r.posterior_q().tolist() for m, r in runs.items()}
    summary = {
        "series": series.name, "num_returns": int(len(series.returns)), "num_terms": int(arch_data.y.shape[0]),
        "orders": list(orders), "true_order": true_order, "delta": delta, "control_variate": control_variate,
        "num_adapt": num_adapt, "num_samples": num_samples, "initial_prior": initial_prior, "num_chains": num_chains, "seed": seed,
        "posterior_q": post,
        "posterior_mode": {m: int(orders[int(np.argmax(p))]) for m, p in post.items()},
        "total_variation": {"racing_vs_exact": tv, "monte_carlo_se": tv_se},
        "likelihood_evaluations": {m: d["likelihood_evaluations"] for m, d in diag.items()},
        "diagnostics": diag,
        "adjusted_log_prior": {m: r.log_pi_adj.tolist() for m, r in runs.items()},
    }
    if check_decisions:
        summary["decision_error_rates"] = runs["racing"].error_rates()
    if bic and true_order is None:
        t0 = time.perf_counter()
        summary["bic_check"] = bic_check(series.returns, orders, sampler.laplace)
        log(f"  maximum-likelihood fits (arch package) in {time.perf_counter() - t0:.1f} s")
    for m, r in runs.items():
        r.to_inference_data().to_netcdf(os.path.join(output, f"{m}.nc"))
    summary["figures"] = [os.path.basename(p) for p in make_figures(series, runs, output)]
    with open(os.path.join(output, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    _print_summary(summary, log)
    log(f"  wrote {output}/summary.json, racing.nc, exact.nc and {len(summary['figures'])} figures")
    return summary


def _print_summary(s: dict, log) -> None:
    log("")
    log("  order q        " + "".join(f"{q:>8d}" for q in s["orders"]))
    for m in ("racing", "exact"):
        log(f"  p(q|r) {m:7s} " + "".join(f"{p:8.3f}" for p in s["posterior_q"][m]))
    tv = s["total_variation"]
    log(f"  total variation racing vs exact: {tv['racing_vs_exact']:.3f} (Monte Carlo s.e. {tv['monte_carlo_se']:.3f})")
    for m in ("racing", "exact"):
        d = s["diagnostics"][m]
        log(f"  {m:6s}: {d['likelihood_evaluations']:.3g} likelihood evaluations ({d['evaluations_per_iteration_over_n']:.2f} N "
            f"per iteration), ESS(q) {d['ess_q']:.0f}, R-hat {d['rhat_q']:.3f}, "
            f"{d['ess_per_million_evaluations']:.2f} ESS per 1e6 evaluations, {d['seconds']['sample']:.1f} s sampling")
    if "decision_error_rates" in s:
        for name, e in s["decision_error_rates"].items():
            log(f"  racing {name:5s} decisions: {e['errors']} / {e['decisions']} differ from the exact decision "
                f"(rate {e['rate']:.2e}, 95% CI [{e['ci95'][0]:.1e}, {e['ci95'][1]:.1e}]; delta = {s['delta']})")
    if "bic_check" in s:
        f = s["bic_check"]["favoured"]
        log(f"  favoured order: posterior mode {s['posterior_mode']['exact']} (exact) / {s['posterior_mode']['racing']} (racing); "
            f"BIC arch package {f['arch_bic']}, conditional BIC {f['conditional_bic']}, Laplace evidence {f['laplace_log_evidence']}")
    if s.get("true_order") is not None:
        log(f"  true order {s['true_order']}: posterior mass {s['posterior_q']['exact'][s['orders'].index(s['true_order'])]:.3f} "
            f"(exact), {s['posterior_q']['racing'][s['orders'].index(s['true_order'])]:.3f} (racing)")
