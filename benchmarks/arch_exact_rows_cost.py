"""What gathering the exactly-read points' rows once per chain saves a racing ``ModelSelection`` sweep.

    python benchmarks/arch_exact_rows_cost.py [--data djia] [--starts 3] [--rounds 7] [--sweeps 200]

Every racing sweep on the ARCH job sums each of the K models' log-likelihoods over the control variate's
exactly-read points (20% of N: 7,580 of the DJIA's 37,900 rows), and the MH race of the selected model sums its
proposal's over the same points.  ``models.arch`` declares its data with ``numpyro.subsample`` in a plain
plate, so the kernels pass the rows of their points to the model, and ``ModelSelection`` gathers the rows of
the exactly-read points once per chain (``ModelSelectionState.exact_rows``) instead of on every sweep; a
full-data pass reads the lag matrix as it is.  The form before, ``self-indexed``, reads ``y[idx]`` with the
plate's indices inside the model: only the model can gather its rows then, so every race gathers them again,
and every full-data pass gathers all N rows through the plate's ``arange(N)``.

Both forms compute the same numbers (the chains are the same up to float rounding); the script runs each
sampler (racing, exact) with each form from ``--starts`` post-warmup states (``MCMC`` seeds 0, 1, ..), moves
each state ``--sweeps`` sweeps in one compiled loop, and times the four loops in turn for ``--rounds`` rounds
(this machine's speed drifts by tens of percent between seconds: only ratios within a round are compared).
Ratios are per round, mean +- s.e. over rounds and starts.  Writes
``benchmarks/results/arch_exact_rows_cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import functools
import shlex
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from arch_sweep_cost import compiled_sweeps, data_and_pseudopriors, write_results
from subsample_mcmc.cli import enable_compilation_cache
from subsample_mcmc.models.arch import DEFAULT_ORDERS, arch_models, arch_parameters


def self_indexed_model(y, order: int, subsample_size=None):
    """``models.arch``'s ARCH(q) model reading its rows as ``y[idx]`` with the plate's indices (the form before)."""
    import numpyro
    import numpyro.distributions as dist

    y = jnp.asarray(y)
    alpha0, alpha, nu = arch_parameters(order)
    with numpyro.plate("data", y.shape[0], subsample_size=subsample_size) as idx:
        rows = y[idx]
        s = alpha0 + rows @ jnp.zeros(y.shape[1], alpha.dtype).at[1:order + 1].set(alpha)
        numpyro.sample("obs", dist.StudentT(nu, 0.0, jnp.sqrt(s)), obs=rows[:, 0])


def _mean_se(x) -> dict:
    x = np.asarray(x, np.float64)
    return {"mean": float(x.mean()), "stderr": float(x.std(ddof=1) / np.sqrt(x.size)), "n": int(x.size)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="djia")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--sweeps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--pseudoprior-cache", default=None, metavar="PATH",
                    help="keep the fitted pseudopriors here (as arch_sweep_cost.py's option)")
    ap.add_argument("--out", default="arch_exact_rows_cost")
    args = ap.parse_args()
    enable_compilation_cache()
    orders = DEFAULT_ORDERS
    y, pseudopriors = data_and_pseudopriors(args.data, orders, args.warmup, cache=args.pseudoprior_cache)
    forms = {"models.arch": arch_models(orders),
             "self-indexed": {f"arch{q}": functools.partial(self_indexed_model, order=q) for q in orders}}
    names = [(form, method) for form in forms for method in ("racing", "exact")]
    times = {name: [] for name in names}
    evals = {name: [] for name in names}
    for start in range(args.starts):
        args.seed = start
        loops = {}
        for form, method in names:
            t0 = time.perf_counter()
            loop, state, e = compiled_sweeps(forms[form], y, orders, pseudopriors,
                                             "normal" if method == "racing" else "exact", args)
            loops[(form, method)] = (loop, state)
            evals[(form, method)].append(e)
            print(f"start {start}, {form}, {method}: evaluations/sweep/N {e:.3f}, ready in "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
        for _ in range(args.rounds):
            for name, (loop, state) in loops.items():
                t0 = time.perf_counter()
                jax.block_until_ready(loop(state, y))
                times[name].append((time.perf_counter() - t0) / args.sweeps * 1e3)
        del loops
        jax.clear_caches()
    t = {name: np.asarray(v) for name, v in times.items()}
    result = {"data": args.data, "n": int(y.shape[0]), "orders": list(orders), "args": vars(args),
              "ms_per_sweep": {f"{f} {m}": [round(v, 4) for v in t[(f, m)]] for f, m in names},
              "evaluations_per_sweep_over_n": {f"{f} {m}": evals[(f, m)] for f, m in names},
              "racing_rows_once_over_self_indexed": _mean_se(t[("models.arch", "racing")] / t[("self-indexed", "racing")]),
              "exact_rows_once_over_self_indexed": _mean_se(t[("models.arch", "exact")] / t[("self-indexed", "exact")]),
              "exact_over_racing_models_arch": _mean_se(t[("models.arch", "exact")] / t[("models.arch", "racing")]),
              "exact_over_racing_self_indexed": _mean_se(t[("self-indexed", "exact")] / t[("self-indexed", "racing")])}
    fmt = lambda d: f"{d['mean']:.3f} +- {d['stderr']:.3f}"  # noqa: E731
    lines = [f"# Gathering the exactly-read rows once per chain ({args.data}, N = {y.shape[0]:,}, orders "
             f"{list(orders)})", "", f"`python {shlex.join(sys.argv)}` ({args.starts} post-warmup starts x "
             f"{args.rounds} rounds of {args.sweeps} sweeps, the four loops timed in turn; ratios per round, "
             "mean +- s.e.)", "",
             "| model form | racing ms/sweep (median) | exact ms/sweep (median) | racing evals/sweep / N | "
             "exact / racing, paired |", "|---|---|---|---|---|"]
    for form in forms:
        key = "exact_over_racing_models_arch" if form == "models.arch" else "exact_over_racing_self_indexed"
        lines.append(f"| {form} | {np.median(t[(form, 'racing')]):.3f} | {np.median(t[(form, 'exact')]):.3f} | "
                     f"{np.mean(evals[(form, 'racing')]):.3f} | {fmt(result[key])} |")
    lines += ["", "| paired ratio | mean +- s.e. |", "|---|---|",
              f"| racing sweep, models.arch / self-indexed | {fmt(result['racing_rows_once_over_self_indexed'])} |",
              f"| exact sweep, models.arch / self-indexed | {fmt(result['exact_rows_once_over_self_indexed'])} |"]
    write_results(args.out, result, lines)


if __name__ == "__main__":
    main()
