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

``--race-configs G:M,...`` adds one racing sampler per pair, timed in the same rounds: chunks of the race
loop growing by ``G`` per phase (``racing.race._phases``; the shipped race uses 16) and ``first_batch = M``
(shipped: 50).  The growth changes only how the doubling schedule's points are read (how many ``while_loop``
trips and traced phases), not the race's decisions; ``M`` changes the schedule itself.

``--exact-fractions F,...`` adds one racing sampler per fraction, its control variates built with
``arch_control_variates(exact_fraction=F)`` (shipped: 0.2), timed in the same rounds: every race sums that
share of the points exactly (gathered at fixed indices) and races over the rest.

``--race-from REV`` adds a third sampler, racing with ``subsample_mcmc/racing/race.py`` as it was at git
revision ``REV`` (the rest of the package as checked out), timed in the same rounds: a paired measure of a
change to the race loop on this machine's drifting clock.

``--chains C`` moves C chains at once, vectorized as ``chain_method="vectorized"`` runs them (one program,
the step ``vmap``-ped; a race's loop then runs until its slowest chain stops): a probe of whether a sweep's
fixed per-operation overhead, which one chain pays alone, is shared.

``--tile K`` repeats the lag matrix's rows ``K`` times: not a real series (each model's total and every
gap between models grow ``K``-fold, so races stop on fewer points relative to N), but a probe of whether a
raced evaluation's cost over an exact one's (the table's last column) is a fixed per-sweep overhead that a
larger N amortises or a per-term cost that stays.  ``--pseudoprior laplace`` skips the NUTS pilots of the
default ``auto`` pseudopriors (full-data runs, slow at ``K N``); pseudopriors change how the chain mixes,
not what one sweep computes.

``--max-race-fractions none,K,...`` adds one racing sampler per reading budget, ``ModelSelection(
max_race_fraction=1/K)`` (``none``: no budget; shipped: 1/32), timed in the same rounds: a race still
undecided at its budget hands over to the exact draw or test (a full pass).

``--pseudoprior-cache PATH`` keeps the fitted pseudopriors in a pickle at ``PATH`` (fitted and written when
absent, read when present: the fit, 5-9 minutes here, is the same for every run of one ``--data``,
``--warmup``, ``--tile`` and ``--pseudoprior``; the key of the file name is the caller's to keep).

Writes ``benchmarks/results/arch_sweep_cost.{json,md}`` (``--out`` names another stem).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib.util
import json
import os
import pickle
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Optional

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
def race_growth(growth: Optional[int]):
    """Races traced inside the block read their points in chunks growing by ``growth`` per phase."""
    import subsample_mcmc.racing.race as race

    kept = race._phases
    if growth is not None:
        race._phases = lambda n, m, block, growth_=16: kept(n, m, block, growth)
    try:
        yield
    finally:
        race._phases = kept


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


def compiled_sweeps(models, y, orders, pseudopriors, method: str, args, module=None, config=None,
                    exact_fraction=None, state_variants=None, kernel_options=None):
    """``(loop, state, evaluations per sweep / N)``: ``ModelSelection(models, method=method)`` run
    ``args.warmup + args.samples`` sweeps in NumPyro's ``MCMC`` (checks off), then ``loop(state, y)``,
    ``args.sweeps`` sweeps from its last state, compiled ahead of time (the executable outlives the
    clearing of JAX's caches here).  ``module``: a ``race.py`` whose ``run_race`` the races use;
    ``config``: ``(growth, first_batch)`` of the races (None: as shipped); ``exact_fraction``: the control
    variates' share of points summed exactly in every race (None: ``arch_control_variates``'s default).
    ``state_variants``: ``{name: state -> state}``; each variant of the last state gets a loop of its own
    (compiled for its pytree), returned in ``state_variants`` as ``{name: (loop, state)}`` (replaced in
    place).  ``kernel_options``: further ``ModelSelection`` keyword arguments."""
    fraction = {} if exact_fraction is None else {"exact_fraction": exact_fraction}
    cv = arch_control_variates(y, orders, **fraction) if method != "exact" else None
    growth, first = config if config is not None else (None, None)
    options = {} if first is None else {"first_batch": first}
    options.update(kernel_options or {})
    kernel = ModelSelection(models, method=method, pseudoprior=pseudopriors, control_variate=cv, check_decisions=0,
                            **options)
    chains = getattr(args, "chains", 1)
    mcmc = MCMC(kernel, num_warmup=args.warmup, num_samples=args.samples, progress_bar=False, num_chains=chains,
                chain_method="vectorized" if chains > 1 else "sequential")
    with race_loop(module), race_growth(growth):
        mcmc.run(jax.random.PRNGKey(args.seed), y, extra_fields=("num_likelihood_evals",))
        evals = np.asarray(mcmc.get_extra_fields()["num_likelihood_evals"], np.float64)
        last_state = mcmc.last_state
        run = jax.jit(lambda s, data: jax.lax.fori_loop(0, args.sweeps, lambda _, t: kernel.sample(t, (data,), {}), s))
        loop = run.lower(last_state, y).compile()
        for name, variant in list((state_variants or {}).items()):
            st = variant(last_state)
            state_variants[name] = (run.lower(st, y).compile(), st)
    # every XLA CPU executable holds memory mappings: three samplers' start-up programs in one process
    # exceeded vm.max_map_count (65,530; LLVM "Cannot allocate memory"); only the timed loops are kept
    del mcmc
    jax.clear_caches()
    gc.collect()
    return loop, last_state, float(evals.mean() / y.shape[0])


def time_pair(models, y, orders, pseudopriors, args, old_race=None) -> dict:
    loops, out = {}, {}
    samplers = [("racing", "normal", None, None, None, None), ("exact", "exact", None, None, None, None)]
    if old_race is not None:
        samplers.append((f"racing@{args.race_from}", "normal", old_race, None, None, None))
    for growth, first in args.race_configs:
        samplers.append((f"racing growth {growth}, first_batch {first}", "normal", None, (growth, first), None, None))
    for fraction in getattr(args, "exact_fractions", []):
        samplers.append((f"racing exact_fraction {fraction:g}", "normal", None, None, fraction, None))
    for budget in getattr(args, "max_race_fractions", []):
        samplers.append((f"racing max_race_fraction {'none' if budget is None else f'1/{round(1 / budget)}'}",
                         "normal", None, None, None, {"max_race_fraction": budget}))
    for name, method, module, config, fraction, options in samplers:
        t0 = time.perf_counter()
        loop, last_state, evals = compiled_sweeps(models, y, orders, pseudopriors, method, args, module, config,
                                                  fraction, kernel_options=options)
        print(f"{name}: {args.warmup + args.samples} sweeps and compiling in {time.perf_counter() - t0:.0f} s",
              flush=True)
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
    for name in loops:  # paired per round against the shipped racing sampler
        if name.startswith(("racing growth", "racing exact_fraction", "racing max_race_fraction")):
            ratios = np.asarray(times[name]) / np.asarray(times["racing"])
            out[name]["over_racing_paired"] = {"mean": float(np.mean(ratios)),
                                               "stderr": float(np.std(ratios, ddof=1) / np.sqrt(len(ratios)))}
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
    ap.add_argument("--tile", type=int, default=1,
                    help="repeat the lag matrix's rows this many times: a probe of the per-term cost at tile x N "
                         "(not a real series; the models' totals and gaps grow tile-fold)")
    ap.add_argument("--chains", type=int, default=1,
                    help="chains moved together, vectorized (ms per sweep then counts all of them)")
    ap.add_argument("--pseudoprior", default="auto", choices=("auto", "laplace"),
                    help="the shared pseudopriors' kind (laplace skips the NUTS pilots, e.g. with --tile)")
    return ap


def data_and_pseudopriors(data: str, orders, warmup: int, tile: int = 1, kind: str = "auto", cache=None):
    """The lag matrix of ``data`` (its rows repeated ``tile`` times) and the pseudopriors both samplers
    share (fitted once, ``ModelSelection``'s ``pseudoprior=kind``)."""
    if tile < 1:
        raise ValueError(f"--tile must be >= 1, got {tile}")
    y = np.tile(np.asarray(prepare(load_returns(data).returns, orders).y), (tile, 1))
    if cache and os.path.exists(cache):
        with open(cache, "rb") as f:
            return y, pickle.load(f)
    t0 = time.perf_counter()
    fitter = ModelSelection(arch_models(orders), pseudoprior=kind)
    pseudopriors = fitter.pseudopriors(fitter.init(jax.random.PRNGKey(10_000), warmup, None, (y,), None))
    print(f"N = {y.shape[0]:,}: pseudopriors in {time.perf_counter() - t0:.0f} s", flush=True)
    if cache:
        with open(cache, "wb") as f:
            pickle.dump(jax.device_get(pseudopriors), f)
    del fitter
    jax.clear_caches()
    gc.collect()
    return y, pseudopriors


def race_configs(text: str) -> list[tuple[int, int]]:
    """``"4:50,16:200"`` -> ``[(4, 50), (16, 200)]`` (growth per phase >= 2, first batch >= 1)."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        try:
            growth, first = (int(v) for v in item.split(":"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"--race-configs: {item!r} is not G:M (two integers)") from None
        if growth < 2 or first < 1:
            raise argparse.ArgumentTypeError(f"--race-configs: {item!r} needs growth G >= 2 and first batch M >= 1")
        out.append((growth, first))
    return out


def variant_table(result: dict, prefix: str, title: str, with_exact: bool = False) -> list[str]:
    """Markdown rows of the racing samplers whose names start with ``prefix``, paired against shipped racing."""
    extra = " over exact, ms per sweep |" if with_exact else ""
    lines = ["", title, "", "| likelihood form | configuration | ms/sweep | evals/sweep / N | over shipped racing, "
             "paired mean +- s.e. |" + extra, "|---|---|---|---|---|" + ("---|" if with_exact else "")]
    for label, v in result["variants"].items():
        for name, row in v.items():
            if name.startswith(prefix):
                pr = row["over_racing_paired"]
                tail = f" {row['ms_per_sweep'] / v['exact']['ms_per_sweep']:.2f} |" if with_exact else ""
                lines.append(f"| {label} | {name[len('racing '):]} | {row['ms_per_sweep']:.2f} | "
                             f"{row['evaluations_per_sweep_over_n']:.2f} | {pr['mean']:.3f} +- {pr['stderr']:.3f} |"
                             + tail)
    return lines


def write_results(stem: str, result: dict, lines: list[str]) -> None:
    """``benchmarks/results/<stem>.json`` (``result``) and ``.md`` (``lines``); the table printed."""
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"{stem}.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(RESULTS, f"{stem}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def exact_fractions(text: str) -> list[float]:
    """``"0.1,0.3"`` -> ``[0.1, 0.3]`` (each in [0, 1))."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        try:
            value = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--exact-fractions: {item!r} is not a number") from None
        if not 0.0 <= value < 1.0:
            raise argparse.ArgumentTypeError(f"--exact-fractions: {item!r} is not in [0, 1)")
        out.append(value)
    return out


def max_race_fractions(text: str) -> list:
    """``"none,16,32"`` -> ``[None, 1/16, 1/32]`` (``K``: a budget of ``1/K`` of the raced points)."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        if item == "none":
            out.append(None)
            continue
        try:
            k = int(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--max-race-fractions: {item!r} is not 'none' or an integer K") from None
        if k < 1:
            raise argparse.ArgumentTypeError(f"--max-race-fractions: {item!r}: K must be >= 1 (a budget of 1/K)")
        out.append(1.0 / k)
    return out


def main() -> None:
    ap = sweep_arguments(argparse.ArgumentParser(description=__doc__,
                                                 formatter_class=argparse.RawDescriptionHelpFormatter))
    ap.add_argument("--race-from", default=None, metavar="REV",
                    help="also time racing with the race loop of git revision REV (e.g. HEAD~1)")
    ap.add_argument("--race-configs", default="", type=race_configs, metavar="G:M,...",
                    help="also time racing with chunks growing by G per phase and first_batch M (e.g. 4:50,16:200)")
    ap.add_argument("--exact-fractions", default="", type=exact_fractions, metavar="F,...",
                    help="also time racing with arch_control_variates(exact_fraction=F) (shipped: 0.2)")
    ap.add_argument("--pseudoprior-cache", default=None, metavar="PATH",
                    help="pickle of the fitted pseudopriors: read when present, else fitted and written")
    ap.add_argument("--max-race-fractions", default="", type=max_race_fractions, metavar="none,K,...",
                    help="also time racing with ModelSelection(max_race_fraction=1/K) ('none': no budget; "
                         "shipped: 1/32)")
    ap.add_argument("--out", default="arch_sweep_cost",
                    help="results file stem in benchmarks/results (default arch_sweep_cost: .json and .md)")
    ap.add_argument("--variants", default="models.arch,column slice",
                    help="comma-separated likelihood forms to time (models.arch, column slice)")
    args = ap.parse_args()
    enable_compilation_cache()
    orders = DEFAULT_ORDERS
    y, pseudopriors = data_and_pseudopriors(args.data, orders, args.warmup, args.tile, args.pseudoprior,
                                            args.pseudoprior_cache)
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
    tiled = f", rows repeated {args.tile}x" if args.tile > 1 else ""
    chains = f", {args.chains} vectorized chains (ms per sweep of all of them)" if args.chains > 1 else ""
    lines = [f"# Steady ms per sweep, racing vs exact ModelSelection ({args.data}{tiled}, N = {y.shape[0]:,}, orders "
             f"{list(orders)}, {args.pseudoprior} pseudopriors{chains})", "", f"`python {shlex.join(sys.argv)}` (median of "
             f"{args.repeats} rounds of {args.sweeps} sweeps, samplers timed in turn). Cost per evaluation: ms per "
             "sweep over evaluations per sweep, racing's over exact's.", "",
             "| likelihood form | racing ms/sweep | exact ms/sweep | exact / racing | racing evals/sweep / N | "
             "exact evals/sweep / N | cost per evaluation, racing / exact |", "|---|---|---|---|---|---|---|"]
    for label, v in result["variants"].items():
        r, e = v["racing"], v["exact"]
        per_eval = (r["ms_per_sweep"] / r["evaluations_per_sweep_over_n"]) / (
            e["ms_per_sweep"] / e["evaluations_per_sweep_over_n"])
        v["racing_over_exact_cost_per_evaluation"] = per_eval
        lines.append(f"| {label} | {r['ms_per_sweep']:.2f} | {e['ms_per_sweep']:.2f} | "
                     f"{v['exact_over_racing_time_per_sweep']:.2f} | {r['evaluations_per_sweep_over_n']:.2f} | "
                     f"{e['evaluations_per_sweep_over_n']:.2f} | {per_eval:.2f} |")
    if old_race is not None:
        lines += ["", f"Race loop against revision `{args.race_from}` (same rounds, models as in each row):", "",
                  "| likelihood form | racing ms/sweep | racing@rev ms/sweep | paired ratio, mean +- s.e. |",
                  "|---|---|---|---|"]
        for label, v in result["variants"].items():
            pr = v["racing_over_racing_at_rev_paired"]
            lines.append(f"| {label} | {v['racing']['ms_per_sweep']:.3f} | "
                         f"{v[f'racing@{args.race_from}']['ms_per_sweep']:.3f} | {pr['mean']:.3f} +- {pr['stderr']:.3f} |")
    if args.exact_fractions:
        lines += variant_table(result, "racing exact_fraction", "Control variates' exact fractions (same rounds; "
                               "`arch_control_variates` ships 0.2):", with_exact=True)
    if args.max_race_fractions:
        lines += variant_table(result, "racing max_race_fraction", "Race budgets (same rounds; `ModelSelection` ships "
                               "max_race_fraction=1/32):", with_exact=True)
    if args.race_configs:
        lines += variant_table(result, "racing growth", "Race configurations (same rounds; the shipped race reads "
                               "chunks growing 16x per phase, first_batch 50):")
    write_results(args.out, result, lines)  # the JSON with the per-evaluation ratios


if __name__ == "__main__":
    main()
