"""Where one compiled product-space sweep spends its time, racing vs exact ``ModelSelection`` on the DJIA ARCH job.

    python benchmarks/arch_sweep_profile.py [--data djia] [--sweeps 200]

Each sampler is warmed up as in ``benchmarks/arch_sweep_cost.py`` (``compiled_sweeps``: NumPyro's
``MCMC``, checks off, the ``models.arch`` likelihood), then ``--sweeps`` sweeps of its compiled step run
once untimed, ``--repeats`` times timed (median ms per sweep), and once under ``jax.profiler.trace``
(Perfetto JSON).  Every XLA thunk of the trace is attributed to the JAX name scope of its HLO instruction
(``compiled.as_text()`` metadata; JAX's persistent compilation cache stays off, as a cached program's
metadata may be another program's).  The kernels name their parts: ``pseudoprior_draws``, ``mh_move``,
``model_race``, ``model_exact_draw`` in ``ModelSelection``; ``race_exact_points`` (the control variate's
points summed in every race) and ``race_later_stages`` (the loops after the first stage) in a race.  A
thunk without metadata (buffer copies of loop and branch state, some products) goes to the region of
the control-flow thunk it runs in.  Random-number thunks (threefry and the samplers built on it) are
tallied on the side.

Reported per region: thunks per sweep and the share of traced thunk time.  Tracing adds a fixed cost to
every thunk, so traced shares lean toward regions with many small thunks; the untraced ms per sweep is
reported beside them.  Writes ``benchmarks/results/arch_sweep_profile.{json,md}``.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import tempfile
import time

import jax
import numpy as np

from arch_sweep_cost import RESULTS, compiled_sweeps, data_and_pseudopriors, sweep_arguments
from subsample_mcmc.models.arch import DEFAULT_ORDERS, arch_models

# (region, pattern on the instruction's name scope): the first match wins
REGIONS = [
    ("model race: later stages", r"model_race/.*race_later_stages"),
    ("model race: exactly-read points", r"model_race/.*race_exact_points"),
    ("model race: first stage and set-up", r"model_race/"),
    ("MH step: race, later stages", r"mh_move/.*race_later_stages"),
    ("MH step: race, exactly-read points", r"mh_move/.*race_exact_points"),
    ("MH step: proposal, first stage, set-up (exact: the full-data test)", r"mh_move/"),
    ("model index, exact draw", r"model_exact_draw/"),
    ("pseudoprior draws", r"pseudoprior_draws/"),
]
OTHER = "rest: keys, priors, proxy sums, Wang-Landau, bookkeeping"
RANDOM = re.compile(r"threefry|jit\(_uniform\)|jit\(_normal|jit\(_gumbel\)|jit\(_gamma\)|random_bits|"
                    r"random_split|random_fold_in|jit\(_split\)")
CONTROL = re.compile(r"^(while|cond|call|conditional)")


def scopes_of(hlo_text: str) -> dict:
    """HLO instruction name -> its op_name (the JAX name stack) from the compiled module's metadata."""
    out = {}
    for line in hlo_text.splitlines():
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = .*?metadata=\{[^}]*op_name=\"([^\"]*)\"", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def region_of(scope: str | None) -> str:
    if scope is None:
        return OTHER
    for name, pattern in REGIONS:
        if re.search(pattern, scope + "/"):
            return name
    return OTHER


def profile_sweeps(loop, state, y, sweeps: int) -> dict:
    """Thunks per sweep and traced microseconds per region, one traced run of ``loop``."""
    scopes = scopes_of(loop.as_text())
    trace_dir = tempfile.mkdtemp(prefix="arch_sweep_profile_")
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        jax.block_until_ready(loop(state, y))
    path = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)[0]
    with gzip.open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    by_thread = collections.defaultdict(list)
    for e in events:
        name = e.get("name", "")
        if e.get("ph") == "X" and not name.startswith("$") and "ThunkExecutor" not in name \
                and "Threadpool" not in name:
            by_thread[e.get("tid")].append(e)
    thunks, micros, random_thunks, random_micros = (collections.Counter() for _ in range(4))
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        stack = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) <= e["ts"]:
                stack.pop()
            name = e["name"].replace("end: ", "")
            scope = scopes.get(name)
            if scope is None:  # no metadata: the region of the innermost enclosing thunk that has one
                scope = next((s["_scope"] for s in reversed(stack) if s.get("_scope")), None)
            e["_scope"] = scope
            if stack:
                stack[-1]["_children"] = stack[-1].get("_children", 0) + e.get("dur", 0)
            stack.append(e)
        for e in evs:
            region = region_of(e["_scope"])
            own = e.get("dur", 0) - e.get("_children", 0)
            thunks[region] += 1
            micros[region] += own
            if e["_scope"] and RANDOM.search(e["_scope"]):
                random_thunks[region] += 1
                random_micros[region] += own
    total = sum(micros.values())
    names = [r for r, _ in REGIONS] + [OTHER]
    return {
        "regions": {r: {"thunks_per_sweep": thunks[r] / sweeps, "share_of_traced_time": micros[r] / total,
                        "random_number_thunks_per_sweep": random_thunks[r] / sweeps,
                        "random_number_share_of_traced_time": random_micros[r] / total}
                    for r in names if thunks[r]},
        "thunks_per_sweep": sum(thunks.values()) / sweeps,
        "traced_ms_per_sweep": total / sweeps / 1e3,
        "random_number_thunks_per_sweep": sum(random_thunks.values()) / sweeps,
        "random_number_share_of_traced_time": sum(random_micros.values()) / total,
    }


def main() -> None:
    args = sweep_arguments(argparse.ArgumentParser(description=__doc__.split("\n")[0])).parse_args()
    # no persistent compilation cache: a program loaded from it may carry the name scopes of the program
    # that was cached (its key leaves the metadata out), which would misattribute every thunk
    orders = DEFAULT_ORDERS
    y, pseudopriors = data_and_pseudopriors(args.data, orders, args.warmup, args.tile, args.pseudoprior)
    result = {"data": args.data, "n": int(y.shape[0]), "orders": list(orders), "args": vars(args), "samplers": {}}
    for name, method in (("racing", "normal"), ("exact", "exact")):
        loop, state, evals = compiled_sweeps(arch_models(orders), y, orders, pseudopriors, method, args)
        jax.block_until_ready(loop(state, y))
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(loop(state, y))
            times.append((time.perf_counter() - t0) / args.sweeps * 1e3)
        out = profile_sweeps(loop, state, y, args.sweeps)
        out.update(ms_per_sweep=float(np.median(times)), evaluations_per_sweep_over_n=evals)
        result["samplers"][name] = out
        print(name, json.dumps(out), flush=True)
        del loop
        jax.clear_caches()
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "arch_sweep_profile.json"), "w") as f:
        json.dump(result, f, indent=1)
    r, e = result["samplers"]["racing"], result["samplers"]["exact"]
    lines = [f"# Where a compiled sweep's time goes ({args.data}, N = {y.shape[0]:,}, orders {list(orders)})", "",
             f"`python benchmarks/arch_sweep_profile.py` ({args.sweeps} sweeps traced by `jax.profiler`; untimed "
             f"median of {args.repeats} runs beside). Share = share of the traced thunk time; tracing adds a fixed "
             "cost per thunk, so regions of many small thunks weigh more than untraced.", "",
             "| | racing | exact |", "|---|---|---|",
             f"| ms per sweep, untraced | {r['ms_per_sweep']:.2f} | {e['ms_per_sweep']:.2f} |",
             f"| ms per sweep, traced | {r['traced_ms_per_sweep']:.2f} | {e['traced_ms_per_sweep']:.2f} |",
             f"| XLA thunks per sweep | {r['thunks_per_sweep']:,.0f} | {e['thunks_per_sweep']:,.0f} |",
             f"| likelihood evaluations per sweep / N | {r['evaluations_per_sweep_over_n']:.2f} | "
             f"{e['evaluations_per_sweep_over_n']:.2f} |",
             f"| random-number thunks per sweep (share of traced time) | {r['random_number_thunks_per_sweep']:,.0f} "
             f"({r['random_number_share_of_traced_time']:.0%}) | {e['random_number_thunks_per_sweep']:,.0f} "
             f"({e['random_number_share_of_traced_time']:.0%}) |", "",
             "| region | racing: thunks per sweep | racing: share | exact: thunks per sweep | exact: share |",
             "|---|---|---|---|---|"]
    for region in [n for n, _ in REGIONS] + [OTHER]:
        a, b = r["regions"].get(region), e["regions"].get(region)
        if a is None and b is None:
            continue
        cell = lambda v: ("-", "-") if v is None else (f"{v['thunks_per_sweep']:,.0f}",  # noqa: E731
                                                      f"{v['share_of_traced_time']:.0%}")
        lines.append(f"| {region} | {' | '.join(cell(a))} | {' | '.join(cell(b))} |")
    with open(os.path.join(RESULTS, "arch_sweep_profile.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
