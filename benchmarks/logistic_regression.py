"""Bayesian logistic regression at large N: RacingMH vs NumPyro NUTS and HMCECS.

One run, one machine, the same simulated data for every method: d = 10 covariates
plus an intercept, N in ``--sizes`` (default 1e5 and 1e6).  Methods
(:data:`experiments.logistic.SAMPLERS`):

* ``nuts``: NumPyro NUTS on the full data;
* ``hmcecs``: NumPyro HMCECS (NUTS inner kernel, subsample size 1000, 100 blocks) with
  ``HMCECS.taylor_proxy`` at the MAP (full-data Newton iterations; their time is added
  to HMCECS's end-to-end time);
* ``racing_rw`` / ``racing_rw_taylor`` / ``racing_langevin`` /
  ``racing_langevin_taylor``: RacingMH with a random-walk or mini-batch Langevin
  proposal, without or with the Taylor control variate (RacingMH finds its own MAP
  during ``init``; that time is in its end-to-end time).

Per method, one chain:

* end to end: ``mcmc.warmup`` + ``mcmc.run`` (init, compilation, warmup, sampling);
* steady state: a continuation of the same chain from ``mcmc.last_state``, compiled
  ahead of time and then timed (see ``steady_state_run``: NumPyro's own continuation
  ``run`` recompiles its loop every time, so its wall time is not steady state);
* min / median ArviZ bulk ESS over the 11 parameters, min-ESS per second (steady: ESS
  and time of the continuation; end to end: ESS of the ``run`` draws over warmup +
  sampling time);
* per-datum log-likelihood evaluations per iteration (NUTS: N x leapfrog steps;
  HMCECS: see ``likelihood_evals_per_iteration``; RacingMH: ``num_likelihood_evals``);
* the error of posterior means and sds (all post-warmup draws, i.e. both stretches)
  against a reference in units of MCSE (the method's and the reference's combined).
  The reference is NumPyro NUTS, 4 vectorised chains on the same data, with
  ``--ref-samples`` draws each; the Laplace approximation at the MAP is a second,
  independent check.

Usage:
    python benchmarks/logistic_regression.py                  # full run (~30-40 min on 2 cores)
    python benchmarks/logistic_regression.py --quick          # smoke run, N = 5000, seconds
    python benchmarks/logistic_regression.py --markdown-only  # rewrite the .md from the .json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np

from experiments import logistic as L

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "logistic_regression.json"

#: per method: (num_warmup, num_samples, num_steady); RacingMH steps with the Taylor
#: control variate are ~1000x cheaper than a NUTS iteration at N = 1e6, so those chains
#: are longer; without the control variate a race reads a large part of the data.
FULL_SIZES = {
    "nuts": (500, 1000, 1000),
    "hmcecs": (1000, 2000, 2000),
    "racing_rw": (1000, 2000, 2000),
    "racing_rw_taylor": (2000, 20000, 40000),
    "racing_langevin": (1000, 2000, 2000),
    "racing_langevin_taylor": (2000, 10000, 20000),
}
QUICK_SIZES = {m: (200, 300, 300) for m in FULL_SIZES}
FULL_REF = (500, 1500, 4)  # warmup, samples per chain, chains
QUICK_REF = (200, 300, 2)
SUBSAMPLE_SIZE = 1000
NUM_BLOCKS = 100
TARGET_METHOD = "racing_langevin_taylor"

DISCUSSION = ""  # filled in from the committed results (see the end of the .md)


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def _git_dirty() -> list:
    """Tracked files modified in the working tree (the run imports the working tree)."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE,
                             capture_output=True, text=True, check=True).stdout
        return [line[3:] for line in out.splitlines() if line.strip()]
    except Exception:  # noqa: BLE001
        return []


def run_reference(data, warmup, samples, chains, seed=12345):
    from numpyro.infer import MCMC, NUTS

    t0 = time.perf_counter()
    mcmc = MCMC(NUTS(L.logistic_model), num_warmup=warmup, num_samples=samples, num_chains=chains,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(seed), data.x, data.y)
    theta = L.flatten_samples(mcmc.get_samples(group_by_chain=True))  # [C, S, p]
    seconds = time.perf_counter() - t0
    import arviz as az

    stats = L.mean_sd_mcse(theta)
    idata = L.to_idata(theta)
    rhat = az.rhat(idata)
    ess = L.ess_summary(theta)
    return theta, stats, {
        "warmup": warmup, "samples_per_chain": samples, "chains": chains, "seconds": seconds,
        "min_ess": ess["min_ess"], "median_ess": ess["median_ess"],
        "max_rhat": float(max(float(rhat[v]) for v in idata.posterior.data_vars)),
        "mean": stats["mean"].tolist(), "sd": stats["sd"].tolist(),
        "mcse_mean": stats["mcse_mean"].tolist(), "mcse_sd": stats["mcse_sd"].tolist(),
    }


def run_method(method, data, mode, ref_stats, laplace, sizes, seed, map_seconds):
    n = int(data.x.shape[0])
    warmup, samples, steady = sizes
    kernel = L.make_kernel(method, reference=mode, num_blocks=NUM_BLOCKS)
    # count kernel.init calls (NumPyro calls init again from `run` when a kernel has no
    # `_sample_fn` attribute); their time is part of the end-to-end time either way
    init_log = L.count_init(kernel)
    args, kwargs = L.model_args_for(method, data, SUBSAMPLE_SIZE)
    fields = L.extra_fields_for(method)
    r = L.timed_run(kernel, args, kwargs, num_warmup=warmup, num_samples=samples, seed=seed,
                    extra_fields=fields, num_steady=steady)
    extra_map = map_seconds if method == "hmcecs" else 0.0
    e2e = r.warmup_seconds + r.sampling_seconds + extra_map
    ess_e2e = L.ess_summary(r.theta)
    ess_steady = L.ess_summary(r.theta_steady)
    both = np.concatenate([r.theta, r.theta_steady], axis=0)
    err = L.compare_to_reference(both, ref_stats)
    mean = both.mean(0)
    evals = L.likelihood_evals_per_iteration(method, r.extra_steady, n, subsample_size=SUBSAMPLE_SIZE,
                                             num_blocks=NUM_BLOCKS)
    out = {
        "method": method, "description": L.SAMPLERS[method], "n": n,
        "num_warmup": warmup, "num_samples": samples, "num_steady": steady,
        "map_seconds_added": extra_map,
        "warmup_seconds": r.warmup_seconds, "sampling_seconds": r.sampling_seconds,
        "end_to_end_seconds": e2e,
        "init_calls": init_log["calls"], "init_seconds": init_log["seconds"],
        "steady_compile_seconds": r.steady_compile_seconds, "steady_seconds": r.steady_seconds,
        "steady_ms_per_iter": 1e3 * r.steady_seconds / steady,
        "min_ess_steady": ess_steady["min_ess"], "median_ess_steady": ess_steady["median_ess"],
        "min_ess_e2e": ess_e2e["min_ess"], "median_ess_e2e": ess_e2e["median_ess"],
        "min_ess_per_s_steady": ess_steady["min_ess"] / r.steady_seconds,
        "min_ess_per_s_e2e": ess_e2e["min_ess"] / e2e,
        "evals_per_iter": evals, "evals_per_iter_over_n": evals / n,
        "accept_rate": float(np.mean(r.extra_steady["accept_prob"])),
        "max_abs_mean_minus_laplace_in_sd": float(np.max(np.abs(mean - laplace[0]) / laplace[1])),
        "sd_over_laplace_min": float(np.min(both.std(0) / laplace[1])),
        "sd_over_laplace_max": float(np.max(both.std(0) / laplace[1])),
        **err,
    }
    if method == "nuts":
        out["mean_leapfrog_steps"] = float(np.mean(r.extra_steady["num_steps"]))
    if method == "hmcecs":
        out["mean_leapfrog_steps"] = float(np.mean(r.extra_steady["hmc_state.num_steps"]))
    if method.startswith("racing"):
        out["mean_race_stage"] = float(np.mean(r.extra_steady["race_stage"]))
        out["fraction_full_reads"] = float(np.mean(r.extra_steady["num_likelihood_evals"] >= 2 * n))
        st = r.mcmc.last_state
        out["step_size"] = float(st.step_size)
    out["steady_seconds_all"] = [r.steady_seconds]
    return out, r.retime


def retime_steady(rows, retimers, rounds):
    """Re-execute every method's compiled steady continuation ``rounds`` more times,
    interleaved across methods (round-robin), so that a load change on the shared machine
    hits all methods alike; the steady time is the median of all executions."""
    for _ in range(rounds):
        for row, rerun in zip(rows, retimers):
            row["steady_seconds_all"].append(rerun())
    for row in rows:
        times = row["steady_seconds_all"]
        med = float(np.median(times))
        row["steady_seconds"] = med
        row["steady_ms_per_iter"] = 1e3 * med / row["num_steady"]
        row["steady_ms_per_iter_min"] = 1e3 * float(np.min(times)) / row["num_steady"]
        row["steady_ms_per_iter_max"] = 1e3 * float(np.max(times)) / row["num_steady"]
        row["min_ess_per_s_steady"] = row["min_ess_steady"] / med


def target_check(results, n):
    rows = {r["method"]: r for r in results if r["n"] == n}
    if not all(k in rows for k in (TARGET_METHOD, "hmcecs", "nuts")):
        return None
    rac, ecs, nuts = rows[TARGET_METHOD], rows["hmcecs"], rows["nuts"]
    vs_ecs = rac["min_ess_per_s_steady"] / ecs["min_ess_per_s_steady"]
    vs_nuts = rac["min_ess_per_s_steady"] / nuts["min_ess_per_s_steady"]
    return {
        "n": n, "method": TARGET_METHOD,
        "steady_ratio_vs_hmcecs": vs_ecs, "steady_ratio_vs_nuts": vs_nuts,
        "max_z_mean": rac["max_z_mean"], "num_z_mean_over_2": rac["num_z_mean_over_2"],
        "chi2_mean_pvalue": rac["chi2_mean_pvalue"],
        "speed_met": bool(vs_ecs >= 2 and vs_nuts >= 10),
        "means_within_2_mcse": bool(rac["max_z_mean"] <= 2),
        "e2e_ratio_vs_hmcecs": rac["min_ess_per_s_e2e"] / ecs["min_ess_per_s_e2e"],
        "e2e_ratio_vs_nuts": rac["min_ess_per_s_e2e"] / nuts["min_ess_per_s_e2e"],
    }


def _fmt(x, digits=3):
    if x is None:
        return "-"
    if isinstance(x, (int, np.integer)):
        return f"{x:,}"
    ax = abs(x)
    if ax == 0:
        return "0"
    if ax >= 1e5 or ax < 1e-2:
        return f"{x:.2e}"
    if ax >= 100:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def write_markdown(payload, path):
    meta = payload["meta"]
    lines = [
        "# Bayesian logistic regression at large N (benchmarks/logistic_regression.py)",
        "",
        f"d = {meta['d']} covariates + intercept, x ~ N(0, I), priors w ~ N(0, 1), b ~ N(0, 5^2); "
        f"one chain per method; device {meta['device']}, {meta['cpu_count']} CPU cores "
        f"(shared; load average {meta['loadavg_start'][0]:.1f} at the start, "
        f"{meta['loadavg_end'][0]:.1f} at the end); jax {meta['jax']}, numpyro {meta['numpyro']}; "
        f"commit {meta['git_commit'][:10]}; {meta['date']}; full run {meta['total_seconds'] / 60:.1f} min"
        + (" (**quick smoke run**)" if meta.get("quick") else "") + ".",
        "",
        "Columns: *steady* = a compiled continuation of the chain, execution time only (median "
        f"of {1 + meta.get('retime_rounds', 0)} executions interleaved round-robin across methods, "
        "range in brackets); "
        "*e2e* = `warmup` + `run` (init, MAP/proxy setup, compilation, warmup, sampling; for "
        "HMCECS plus the Newton MAP it needs); ESS = ArviZ bulk ESS, min / median over the 11 "
        "parameters; evals/iter = per-datum log-likelihood evaluations per iteration; "
        "z = |error of the posterior mean (sd)| / sqrt(MCSE^2 + MCSE_ref^2) against the NUTS "
        "reference, over all post-warmup draws of the method (both stretches); "
        "#z>2 counts parameters (of 11) with z_mean > 2 -- about 0.5 expected for a correct "
        "sampler, and max z_mean > 2 happens with probability ~0.4; p = chi-square p-value of "
        "sum z_mean^2.",
        "",
    ]
    for n in meta["sizes"]:
        ref = payload["reference"][str(n)]
        lines += [
            f"## N = {n:,}",
            "",
            f"Reference: NUTS, {ref['chains']} chains x {ref['samples_per_chain']} draws "
            f"({ref['warmup']} warmup), {ref['seconds']:.0f} s, min ESS {ref['min_ess']:.0f}, "
            f"max R-hat {ref['max_rhat']:.3f}; its means differ from the Laplace approximation by at "
            f"most {payload['reference_vs_laplace'][str(n)]:.3f} posterior sd.",
            "",
            "| method | draws (warmup/run/steady) | e2e (s) | steady ms/iter (range) | min ESS | median ESS | "
            "min-ESS/s steady | min-ESS/s e2e | evals/iter | evals/iter / N | accept | max z_mean | "
            "#z>2 | p | max z_sd |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in payload["results"]:
            if r["n"] != n:
                continue
            lines.append(
                f"| {r['method']} | {r['num_warmup']}/{r['num_samples']}/{r['num_steady']} | "
                f"{_fmt(r['end_to_end_seconds'])} | {_fmt(r['steady_ms_per_iter'])} "
                f"({_fmt(r.get('steady_ms_per_iter_min'))}-{_fmt(r.get('steady_ms_per_iter_max'))}) | "
                f"{_fmt(r['min_ess_steady'])} | {_fmt(r['median_ess_steady'])} | "
                f"{_fmt(r['min_ess_per_s_steady'])} | {_fmt(r['min_ess_per_s_e2e'])} | "
                f"{_fmt(r['evals_per_iter'])} | {_fmt(r['evals_per_iter_over_n'])} | "
                f"{r['accept_rate']:.2f} | {_fmt(r['max_z_mean'])} | {r['num_z_mean_over_2']} | "
                f"{_fmt(r['chi2_mean_pvalue'])} | {_fmt(r['max_z_sd'])} |"
            )
        lines.append("")
        extra = []
        for r in payload["results"]:
            if r["n"] != n:
                continue
            bits = [f"init {r['init_seconds']:.1f} s over {r['init_calls']} call(s)",
                    f"steady compile {r['steady_compile_seconds']:.1f} s",
                    f"sd / Laplace sd in [{r['sd_over_laplace_min']:.2f}, {r['sd_over_laplace_max']:.2f}]"]
            if "mean_leapfrog_steps" in r:
                bits.append(f"{r['mean_leapfrog_steps']:.1f} leapfrog steps/iter")
            if "mean_race_stage" in r:
                bits.append(f"race stage {r['mean_race_stage']:.2f}, full reads "
                            f"{100 * r['fraction_full_reads']:.1f}%, step size {r['step_size']:.3g}")
            extra.append(f"* {r['method']}: " + "; ".join(bits))
        lines += extra + [""]
        tc = payload["target"].get(str(n))
        if tc:
            lines += [
                f"Target at N = {n:,} ({tc['method']}): steady min-ESS/s "
                f"{tc['steady_ratio_vs_hmcecs']:.1f}x HMCECS (target >= 2) and "
                f"{tc['steady_ratio_vs_nuts']:.1f}x NUTS (target >= 10) -> speed "
                f"**{'met' if tc['speed_met'] else 'not met'}**; means: max z {tc['max_z_mean']:.2f} "
                f"({tc['num_z_mean_over_2']} of 11 over 2, chi-square p = {tc['chi2_mean_pvalue']:.2f}) -> "
                f"within 2 MCSE **{'yes' if tc['means_within_2_mcse'] else 'no'}**. End to end: "
                f"{tc['e2e_ratio_vs_hmcecs']:.1f}x HMCECS, {tc['e2e_ratio_vs_nuts']:.1f}x NUTS.",
                "",
            ]
    if payload.get("discussion"):
        lines += ["## Discussion", "", payload["discussion"].strip(), ""]
    Path(path).write_text("\n".join(lines))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=float, nargs="+", default=[1e5, 1e6])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON path; the .md goes next to it")
    ap.add_argument("--quick", action="store_true", help="tiny smoke run (N = 5000, few draws)")
    ap.add_argument("--methods", nargs="+", default=list(L.SAMPLERS), choices=list(L.SAMPLERS))
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--retime-rounds", type=int, default=None,
                    help="extra interleaved executions of every steady continuation (default 4; quick 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown-only", action="store_true", help="rewrite the .md from the .json")
    ap.add_argument("--discussion", type=Path, default=None,
                    help="markdown file with the discussion to embed (with --markdown-only)")
    args = ap.parse_args(argv)
    md_path = args.out.with_suffix(".md")
    if args.markdown_only:
        payload = json.loads(args.out.read_text())
        if args.discussion is not None:
            payload["discussion"] = args.discussion.read_text()
            args.out.write_text(json.dumps(payload, indent=1))
        write_markdown(payload, md_path)
        print(md_path.read_text())
        return payload

    sizes = [5000] if args.quick else [int(s) for s in args.sizes]
    if args.retime_rounds is None:
        args.retime_rounds = 1 if args.quick else 4
    method_sizes = QUICK_SIZES if args.quick else FULL_SIZES
    ref_w, ref_s, ref_c = QUICK_REF if args.quick else FULL_REF
    import numpyro

    t_start = time.perf_counter()
    meta = {
        "sizes": sizes, "d": args.d, "quick": args.quick, "seed": args.seed,
        "methods": args.methods, "method_sizes": {m: method_sizes[m] for m in args.methods},
        "subsample_size": SUBSAMPLE_SIZE, "num_blocks": NUM_BLOCKS, "retime_rounds": args.retime_rounds,
        "device": str(jax.devices()[0]), "cpu_count": os.cpu_count(),
        "loadavg_start": list(os.getloadavg()), "jax": jax.__version__, "numpyro": numpyro.__version__,
        "python": platform.python_version(), "git_commit": _git_commit(), "git_dirty": _git_dirty(),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }
    payload = {"meta": meta, "reference": {}, "reference_vs_laplace": {}, "data": {}, "results": [],
               "target": {}, "discussion": DISCUSSION}
    for n in sizes:
        print(f"== N = {n:,}", flush=True)
        data = L.simulate(n, args.d, seed=args.seed)
        t = time.perf_counter()
        mode = L.map_estimate(data.x, data.y)
        jax.block_until_ready(mode)
        map_seconds = time.perf_counter() - t
        laplace = L.laplace_summary(data.x, data.y, mode)
        payload["data"][str(n)] = {"w_true": data.w_true.tolist(), "b_true": data.b_true,
                                   "mean_y": float(np.mean(np.asarray(data.y))), "map_seconds": map_seconds,
                                   "laplace_mean": laplace[0].tolist(), "laplace_sd": laplace[1].tolist()}
        _, ref_stats, ref_info = run_reference(data, ref_w, ref_s, ref_c, seed=args.seed + 12345)
        payload["reference"][str(n)] = ref_info
        payload["reference_vs_laplace"][str(n)] = float(np.max(np.abs(ref_stats["mean"] - laplace[0]) / laplace[1]))
        print(f"reference: {ref_info['seconds']:.0f} s, min ESS {ref_info['min_ess']:.0f}", flush=True)
        rows, retimers = [], []
        for i, method in enumerate(args.methods):
            res, rerun = run_method(method, data, mode, ref_stats, laplace, method_sizes[method],
                                    seed=args.seed + 100 * (i + 1), map_seconds=map_seconds)
            payload["results"].append(res)
            rows.append(res)
            retimers.append(rerun)
            print(f"{method}: e2e {res['end_to_end_seconds']:.1f} s, steady {res['steady_ms_per_iter']:.3f} ms/iter, "
                  f"min ESS {res['min_ess_steady']:.0f}, min-ESS/s {res['min_ess_per_s_steady']:.1f}, "
                  f"evals/iter {res['evals_per_iter']:.0f}, max z_mean {res['max_z_mean']:.2f}, "
                  f"max z_sd {res['max_z_sd']:.2f}", flush=True)
            tc = target_check(payload["results"], n)
            if tc:
                payload["target"][str(n)] = tc
            meta["total_seconds"] = time.perf_counter() - t_start
            meta["loadavg_end"] = list(os.getloadavg())
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(payload, indent=1))  # partial results survive a crash
        retime_steady(rows, retimers, args.retime_rounds)
        del retimers
        for res in rows:
            print(f"{res['method']}: steady {res['steady_ms_per_iter']:.3f} ms/iter (median of "
                  f"{len(res['steady_seconds_all'])}: {res['steady_ms_per_iter_min']:.3f}-"
                  f"{res['steady_ms_per_iter_max']:.3f}), min-ESS/s {res['min_ess_per_s_steady']:.1f}", flush=True)
        tc = target_check(payload["results"], n)
        if tc:
            payload["target"][str(n)] = tc
        meta.setdefault("loadavg_after_size", {})[str(n)] = list(os.getloadavg())
        args.out.write_text(json.dumps(payload, indent=1))
    meta["total_seconds"] = time.perf_counter() - t_start
    meta["loadavg_end"] = list(os.getloadavg())
    args.out.write_text(json.dumps(payload, indent=1))
    write_markdown(payload, md_path)
    print(md_path.read_text())
    return payload


if __name__ == "__main__":
    main()
