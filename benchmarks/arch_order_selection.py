"""ARCH order selection on a real series: racing vs exact ``ModelSelection``, over seeds.

The issue's headline, measured with a standard error: for each seed, the racing
``ModelSelection`` (Racing-Normal model draws and RacingMH steps) and its exact counterpart
(``method="exact"``) run from the same seed on the same pseudopriors (fitted once per series
by ``ModelSelection``'s defaults, ``pseudoprior="auto"``) with ``--warmup`` Wang-Landau sweeps
and ``--samples`` frozen sweeps per chain.  Per seed: ESS(q) (ArviZ bulk over the chains) per
likelihood evaluation and per second of sampling, the racing/exact ratios; Wang-Landau's settle
point (every centred ``a_q`` within 1 nat of its frozen value for the rest of warmup) in
likelihood evaluations and seconds, a chain still moving in the last 5% of warmup counted as
**censored** at the end of warmup (so its ratio is a bound, and it is reported, not dropped);
total variation between the two posteriors over q with its Monte Carlo error; the racing
model draws' error rate (``check_decisions``, every ``--check-every``-th raced draw re-drawn
exactly).  Ratios are summarised by their mean and standard error over seeds.

Seconds come two ways, both reported.  *End to end*: NumPyro's ``MCMC.warmup`` and ``MCMC.run``
as a user calls them, which include compiling (or loading from JAX's persistent cache) each
chain's program and the decision checks' full passes.  *Steady*: the seconds per sweep of the
compiled step itself (``kernel.sample`` in a jitted ``fori_loop``, checks off, compiled first, then
the two samplers timed in turn five times and the median kept), times the run's sweeps: what a longer
run converges to.  Sampling: every chain's own sampling sweeps replayed from its post-warmup state
(the trajectory whose ESS(q) is reported); Wang-Landau's settle time: every chain's warmup replayed
from its start (made again with the chain's key, as ``MCMC.warmup`` made it) up to its settle sweep,
the replayed adjustment at that sweep checked against the run's own.  Both samplers run the models as the
job does, on the lag matrix alone (``series=`` is an option of ``models.arch.arch_numpyro_model``).

    python benchmarks/arch_order_selection.py --data djia --seeds 3      # the issue's default series
    python benchmarks/arch_order_selection.py --data sp500 --seeds 2 --warmup 300 --samples 600   # quick
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from subsample_mcmc import ModelSelection
from subsample_mcmc.cli import enable_compilation_cache
from subsample_mcmc.models.arch import DEFAULT_ORDERS, arch_models, load_returns, prepare
from subsample_mcmc.models.arch_job import decision_error_rate, diagnostics, run_sampler, total_variation

HERE = Path(__file__).resolve().parent


def mean_se(values) -> dict:
    v = np.asarray([x for x in values if np.isfinite(x)], np.float64)
    if v.size == 0:
        return {"mean": float("nan"), "se": float("nan"), "n": 0}
    return {"mean": float(v.mean()), "se": float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan"),
            "n": int(v.size)}


def steady_seconds_per_sweep(runs: dict, y, seed: int, settle: dict, repeats: int = 5, series=None) -> dict:
    """``{name: {"warmup": s, "sample": s, "settle_seconds": [s per chain], "replay_check": nats}}``:
    seconds of each run's compiled ``ModelSelection`` step, decision checks off, in one jitted
    ``fori_loop`` whose trip count is an argument (one program per sampler), replaying the run's own
    trajectories (the same keys, so the same draws; a raced sweep costs more where the models' sums are
    close, so a short stretch from one state is not representative).

    ``"sample"``: every chain's sampling sweeps from its post-warmup state, per sweep.  ``"settle_seconds"``:
    every chain's warmup from its start up to the sweep where Wang-Landau settled (``settle[name]["sweeps"]``),
    the start made again as ``MCMC.warmup`` made it (``kernel.init`` with the chain's key,
    ``split(PRNGKey(seed), chains)[c]``, sequential chains); ``"warmup"``: those seconds per sweep.
    ``"replay_check"``: the largest difference (nats) between the replayed Wang-Landau adjustment at each
    chain's settle sweep and the run's own (0: the replay ran the run's trajectory).  Every program is
    compiled and run once first; then the samplers are timed in turn, ``repeats`` rounds, and each part's
    median kept (this machine's speed drifts by tens of percent between seconds).  ``series``: the models'
    ``series`` argument, as the runs had it."""
    loops, checks = {}, {}
    kw = {} if series is None else {"series": jnp.asarray(series)}
    for name, run in runs.items():
        kernel = copy.copy(run.mcmc.sampler)
        kernel.check_decisions = 0
        loop = jax.jit(lambda s, data, kw, n, kernel=kernel: jax.lax.fori_loop(
            0, n, lambda _, t: kernel.sample(t, (data,), kw), s))
        post = run.mcmc.post_warmup_state  # chains ran one after another: a leading chain axis
        num_chains = jax.tree.leaves(post.i)[0].shape[0]
        num_samples = run.fields["num_likelihood_evals"].size // num_chains
        chain = [jax.tree.map(lambda v, c=c: v[c], post) for c in range(num_chains)]
        keys = jax.random.split(jax.random.PRNGKey(seed), num_chains)
        starts = [kernel.init(k, run.mcmc.num_warmup, None, (y,), dict(kw)) for k in keys]
        phases = {"warmup": list(zip(starts, settle[name]["sweeps"])),
                  "sample": [(st, num_samples) for st in chain]}
        for st, _ in phases["warmup"] + phases["sample"][:1]:  # compile (every part reuses the program)
            jax.block_until_ready(loop(st, y, kw, 1))
        adjust = run.warmup_fields["log_prior_adjustment"].astype(np.float64)  # [C, T, K], after each sweep
        diff = 0.0
        for c, (st, n) in enumerate(phases["warmup"]):
            if n > 0:
                a = np.asarray(loop(st, y, kw, n).log_prior_adjustment, np.float64)
                diff = max(diff, float(np.max(np.abs(a - adjust[c, n - 1]))))
        checks[name] = diff
        for phase, parts in phases.items():
            loops[name, phase] = (loop, parts)
    times = {key: [[] for _ in parts] for key, (_, parts) in loops.items()}
    for _ in range(repeats):
        for key, (loop, parts) in loops.items():
            for p, (st, n) in enumerate(parts):
                t0 = time.perf_counter()
                jax.block_until_ready(loop(st, y, kw, n))
                times[key][p].append(time.perf_counter() - t0)
    out = {}
    for name in runs:
        sweeps = {phase: sum(n for _, n in loops[name, phase][1]) for phase in ("warmup", "sample")}
        part = {phase: [float(np.median(t)) for t in times[name, phase]] for phase in ("warmup", "sample")}
        out[name] = {"warmup": sum(part["warmup"]) / max(sweeps["warmup"], 1),
                     "sample": sum(part["sample"]) / max(sweeps["sample"], 1),
                     "settle_seconds": part["warmup"], "replay_check": checks[name]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="djia")
    ap.add_argument("--orders", default=",".join(map(str, DEFAULT_ORDERS)))
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--delta", type=float, default=0.05)
    ap.add_argument("--check-every", type=int, default=10, help="re-draw every M-th raced model index exactly")
    args = ap.parse_args()
    enable_compilation_cache()  # as the CLI job: later chains and seeds load the compiled samplers
    orders = tuple(int(q) for q in args.orders.split(","))
    series = load_returns(args.data)
    arch_data = prepare(series.returns, orders)
    y = np.asarray(arch_data.y)
    models = arch_models(orders)
    t0 = time.perf_counter()
    fitter = ModelSelection(models)
    pseudopriors = fitter.pseudopriors(fitter.init(jax.random.PRNGKey(10_000), args.warmup, None, (y,), None))
    fit_seconds = time.perf_counter() - t0
    print(f"{series.name}: N = {y.shape[0]:,}, pseudopriors in {fit_seconds:.0f} s: {fitter.auto_choice}", flush=True)
    rows = []
    for seed in range(args.seeds):
        runs = {}
        for name in ("racing", "exact"):
            runs[name] = run_sampler(name, models, y, pseudopriors=pseudopriors, num_warmup=args.warmup,
                                     num_samples=args.samples, num_chains=args.chains, seed=seed, delta=args.delta,
                                     check_decisions=args.check_every, progress_bar=False,
                                     orders=orders)
        d = {m: diagnostics(r) for m, r in runs.items()}
        steady_all = steady_seconds_per_sweep(runs, y, seed, {m: d[m]["wang_landau_settle"] for m in runs})
        for m, r in runs.items():  # the compiled step's own seconds, and the figures they give
            steady = steady_all[m]
            settle = d[m]["wang_landau_settle"]
            d[m]["steady_seconds_per_sweep"] = steady
            d[m]["ess_per_second_steady"] = d[m]["ess_q"] / (r.fields["num_likelihood_evals"].size * steady["sample"])
            settle["seconds_steady"] = steady["settle_seconds"]  # each chain's warmup replayed up to its settle sweep
        tv, tv_se = total_variation(runs["racing"], runs["exact"])
        wl = {m: d[m]["wang_landau_settle"] for m in runs}
        row = {
            "seed": seed,
            "posterior_q": {m: r.posterior.probabilities.tolist() for m, r in runs.items()},
            "posterior_q_stderr": {m: r.posterior.stderr.tolist() for m, r in runs.items()},
            "total_variation": tv, "total_variation_se": tv_se,
            "decision_error_rate": decision_error_rate(runs["racing"]),
            "diagnostics": d,
            "ratio_ess_per_evaluation": d["racing"]["ess_per_million_evaluations"] / d["exact"]["ess_per_million_evaluations"],
            "ratio_ess_per_second": d["racing"]["ess_per_second"] / d["exact"]["ess_per_second"],
            "ratio_ess_per_second_steady": d["racing"]["ess_per_second_steady"] / d["exact"]["ess_per_second_steady"],
            "ratio_evaluations_per_sweep": d["exact"]["likelihood_evaluations"] / d["racing"]["likelihood_evaluations"],
            # per chain: exact's settle cost over racing's (> 1: racing settles with fewer); censored flags kept
            "wang_landau": {
                "evaluations_ratio": [e / r if r > 0 else float("nan") for e, r in
                                      zip(wl["exact"]["likelihood_evaluations"], wl["racing"]["likelihood_evaluations"])],
                "seconds_ratio": [e / r if r > 0 else float("nan") for e, r in
                                  zip(wl["exact"]["seconds"], wl["racing"]["seconds"])],
                "seconds_steady_ratio": [e / r if r > 0 else float("nan") for e, r in
                                         zip(wl["exact"]["seconds_steady"], wl["racing"]["seconds_steady"])],
                "censored": {m: wl[m]["censored"] for m in wl},
            },
        }
        rows.append(row)
        print(f"seed {seed}: ESS(q) racing {d['racing']['ess_q']:.0f} exact {d['exact']['ess_q']:.0f}; per evaluation "
              f"{row['ratio_ess_per_evaluation']:.2f}x, per second {row['ratio_ess_per_second']:.2f}x; TV {tv:.3f} ± {tv_se:.3f}; "
              f"steady {row['ratio_ess_per_second_steady']:.2f}x; "
              f"WL settle evaluations ratio {row['wang_landau']['evaluations_ratio']} censored {row['wang_landau']['censored']}",
              flush=True)
    summary = {
        "ess_per_evaluation": mean_se(r["ratio_ess_per_evaluation"] for r in rows),
        "ess_per_second": mean_se(r["ratio_ess_per_second"] for r in rows),
        "ess_per_second_steady": mean_se(r["ratio_ess_per_second_steady"] for r in rows),
        "seconds_per_sweep_steady": {m: mean_se(r["diagnostics"][m]["steady_seconds_per_sweep"]["sample"] for r in rows)
                                     for m in ("racing", "exact")},
        "fewer_evaluations_per_sweep": mean_se(r["ratio_evaluations_per_sweep"] for r in rows),
        "wang_landau_evaluations": mean_se(v for r in rows for v in r["wang_landau"]["evaluations_ratio"]),
        "wang_landau_seconds": mean_se(v for r in rows for v in r["wang_landau"]["seconds_ratio"]),
        "wang_landau_seconds_steady": mean_se(v for r in rows for v in r["wang_landau"]["seconds_steady_ratio"]),
        "wang_landau_censored_chains": {m: int(sum(sum(r["wang_landau"]["censored"][m]) for r in rows))
                                        for m in ("racing", "exact")},
        "replay_check_nats": float(max(r["diagnostics"][m]["steady_seconds_per_sweep"]["replay_check"]
                                       for r in rows for m in ("racing", "exact"))),
        "max_total_variation_z": float(max(r["total_variation"] / max(r["total_variation_se"], 1e-12) for r in rows)),
        "decision_errors": {"errors": sum(r["decision_error_rate"]["errors"] for r in rows),
                            "decisions": sum(r["decision_error_rate"]["decisions"] for r in rows)},
    }
    result = {"command": f"python benchmarks/arch_order_selection.py --data {args.data} --orders {args.orders} "
                         f"--warmup {args.warmup} --samples {args.samples} --chains {args.chains} --seeds {args.seeds} "
                         f"--check-every {args.check_every}",
              "series": series.name, "num_terms": int(y.shape[0]), "orders": list(orders),
              "pseudoprior_choice": fitter.auto_choice, "pseudoprior_fit_seconds": fit_seconds,
              "machine": platform.platform(), "summary": summary, "seeds": rows}
    out = HERE / "results" / f"arch_order_selection_{args.data}"
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    s = summary
    fmt = lambda m: f"{m['mean']:.2f} ± {m['se']:.2f} (n = {m['n']})"  # noqa: E731
    lines = [f"# ARCH order selection on {series.name} (N = {y.shape[0]:,}): racing vs exact ModelSelection", "",
             f"`{result['command']}`; {args.seeds} seeds x {args.chains} chains; ratios racing/exact, mean ± s.e. "
             "over seeds (Wang-Landau: over chains). *Steady* seconds: the compiled step's seconds per sweep "
             "(timed after compiling, the samplers in turn, median of 5; decision checks off; sampling: every "
             "chain's own sampling sweeps replayed from its post-warmup state; Wang-Landau's settle time: every "
             "chain's warmup replayed from its start up to its settle sweep) times the sweeps; "
             "*end to end*: NumPyro's warmup and run as called, including compiling or loading each chain's "
             "program (JAX's persistent compilation cache is on) and the decision checks' exact re-draws of "
             f"every {args.check_every}th raced model index.", "",
             "| figure | racing vs exact |", "|---|---|",
             f"| ESS(q) per likelihood evaluation | {fmt(s['ess_per_evaluation'])} |",
             f"| ESS(q) per second, steady | {fmt(s['ess_per_second_steady'])} |",
             f"| ESS(q) per second, end to end | {fmt(s['ess_per_second'])} |",
             "| seconds per sweep, steady (racing / exact) | "
             f"{s['seconds_per_sweep_steady']['racing']['mean'] * 1e3:.1f} / "
             f"{s['seconds_per_sweep_steady']['exact']['mean'] * 1e3:.1f} ms |",
             f"| fewer likelihood evaluations per sweep | {fmt(s['fewer_evaluations_per_sweep'])} |",
             f"| fewer evaluations for Wang-Landau to settle within 1 nat | {fmt(s['wang_landau_evaluations'])} |",
             f"| less warmup time for Wang-Landau to settle, steady | {fmt(s['wang_landau_seconds_steady'])} |",
             f"| less warmup time for Wang-Landau to settle, end to end | {fmt(s['wang_landau_seconds'])} |",
             f"| chains censored (still moving at the end of warmup) | racing {s['wang_landau_censored_chains']['racing']}, "
             f"exact {s['wang_landau_censored_chains']['exact']} |",
             f"| largest TV / its Monte Carlo s.e. | {s['max_total_variation_z']:.2f} |",
             f"| racing model draws differing from exact | {s['decision_errors']['errors']} / "
             f"{s['decision_errors']['decisions']} (delta = {args.delta}) |",
             f"| replayed warmups: largest difference from the run's Wang-Landau adjustment at the settle sweep | "
             f"{s['replay_check_nats']:.2g} nats |", ""]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
