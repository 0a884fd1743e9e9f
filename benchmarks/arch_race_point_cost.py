"""What one raced point costs in the DJIA ARCH model race, part by part (racing ``ModelSelection``).

    python benchmarks/arch_race_point_cost.py [--data djia] [--points 50,800,7580] [--loops 100]

``benchmarks/arch_sweep_floor.py`` finds that the model race costs what the exact draw over all six models
costs while reading about a quarter of their terms, so a raced term costs several exact ones.  This script
splits a raced point's cost.  After a short racing run (Laplace pseudopriors: what a sweep computes per point
does not depend on them) it takes the last state's parameters and, for ``m`` points drawn as the race draws
them (the keyed permutation of ``racing.permutation`` over the raced indices), times inside one compiled
``fori_loop`` of ``--loops`` trips (each trip a new key; no per-call dispatch):

* ``index stream``: the ``m`` data indices alone;
* ``likelihoods``: every model's per-datum log-likelihood at those points (what ``ModelSelection`` races);
* ``control variates``: every model's feature proxy at those points (``ArmControlVariates.values``), as
  the race reads them: one row per point of the models' ``FeatureProxyTable`` (the ratio's subject);
* ``control variates, each proxy's own arrays``: the same values from each ``LinearFeatureProxy``'s
  per-datum arrays (its ``values``; the baseline, and what the MH races read);
* ``exactly-read points``: every model's log-likelihood at the control variates' fixed exactly-read points;
* ``full data``: every model's log-likelihood at all N points, contiguous (the exact draw's work).
* ``proxy sums per race``: the six proxies' population sums (Eq. 11's mean, once per race), over the entries
  of each ``A`` that move (as shipped: ARCH's ``nu`` row moves in one entry) and over every entry;
* ``race bookkeeping``: a whole race over six arms of equal means whose rewards are a cheap function of
  the index (it reads every raced point), with ``ModelSelection``'s race options and without the
  heavy-tail guard: what the race itself costs per point beyond its likelihoods and control variates.

Reported: microseconds per trip and nanoseconds per point and model (each part with the index stream it
needs).  Writes ``benchmarks/results/arch_race_point_cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer import MCMC

from arch_sweep_cost import write_results
from subsample_mcmc import ModelSelection
from subsample_mcmc.models.arch import DEFAULT_ORDERS, arch_control_variates, arch_models, load_returns, prepare
from subsample_mcmc.racing.control_variates import ArmControlVariates
from subsample_mcmc.racing import sample_discrete
from subsample_mcmc.racing.permutation import index_stream


def per_trip_micros(fns, state, y, loops: int, repeats: int = 7) -> list:
    """Per-trip microseconds of each ``fn(state, y, key)`` inside a compiled loop of ``loops`` trips: the
    programs run in turn ``repeats`` times (so a slow spell of the machine hits them alike); a list of
    ``[repeats]`` arrays, one per function."""
    def looped(fn):
        def run(state, y):
            def body(i, acc):
                key = jax.random.fold_in(jax.random.PRNGKey(1), i)
                return acc + jnp.sum(fn(state, y, key)).astype(jnp.float32)
            return jax.lax.fori_loop(0, loops, body, jnp.zeros((), jnp.float32))
        return jax.jit(run)

    runs = [looped(fn) for fn in fns]
    for run in runs:
        jax.block_until_ready(run(state, y))
    times = np.zeros((len(runs), repeats))
    for r in range(repeats):
        for i, run in enumerate(runs):
            t0 = time.perf_counter()
            jax.block_until_ready(run(state, y))
            times[i, r] = (time.perf_counter() - t0) / loops * 1e6
    return list(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="djia")
    ap.add_argument("--points", default="50,800,7580", help="points per trip (comma-separated)")
    ap.add_argument("--loops", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--out", default="arch_race_point_cost")
    args = ap.parse_args()
    points = [int(v) for v in args.points.split(",") if v.strip()]
    orders = DEFAULT_ORDERS
    y = np.asarray(prepare(load_returns(args.data).returns, orders).y)
    kernel = ModelSelection(arch_models(orders), pseudoprior="laplace",
                            control_variate=arch_control_variates(y, orders), check_decisions=0)
    mcmc = MCMC(kernel, num_warmup=args.warmup, num_samples=10, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y)
    state, data, n = mcmc.last_state, jnp.asarray(y), y.shape[0]

    def parts(state, data, key):
        lls = kernel._log_lik_fns((data,), {})
        # + 0 * u(key): the parameters depend on the trip, so XLA cannot hoist a part out of the loop
        zero = 0.0 * jax.random.uniform(key)
        thetas = [ravel_pytree(s.z)[0] + zero for s in state.inner_states]
        matrices = tuple(kernel.control_variates[name].matrix(kern._subsampler.constrain(unravel(t)))
                         for name, kern, unravel, t in zip(kernel.names, kernel.kernels, kernel._unravels, thetas))
        cv = ArmControlVariates(state.feature_proxies, matrices, state.raced_indices, state.exact_indices,
                                state.feature_table)
        return lls, thetas, cv

    def raced(state, key, m):
        return state.raced_indices[index_stream(key, state.raced_indices.shape[0])(jnp.arange(m))]

    rows, result = [], {"command": f"python {shlex.join(sys.argv)}", "data": args.data, "n": n, "orders": list(orders),
                        "num_exact": int(state.exact_indices.shape[0]), "num_raced": int(state.raced_indices.shape[0]),
                        "parts": {}, "table_over_own_arrays": {}}
    ratios = []
    models = len(orders)
    for m in points:
        fns = {
            "index stream": (lambda s, d, k, m=m: raced(s, k, m), 1),
            "likelihoods": (lambda s, d, k, m=m: jnp.stack([f(t, raced(s, k, m)) for f, t in
                                                            zip(*parts(s, d, k)[:2])]), models),
            "control variates": (lambda s, d, k, m=m: parts(s, d, k)[2].values(raced(s, k, m)), models),
            "control variates, each proxy's own arrays": (
                lambda s, d, k, m=m: parts(s, d, k)[2]._replace(table=None).values(raced(s, k, m)), models),
        }
        times = per_trip_micros([fn for fn, _ in fns.values()], state, data, args.loops)
        for (name, (fn, per)), t in zip(fns.items(), times):
            us = float(np.median(t))
            result["parts"][f"{name}, m={m}"] = {"us_per_trip": us, "ns_per_point_model": us * 1e3 / (m * per)}
            rows.append(f"| {name} | {m:,} | {us:.1f} | {us * 1e3 / (m * per):.1f} |")
        ratio = times[2] / times[3]  # the table's control variates over each proxy's own arrays, run by run
        result["table_over_own_arrays"][str(m)] = {"median": float(np.median(ratio)), "min": float(ratio.min()),
                                                   "max": float(ratio.max())}
        ratios.append(f"| {m:,} | {np.median(ratio):.2f} | {ratio.min():.2f} - {ratio.max():.2f} |")
    m_exact = int(state.exact_indices.shape[0])
    whole = {
        "exactly-read points": (lambda s, d, k: jnp.stack([f(t, s.exact_indices) for f, t in
                                                           zip(*parts(s, d, k)[:2])]), m_exact),
        "full data, contiguous": (lambda s, d, k: jnp.stack([f(t, jnp.arange(n)) for f, t in
                                                             zip(*parts(s, d, k)[:2])]), n),
    }
    for (name, (fn, m)), t in zip(whole.items(), per_trip_micros([fn for fn, _ in whole.values()], state, data,
                                                                  args.loops)):
        us = float(np.median(t))
        result["parts"][name] = {"us_per_trip": us, "ns_per_point_model": us * 1e3 / (m * models)}
        rows.append(f"| {name} | {m:,} | {us:.1f} | {us * 1e3 / (m * models):.1f} |")
    # per race, not per point: the six proxies' sums (Eq. 11's mean) over the entries of A that move (as shipped)
    # and over all of them (the moments before; rebuilt here from each proxy's per-datum arrays)
    every_entry = tuple(p.restricted(np.asarray(state.raced_indices)) for p in state.feature_proxies)
    sums = {"proxy sums per race, the entries of A that move": lambda s, d, k: parts(s, d, k)[2].mean(),
            "proxy sums per race, every entry of A": lambda s, d, k: parts(s, d, k)[2]._replace(
                proxies=every_entry).mean()}
    sum_times = per_trip_micros(list(sums.values()), state, data, args.loops)
    for name, t in zip(sums, sum_times):
        result["parts"][name] = {"us_per_trip": float(np.median(t))}
        rows.append(f"| {name} | | {np.median(t):.1f} | |")
    result["active_over_every_entry"] = float(np.median(sum_times[0] / sum_times[1]))

    # the race's own bookkeeping per point: a race over six arms of equal means read to the end, its rewards
    # a cheap function of the index alone, with the kernel's race options and without the heavy-tail guard
    n_raced = int(state.raced_indices.shape[0])

    def equal_arms(idx):
        return jnp.stack([(idx.astype(jnp.float32) * (0.618034 + 0.1 * j)) % 1.0 for j in range(models)])

    def race(options):
        def fn(s, d, k):
            return sample_discrete(k, jnp.zeros(models), equal_arms, population_size=n_raced,
                                   **options).race.num_points_computed.astype(jnp.float32)
        return fn

    races = {"race bookkeeping, as shipped (pairwise variances, heavy-tail guard)": race(kernel.race_options),
             "race bookkeeping, without the heavy-tail guard": race(dict(kernel.race_options, heavy_tail_guard=False))}
    for (name, fn), t in zip(races.items(), per_trip_micros(list(races.values()), state, data, args.loops)):
        read = float(np.mean([fn(state, data, jax.random.PRNGKey(k)) for k in range(5)]))
        us = float(np.median(t))
        result["parts"][name] = {"us_per_trip": us, "points_read": read, "ns_per_point_model": us * 1e3 / (read * models)}
        rows.append(f"| {name} | {read:,.0f} | {us:.1f} | {us * 1e3 / (read * models):.1f} |")
    lines = [f"# One raced point of the model race, part by part ({args.data}, N = {n:,}, {models} models)", "",
             f"`{result['command']}` (median of 7 runs of a compiled loop of {args.loops} trips; "
             f"{result['num_exact']:,} exactly-read and {result['num_raced']:,} raced points). Each part includes the "
             "index stream it needs; every trip perturbs the parameters by 0 times a random number, so no likelihood is "
             "hoisted out of the loop. The last two rows' indices are fixed, so XLA may gather their rows once, "
             "outside the loop: they price the likelihood without a per-trip gather. The race bookkeeping rows run whole "
             "races over six arms of equal means (rewards a cheap function of the index), which read every raced point: "
             "the index stream and the race's statistics, stopping tests and loop, without the likelihoods or control "
             "variates.", "",
             "| part | points per trip | us per trip | ns per point and model |", "|---|---|---|---|", *rows, "",
             "The control variates as the race reads them (one `FeatureProxyTable` row per point) over the same "
             "values from each proxy's own arrays, the two timed in turn, ratio run by run (median and range "
             "over the 7 runs):", "", "| points per trip | time ratio | range |", "|---|---|---|", *ratios, "",
             "The six proxies' sums per race over the entries of A that move, over the same sums over every entry "
             f"(run by run, median): {result['active_over_every_entry']:.2f}."]
    write_results(args.out, result, lines)


if __name__ == "__main__":
    main()
