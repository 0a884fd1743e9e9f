"""How much of an exact ``ModelSelection`` sweep any subsampling could save on this machine (DJIA ARCH job).

    python benchmarks/arch_sweep_floor.py [--data djia] [--fractions 0.25,0.5,0.75,1] [--repeats 7]

Issue 12 asks racing for at least 1.5x the exact sampler's ESS(q) per second and 2x less wall time for
Wang-Landau to settle, at the DJIA's N = 37,900.  This script bounds what *any* racing design can reach
there, whatever its race loop costs.

The exact sampler's compiled sweep is timed on the series' first ``f N`` rows for each fraction ``f``
(same program, same pseudopriors, samplers timed in turn in each round) and a line
``t(n) = a + b n`` is fitted by least squares in each round.  ``b N`` is the part of the exact sweep at
the full N that grows with the data read (``b`` ms per row for the ``E_e / N`` evaluations an exact sweep
makes per row); ``a`` is what it costs whatever the data: random numbers, pseudoprior draws, priors,
proposals, Wang-Landau, bookkeeping.  A racing sweep draws the same pseudoprior values, priors and proposals,
so it pays at least ``a``; it reads ``E_r`` terms where exact reads ``E_e``.  Even with a race loop that cost
nothing, its sweep takes at least

    t_r >= a + b N E_r / E_e,      so      t_e / t_r <= S = (a + b N) / (a + b N E_r / E_e).

ESS(q) per second is ESS(q) per sweep over seconds per sweep, so its ratio is at most ``S`` times the ratio
of ESS(q) per sweep; Wang-Landau's settle time ratio is at most ``S`` times the ratio of sweeps to settle
(exact's over racing's).  Those two sweep ratios are read from the committed headline run
(``benchmarks/results/arch_order_selection_djia.json``: ESS(q) per evaluation over fewer evaluations per
sweep, per seed; settle evaluations over fewer evaluations per sweep), and the ceilings are reported with
the per-round spread of ``S``.  The racing sampler's own sweep at the full N is timed in the same rounds for
reference, and twice more from the same compiled loop: with its model index drawn exactly, and with every
model's MH step exact (the switches warmup makes when a race costs more than N), which splits its time
between the model race and the MH races without a profiler's per-operation inflation; and from the same
state without its ``FeatureProxyTable`` (each proxy's own arrays) and without its kept sums over the exactly-read
points (``exact_sums=None``: each race, the next sweep's MH race included, reads those points itself), each
in a loop compiled for that state.

Fractions are leading rows of the real series (every size's lag matrix stays inside this machine's L3
cache; ``--tile`` in ``arch_sweep_cost.py`` probes beyond it).  Writes
``benchmarks/results/arch_sweep_floor.{json,md}`` (``--out`` names another stem).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from arch_sweep_cost import RESULTS, compiled_sweeps, data_and_pseudopriors, sweep_arguments, write_results
from subsample_mcmc.cli import enable_compilation_cache
from subsample_mcmc.models.arch import DEFAULT_ORDERS, arch_models

HEADLINE = os.path.join(RESULTS, "arch_order_selection_djia.json")


def fractions(text: str) -> list[float]:
    out = sorted({float(t) for t in text.split(",") if t.strip()})
    if len(out) < 2 or out[0] <= 0 or out[-1] != 1.0:
        raise argparse.ArgumentTypeError(f"--fractions: need two or more values in (0, 1], 1 among them; got {text!r}")
    return out


def line_fit(n: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """Least-squares ``t = a + b n``: ``(a, b)``."""
    b, a = np.polyfit(n, t, 1)
    return float(a), float(b)


def headline_sweep_ratios(path: str = HEADLINE) -> dict:
    """Per seed (ESS(q) per sweep) and per chain (sweeps to settle) ratios, exact's cost over racing's, from
    the committed headline run."""
    with open(path) as f:
        head = json.load(f)
    ess = [s["ratio_ess_per_evaluation"] / s["ratio_evaluations_per_sweep"] for s in head["seeds"]]
    settle = []
    for s in head["seeds"]:
        wl_r = s["diagnostics"]["racing"]["wang_landau_settle"]
        wl_e = s["diagnostics"]["exact"]["wang_landau_settle"]
        for sr, se in zip(wl_r["sweeps"], wl_e["sweeps"]):
            if sr is not None and se is not None:
                settle.append(se / sr)
    return {"command": head["command"], "ess_per_sweep": ess, "settle_sweeps": settle}


def mean_se(values) -> dict:
    v = np.asarray(values, np.float64)
    return {"mean": float(v.mean()), "se": float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan"),
            "n": int(v.size)}


def main() -> None:
    ap = sweep_arguments(argparse.ArgumentParser(description=__doc__,
                                                 formatter_class=argparse.RawDescriptionHelpFormatter))
    ap.add_argument("--fractions", type=fractions, default=fractions("0.25,0.5,0.75,1"),
                    help="leading-row fractions of the series the exact sweep is timed on (1 among them)")
    ap.add_argument("--out", default="arch_sweep_floor")
    args = ap.parse_args()
    if args.tile != 1 or args.chains != 1:
        ap.error("--tile and --chains are arch_sweep_cost.py's probes; this script times one chain on real rows")
    enable_compilation_cache()
    orders = DEFAULT_ORDERS
    y, pseudopriors = data_and_pseudopriors(args.data, orders, args.warmup, 1, args.pseudoprior)
    models = arch_models(orders)
    n_full = int(y.shape[0])
    sizes = [int(round(f * n_full)) for f in args.fractions]
    loops, evals = {}, {}
    for m in sizes:
        t0 = time.perf_counter()
        loop, state, e = compiled_sweeps(models, y[:m], orders, pseudopriors, "exact", args)
        loops[("exact", m)] = (loop, state, y[:m])
        evals[("exact", m)] = e
        print(f"exact, n = {m:,}: ready in {time.perf_counter() - t0:.0f} s ({e:.2f} evaluations per sweep / n)",
              flush=True)
    t0 = time.perf_counter()
    # the model race's control variates from each proxy's own per-datum arrays instead of the models' one
    # FeatureProxyTable row per point (the form before the table; a state without it compiles that form)
    # ... and without the model race's sums over the exactly-read points kept for the next sweep's MH race (a
    # state without the field: each race reads those points itself, as before the state kept them)
    variants = {"racing, no table": lambda st: st._replace(feature_table=None),
                "racing, exactly-read sums not kept": lambda st: st._replace(exact_sums=None)}
    loop, state, e = compiled_sweeps(models, y, orders, pseudopriors, "normal", args, state_variants=variants)
    loops[("racing", n_full)] = (loop, state, y)
    evals[("racing", n_full)] = e
    print(f"racing, n = {n_full:,}: ready in {time.perf_counter() - t0:.0f} s ({e:.2f} evaluations per sweep / n)",
          flush=True)

    # where the racing sweep's time goes, untraced: the same compiled loop from states whose model draw, or
    # whose every model's MH step, is switched to the exact one (the switches warmup itself can make)
    loops[("racing, model draw exact", n_full)] = (loop, state._replace(exact_model_draw=jnp.ones_like(
        state.exact_model_draw)), y)
    loops[("racing, MH steps exact", n_full)] = (loop, state._replace(inner_states=tuple(
        st._replace(exact_mode=jnp.ones_like(st.exact_mode)) for st in state.inner_states)), y)
    for name, (variant_loop, variant_state) in variants.items():
        loops[(name, n_full)] = (variant_loop, variant_state, y)
    times = {k: [] for k in loops}
    for _ in range(args.repeats):
        for k, (loop, state, data) in loops.items():
            t0 = time.perf_counter()
            jax.block_until_ready(loop(state, data))
            times[k].append((time.perf_counter() - t0) / args.sweeps * 1e3)

    rate = evals[("racing", n_full)] / evals[("exact", n_full)]  # E_r / E_e at the full N
    n = np.asarray(sizes, np.float64)
    rounds = []
    for r in range(args.repeats):
        a, b = line_fit(n, np.asarray([times[("exact", m)][r] for m in sizes]))
        t_full = a + b * n_full
        rounds.append({"a_ms": a, "b_n_ms": b * n_full, "data_share": b * n_full / t_full,
                       "ceiling_per_sweep": t_full / (a + b * n_full * rate),
                       "racing_over_exact_ms": times[("racing", n_full)][r] / times[("exact", n_full)][r],
                       "table_over_own_arrays_ms": (times[("racing", n_full)][r]
                                                    / times[("racing, no table", n_full)][r]),
                       "kept_over_not_kept_ms": (times[("racing", n_full)][r]
                                                 / times[("racing, exactly-read sums not kept", n_full)][r])})
    med = {f"{k[0]} n={k[1]}": float(np.median(v)) for k, v in times.items()}
    a, b = line_fit(n, np.asarray([np.median(times[("exact", m)]) for m in sizes]))
    residual = [float(np.median(times[("exact", m)]) - (a + b * m)) for m in sizes]
    # the fixed part from the two smallest sizes alone: the largest a the data allow (a sweep's time per row
    # grows once its lag matrix outgrows a core's L2 cache, which bends the line up and pulls the full fit's
    # a down), so the most cautious ceiling
    small = sorted(sizes)[:2]
    a2, b2 = line_fit(np.asarray(small, np.float64), np.asarray([np.median(times[("exact", m)]) for m in small]))
    t_full = float(np.median(times[("exact", n_full)]))
    a2 = min(max(a2, 0.0), t_full)
    cautious = t_full / (a2 + (t_full - a2) * rate)
    ceiling = np.asarray([r["ceiling_per_sweep"] for r in rounds])
    head = headline_sweep_ratios()
    ess_ceiling = np.median(ceiling) * np.asarray(head["ess_per_sweep"])
    settle_ceiling = np.median(ceiling) * np.asarray(head["settle_sweeps"])
    result = {
        "command": f"python {shlex.join(sys.argv)}", "data": args.data, "n": n_full, "orders": list(orders),
        "args": {k: v for k, v in vars(args).items()}, "sizes": sizes,
        "ms_per_sweep_median": med, "ms_per_sweep_all": {f"{k[0]} n={k[1]}": v for k, v in times.items()},
        "evaluations_per_sweep_over_n": {f"{k[0]} n={k[1]}": v for k, v in evals.items()},
        "racing_over_exact_evaluations": rate,
        "fit_of_medians": {"a_ms": a, "b_n_ms": b * n_full, "residual_ms": residual},
        "per_round": rounds,
        "data_share": mean_se([r["data_share"] for r in rounds]),
        "ceiling_per_sweep": mean_se(ceiling),
        "headline": head,
        "cautious": {"a_ms": a2, "sizes": small, "ceiling_per_sweep": cautious,
                     "ceiling_ess_per_second": mean_se(cautious * np.asarray(head["ess_per_sweep"])),
                     "ceiling_settle_seconds": mean_se(cautious * np.asarray(head["settle_sweeps"]))},
        "ceiling_ess_per_second": mean_se(ess_ceiling),
        "ceiling_settle_seconds": mean_se(settle_ceiling),
    }
    ds, cs = result["data_share"], result["ceiling_per_sweep"]
    ce, cw = result["ceiling_ess_per_second"], result["ceiling_settle_seconds"]
    lines = [
        f"# The most any racing sweep could save on this machine ({args.data}, N = {n_full:,}, orders {list(orders)}, "
        f"{args.pseudoprior} pseudopriors)", "",
        f"`{result['command']}` (exact sweep timed on the first {', '.join(f'{m:,}' for m in sizes)} rows, "
        f"{args.repeats} rounds of {args.sweeps} sweeps, sizes timed in turn; line t = a + b n fitted per round; "
        "mean ± s.e. over rounds). Ceilings use the committed headline run's sweep ratios "
        f"(`{head['command']}`).", "",
        "| figure | value |", "|---|---|",
        *[f"| exact ms per sweep, n = {m:,} (median) | {med[f'exact n={m}']:.3f} |" for m in sizes],
        f"| racing ms per sweep, n = {n_full:,} (median) | {med[f'racing n={n_full}']:.3f} |",
        f"| ... with the model index drawn exactly (median) | {med[f'racing, model draw exact n={n_full}']:.3f} |",
        f"| ... with every MH step exact (median) | {med[f'racing, MH steps exact n={n_full}']:.3f} |",
        f"| ... with the model race's control variates from each proxy's own arrays, no table (median) | "
        f"{med[f'racing, no table n={n_full}']:.3f} |",
        f"| ... with every race reading its exactly-read points itself, no sums kept for the next MH race (median) | "
        f"{med[f'racing, exactly-read sums not kept n={n_full}']:.3f} |",
        f"| fixed part a of the exact sweep (fit of medians) | {a:.3f} ms |",
        f"| data part b N of the exact sweep at N (fit of medians) | {b * n_full:.3f} ms |",
        f"| largest residual of the fit | {max(abs(x) for x in residual):.3f} ms |",
        f"| share of the exact sweep that grows with the data | {ds['mean']:.3f} ± {ds['se']:.3f} |",
        f"| racing evaluations per sweep / exact's (this run) | {rate:.3f} |",
        f"| ceiling S on exact / racing seconds per sweep (race loop free) | {cs['mean']:.3f} ± {cs['se']:.3f} |",
        f"| ESS(q) per sweep, racing / exact (headline, per seed) | {mean_se(head['ess_per_sweep'])['mean']:.3f} ± "
        f"{mean_se(head['ess_per_sweep'])['se']:.3f} |",
        f"| **ceiling on ESS(q) per second, racing / exact** (target >= 1.5) | **{ce['mean']:.3f} ± {ce['se']:.3f}** |",
        f"| sweeps to settle, exact / racing (headline, per chain) | {mean_se(head['settle_sweeps'])['mean']:.3f} ± "
        f"{mean_se(head['settle_sweeps'])['se']:.3f} |",
        f"| **ceiling on less Wang-Landau settle time** (target >= 2) | **{cw['mean']:.3f} ± {cw['se']:.3f}** |",
        f"| cautious fixed part a (line through the two smallest sizes only; exact sweep at N minus its data part) | "
        f"{a2:.3f} ms |",
        f"| cautious ceilings: per sweep / ESS(q) per second / settle time | {cautious:.3f} / "
        f"{result['cautious']['ceiling_ess_per_second']['mean']:.3f} ± "
        f"{result['cautious']['ceiling_ess_per_second']['se']:.3f} / "
        f"{result['cautious']['ceiling_settle_seconds']['mean']:.3f} ± "
        f"{result['cautious']['ceiling_settle_seconds']['se']:.3f} |",
        f"| measured racing / exact ms per sweep at N (paired per round) | "
        f"{mean_se([r['racing_over_exact_ms'] for r in rounds])['mean']:.3f} ± "
        f"{mean_se([r['racing_over_exact_ms'] for r in rounds])['se']:.3f} |",
        f"| measured racing / racing without the table ms per sweep at N (paired per round) | "
        f"{mean_se([r['table_over_own_arrays_ms'] for r in rounds])['mean']:.3f} ± "
        f"{mean_se([r['table_over_own_arrays_ms'] for r in rounds])['se']:.3f} |",
        f"| measured racing / racing without the kept exactly-read sums ms per sweep at N (paired per round) | "
        f"{mean_se([r['kept_over_not_kept_ms'] for r in rounds])['mean']:.3f} ± "
        f"{mean_se([r['kept_over_not_kept_ms'] for r in rounds])['se']:.3f} |",
    ]
    write_results(args.out, result, lines)


if __name__ == "__main__":
    main()
