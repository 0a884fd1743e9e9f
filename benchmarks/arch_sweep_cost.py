"""Steady milliseconds per sweep of racing vs exact ``ModelSelection`` on the DJIA ARCH job.

    python benchmarks/arch_sweep_cost.py [--data djia] [--sweeps 200] [--repeats 5]

Where the time of one product-space sweep goes once compiled: each sampler runs ``--warmup`` +
``--samples`` sweeps in NumPyro's ``MCMC`` (one chain, checks off), then its post-warmup state is
moved ``--sweeps`` sweeps by one jitted ``fori_loop``, the two samplers timed in turn ``--repeats``
times (median kept: this machine's speed drifts by tens of percent between seconds).  Two
formulations of the ARCH(q) likelihood are measured, each racing against its own exact sampler:

* ``models.arch`` as shipped: the variance ``alpha_0 + rows @ w`` with ``w`` the coefficients padded
  with zeros to every column of the lag matrix (one matrix-vector product on the gathered rows);
* ``column slice``: ``alpha_0 + rows[:, 1:q + 1] @ alpha``, the form before; XLA copies each order's
  lag columns out of the gathered rows before the product.

``--race-from REV`` adds a third sampler, racing with ``subsample_mcmc/racing/race.py`` as it was at git
revision ``REV`` (the rest of the package as checked out), timed in the same rounds: a paired measure of a
change to the race loop on this machine's drifting clock.

Writes ``benchmarks/results/arch_sweep_cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

from subsample_mcmc import ModelSelection
from subsample_mcmc.cli import enable_compilation_cache
from subsample_mcmc.models.arch import (DEFAULT_ORDERS, arch_control_variates, arch_models, arch_parameters, load_returns,
                                        prepare)

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def column_slice_model(y, order: int, subsample_size=None):
    """The ARCH(q) model of ``models.arch`` with the likelihood's earlier form (column slice, then product)."""
    import numpyro
    import numpyro.distributions as dist

    y = jnp.asarray(y)
    alpha0, alpha, nu = arch_parameters(order)
    with numpyro.plate("data", y.shape[0], subsample_size=subsample_size) as idx:
        rows = y[idx]
        s = alpha0 + rows[:, 1:order + 1] @ alpha
        numpyro.sample("obs", dist.StudentT(nu, 0.0, jnp.sqrt(s)), obs=rows[:, 0])


def race_module_at(rev: str):
    """``subsample_mcmc.racing.race`` as it was at git revision ``rev``, imported as a module of its own."""
    import subsample_mcmc.racing as racing

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = subprocess.run(["git", "show", f"{rev}:subsample_mcmc/racing/race.py"], cwd=root, check=True,
                            capture_output=True, text=True).stdout
    path = os.path.join(tempfile.mkdtemp(), "race_at_rev.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("subsample_mcmc.racing._race_at_rev", path,
                                                  submodule_search_locations=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = racing.__name__  # its relative imports resolve to the checked-out package
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def race_loop(module):
    """Races of ``best_arm`` (model races and MH races) run ``module.run_race`` inside the block."""
    import subsample_mcmc.racing.api as api

    kept = api.run_race
    if module is not None:
        api.run_race = module.run_race
    try:
        yield
    finally:
        api.run_race = kept


def compiled_sweeps(models, y, orders, pseudopriors, method: str, args, module=None):
    """``(loop, state, evaluations per sweep / N)``: ``ModelSelection(models, method=method)`` run
    ``args.warmup + args.samples`` sweeps in NumPyro's ``MCMC`` (checks off), then ``loop(state, y)``,
    ``args.sweeps`` sweeps from its last state, compiled ahead of time (the executable outlives the
    clearing of JAX's caches here).  ``module``: a ``race.py`` whose ``run_race`` the races use."""
    cv = arch_control_variates(y, orders) if method != "exact" else None
    kernel = ModelSelection(models, method=method, pseudoprior=pseudopriors, control_variate=cv, check_decisions=0)
    mcmc = MCMC(kernel, num_warmup=args.warmup, num_samples=args.samples, progress_bar=False)
    with race_loop(module):
        mcmc.run(jax.random.PRNGKey(args.seed), y, extra_fields=("num_likelihood_evals",))
        evals = np.asarray(mcmc.get_extra_fields()["num_likelihood_evals"], np.float64)
        last_state = mcmc.last_state
        loop = jax.jit(lambda s, data: jax.lax.fori_loop(
            0, args.sweeps, lambda _, t: kernel.sample(t, (data,), {}), s)).lower(last_state, y).compile()
    # every XLA CPU executable holds memory mappings: three samplers' start-up programs in one process
    # exceeded vm.max_map_count (65,530; LLVM "Cannot allocate memory"); only the timed loops are kept
    del mcmc
    jax.clear_caches()
    gc.collect()
    return loop, last_state, float(evals.mean() / y.shape[0])


def time_pair(models, y, orders, pseudopriors, args, old_race=None) -> dict:
    loops, out = {}, {}
    samplers = [("racing", "normal", None), ("exact", "exact", None)]
    if old_race is not None:
        samplers.append((f"racing@{args.race_from}", "normal", old_race))
    for name, method, module in samplers:
        loop, last_state, evals = compiled_sweeps(models, y, orders, pseudopriors, method, args, module)
        out[name] = {"evaluations_per_sweep_over_n": evals}
        loops[name] = (loop, last_state)
    times = {name: [] for name in loops}
    for _ in range(args.repeats):
        for name, (loop, state) in loops.items():
            t0 = time.perf_counter()
            jax.block_until_ready(loop(state, y))
            times[name].append((time.perf_counter() - t0) / args.sweeps * 1e3)
    for name in loops:
        out[name]["ms_per_sweep"] = float(np.median(times[name]))
        out[name]["ms_per_sweep_min"] = float(np.min(times[name]))
        out[name]["ms_per_sweep_all"] = [round(t, 4) for t in times[name]]
    out["exact_over_racing_time_per_sweep"] = out["exact"]["ms_per_sweep"] / out["racing"]["ms_per_sweep"]
    if old_race is not None:
        out["racing_over_racing_at_rev"] = out["racing"]["ms_per_sweep"] / out[f"racing@{args.race_from}"]["ms_per_sweep"]
        # paired per round: the two racing programs ran back to back in each round
        ratios = np.asarray(times["racing"]) / np.asarray(times[f"racing@{args.race_from}"])
        out["racing_over_racing_at_rev_paired"] = {"median": float(np.median(ratios)),
                                                   "mean": float(np.mean(ratios)),
                                                   "stderr": float(np.std(ratios, ddof=1) / np.sqrt(len(ratios)))}
    jax.clear_caches()  # every XLA CPU executable holds memory mappings (see arch_job._release_compiled_programs)
    return out


def sweep_arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of the sweep benchmarks (this script and ``arch_sweep_profile.py``)."""
    ap.add_argument("--data", default="djia")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--sweeps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def data_and_pseudopriors(data: str, orders, warmup: int):
    """The lag matrix of ``data`` and the Laplace pseudopriors both samplers share (fitted once)."""
    y = np.asarray(prepare(load_returns(data).returns, orders).y)
    t0 = time.perf_counter()
    fitter = ModelSelection(arch_models(orders))
    pseudopriors = fitter.pseudopriors(fitter.init(jax.random.PRNGKey(10_000), warmup, None, (y,), None))
    print(f"N = {y.shape[0]:,}: pseudopriors in {time.perf_counter() - t0:.0f} s", flush=True)
    del fitter
    jax.clear_caches()
    gc.collect()
    return y, pseudopriors


def main() -> None:
    ap = sweep_arguments(argparse.ArgumentParser(description=__doc__,
                                                 formatter_class=argparse.RawDescriptionHelpFormatter))
    ap.add_argument("--race-from", default=None, metavar="REV",
                    help="also time racing with the race loop of git revision REV (e.g. HEAD~1)")
    ap.add_argument("--variants", default="models.arch,column slice",
                    help="comma-separated likelihood forms to time (models.arch, column slice)")
    args = ap.parse_args()
    enable_compilation_cache()
    orders = DEFAULT_ORDERS
    y, pseudopriors = data_and_pseudopriors(args.data, orders, args.warmup)
    variants = {
        "models.arch": arch_models(orders),
        "column slice": {f"arch{q}": functools.partial(column_slice_model, order=q) for q in orders},
    }
    chosen = [v.strip() for v in args.variants.split(",")]
    unknown = sorted(set(chosen) - set(variants))
    if unknown:
        ap.error(f"--variants: unknown {unknown}; choose from {sorted(variants)}")
    variants = {k: v for k, v in variants.items() if k in chosen}
    old_race = race_module_at(args.race_from) if args.race_from else None
    result = {"data": args.data, "n": int(y.shape[0]), "orders": list(orders), "args": vars(args), "variants": {}}
    for label, models in variants.items():
        result["variants"][label] = time_pair(models, y, orders, pseudopriors, args, old_race)
        print(label, json.dumps(result["variants"][label]), flush=True)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "arch_sweep_cost.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = [f"# Steady ms per sweep, racing vs exact ModelSelection ({args.data}, N = {y.shape[0]:,}, orders "
             f"{list(orders)})", "", "`python benchmarks/arch_sweep_cost.py` (median of "
             f"{args.repeats} rounds of {args.sweeps} sweeps, samplers timed in turn)", "",
             "| likelihood form | racing ms/sweep | exact ms/sweep | exact / racing | racing evals/sweep / N | "
             "exact evals/sweep / N |", "|---|---|---|---|---|---|"]
    for label, v in result["variants"].items():
        lines.append(f"| {label} | {v['racing']['ms_per_sweep']:.2f} | {v['exact']['ms_per_sweep']:.2f} | "
                     f"{v['exact_over_racing_time_per_sweep']:.2f} | {v['racing']['evaluations_per_sweep_over_n']:.2f} | "
                     f"{v['exact']['evaluations_per_sweep_over_n']:.2f} |")
    if old_race is not None:
        lines += ["", f"Race loop against revision `{args.race_from}` (same rounds, models as in each row):", "",
                  "| likelihood form | racing ms/sweep | racing@rev ms/sweep | paired ratio, mean +- s.e. |",
                  "|---|---|---|---|"]
        for label, v in result["variants"].items():
            pr = v["racing_over_racing_at_rev_paired"]
            lines.append(f"| {label} | {v['racing']['ms_per_sweep']:.3f} | "
                         f"{v[f'racing@{args.race_from}']['ms_per_sweep']:.3f} | {pr['mean']:.3f} +- {pr['stderr']:.3f} |")
    with open(os.path.join(RESULTS, "arch_sweep_cost.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
