"""Cost of a race against the population size N (issue: per-race time flat in N).

An easy problem that stops early: a Gaussian location model with D candidate
locations theta_i, per-datum rewards ``l_{i,n} = -(x_n - theta_i)^2 / 2`` computed
on the fly from the data (as a NumPyro likelihood would be), the candidates far
enough apart in per-datum units that a race stops after a few hundred points
whatever N is.  For N in {1e4, 1e5, 1e6, 1e7} we measure, in one run:

* single-race latency: a jitted ``best_arm`` call, median over repeated calls
  (compile excluded);
* vmapped throughput: races per second for ``vmap`` over many keys;
* the exact computation (all N points) for reference.

The headline figure is the ratio of per-race time at N = 1e7 to N = 1e4.

Usage: python benchmarks/racing_cost_vs_n.py [--arms 10] [--repeats 200] [--batch 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from subsample_mcmc.racing import best_arm


def _loglik(x, theta):
    return -0.5 * (x[None, :] - theta[:, None]) ** 2


def measure(n: int, arms: int, repeats: int, batch: int, seed: int = 0) -> dict:
    key = jax.random.PRNGKey(seed)
    data = jax.random.normal(key, (n,), jnp.float32)
    theta = 0.5 * (jnp.arange(arms) - 3.0)  # spacing 0.5; the best arm is theta = 0

    def race(k, data):
        return best_arm(k, lambda idx: _loglik(data[idx], theta), num_arms=arms,
                        population_size=n, delta=0.05, first_batch=50)

    single = jax.jit(race)
    vmapped = jax.jit(jax.vmap(race, in_axes=(0, None)))
    exact = jax.jit(lambda k, data: best_arm(k, lambda idx: _loglik(data[idx], theta), num_arms=arms,
                                             population_size=n, method="exact"))
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), max(repeats, batch))
    res = jax.block_until_ready(single(keys[0], data))  # compile
    times, evals, points = [], [], []
    for i in range(repeats):
        t0 = time.perf_counter()
        res = jax.block_until_ready(single(keys[i], data))
        times.append(time.perf_counter() - t0)
        evals.append(int(res.num_rewards_read))
        points.append(int(res.num_points_read))
    vm_keys = keys[:batch]
    jax.block_until_ready(vmapped(vm_keys, data))
    t0 = time.perf_counter()
    vm = jax.block_until_ready(vmapped(vm_keys, data))
    vm_seconds = time.perf_counter() - t0
    ex = jax.block_until_ready(exact(keys[0], data))
    t0 = time.perf_counter()
    ex = jax.block_until_ready(exact(keys[1], data))
    exact_seconds = time.perf_counter() - t0
    truth = int(np.argmin(np.abs(np.asarray(theta) - float(np.asarray(data, np.float64).mean()))))
    return dict(
        population_size=n, num_arms=arms,
        race_seconds_median=statistics.median(times),
        race_seconds_p90=float(np.quantile(times, 0.9)),
        mean_points_read=float(np.mean(points)),
        mean_fraction_read=float(np.mean(evals)) / (n * arms),
        vmapped_races_per_second=batch / vm_seconds,
        vmapped_batch=batch,
        vmapped_wrong_arm_rate=float(np.mean(np.asarray(vm.arm) != truth)),
        exact_seconds=exact_seconds,
        exact_arm_correct=int(ex.arm) == truth,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--sizes", default="1e4,1e5,1e6,1e7")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args()
    rows = []
    for n in [int(float(s)) for s in args.sizes.split(",")]:
        row = measure(n, args.arms, args.repeats, args.batch)
        rows.append(row)
        print(f"N={n:>9,d}  race {row['race_seconds_median'] * 1e3:7.3f} ms (p90 "
              f"{row['race_seconds_p90'] * 1e3:7.3f})  points read {row['mean_points_read']:8.1f}  "
              f"vmapped {row['vmapped_races_per_second']:9.0f} races/s  exact {row['exact_seconds'] * 1e3:8.2f} ms",
              flush=True)
    ratio = rows[-1]["race_seconds_median"] / rows[0]["race_seconds_median"]
    vratio = rows[0]["vmapped_races_per_second"] / rows[-1]["vmapped_races_per_second"]
    summary = dict(rows=rows, ratio_largest_vs_smallest=ratio, vmapped_time_ratio=vratio,
                   device=str(jax.devices()[0]), jax_version=jax.__version__)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "racing_cost_vs_n.json"), "w") as f:
        json.dump(summary, f, indent=2)
    lines = [
        "# Race cost against N (benchmarks/racing_cost_vs_n.py)",
        "",
        f"D = {args.arms} arms, delta = 0.05, first batch 50, Racing-Normal pairwise; device {jax.devices()[0]}.",
        "",
        "| N | race median (ms) | race p90 (ms) | points read | fraction read | vmapped races/s | exact pass (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['population_size']:,} | {r['race_seconds_median'] * 1e3:.3f} | "
                     f"{r['race_seconds_p90'] * 1e3:.3f} | {r['mean_points_read']:.1f} | "
                     f"{r['mean_fraction_read']:.2e} | {r['vmapped_races_per_second']:.0f} | "
                     f"{r['exact_seconds'] * 1e3:.2f} |")
    lines += ["", f"Per-race time ratio N = {rows[-1]['population_size']:,} vs {rows[0]['population_size']:,}: "
              f"**{ratio:.2f}** (vmapped: {vratio:.2f})."]
    with open(os.path.join(args.out, "racing_cost_vs_n.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"per-race time ratio N={rows[-1]['population_size']:,} vs N={rows[0]['population_size']:,}: {ratio:.2f}"
          f" (vmapped {vratio:.2f})")


if __name__ == "__main__":
    main()
