"""ARCH order selection at large N: racing vs exact product-space samplers, one run each.

Simulates an ARCH(10) series with t_6 innovations and N terms (default 1e5), fits the
Laplace pseudopriors once, then runs from the same seed

* ``exact``            -- every Gibbs and MH decision on all N terms, full gradients;
* ``racing (data)``    -- Racing-Normal with App. C.2's data-space control variates;
* ``racing (parameter)`` -- Racing-Normal with parameter-space Taylor proxies at the MAPs;

each with Wang-Landau adaptation started from the Laplace evidences, then a fixed phase.
Reports ESS of q (ArviZ, bulk), R-hat, likelihood evaluations and wall time of the fixed
phase, ESS per evaluation and per second and their ratios to the exact sampler, the
posterior mass on the true order and a short decision-error check.

    python benchmarks/arch_order_selection.py                 # N = 1e5
    python benchmarks/arch_order_selection.py --size 20000 --samples 500   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import jax
import numpy as np

from subsample_mcmc.models.arch import prepare, simulate_arch
from subsample_mcmc.models.arch_job import diagnostics
from subsample_mcmc.models.arch_sampler import ArchOrderSampler, total_variation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--order", type=int, default=10)
    ap.add_argument("--adapt", type=int, default=500)
    ap.add_argument("--samples", type=int, default=1500)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--check", type=int, default=300, help="iterations of the decision-error check run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default="benchmarks/results/arch_order_selection.json")
    args = ap.parse_args()

    orders = (5, 10, 15, 20, 25, 30)
    r, theta = simulate_arch(args.size + max(orders), order=args.order, seed=args.seed)
    data = prepare(r - r.mean(), orders)
    t0 = time.perf_counter()
    base = ArchOrderSampler(data)
    setup = time.perf_counter() - t0
    print(f"N = {args.size:,}, true order {args.order}; Laplace fits and bins in {setup:.1f} s")
    samplers = {"exact": base, "racing (data)": base,
                "racing (parameter)": ArchOrderSampler(data, laplace=base.laplace, control_variate="parameter")}
    results, runs = {}, {}
    for name, smp in samplers.items():
        method = "exact" if name == "exact" else "racing"
        # compile outside the timed region (a 2-iteration warm-up with the same shapes)
        smp.run(args.seed + 1, method=method, num_adapt=2, num_samples=2, num_chains=args.chains,
                progress_bar=False, initial_prior="laplace", chunk=100)
        run = smp.run(args.seed, method=method, num_adapt=args.adapt, num_samples=args.samples,
                      num_chains=args.chains, progress_bar=True, initial_prior="laplace")
        runs[name] = run
        d = diagnostics(run)
        d["posterior_q"] = run.posterior_q().tolist()
        d["mass_on_true_order"] = float(run.posterior_q()[orders.index(args.order)])
        d["step_size"] = run.step_size.tolist()
        results[name] = d
        print(f"{name:20s} ESS(q) {d['ess_q']:7.1f}  R-hat {d['rhat_q']:.3f}  evals/iter {d['evaluations_per_iteration_over_n']:.3f} N  "
              f"sample {d['seconds']['sample']:6.1f} s  ESS/1e6 evals {d['ess_per_million_evaluations']:.3f}  "
              f"ESS/s {d['ess_per_second']:.2f}  p(true order) {d['mass_on_true_order']:.4f}")
    ex = results["exact"]
    for name in ("racing (data)", "racing (parameter)"):
        d = results[name]
        d["ratio_vs_exact"] = {
            "evaluations_per_iteration": ex["evaluations_per_iteration_over_n"] / d["evaluations_per_iteration_over_n"],
            "ess_per_evaluation": d["ess_per_million_evaluations"] / ex["ess_per_million_evaluations"],
            "ess_per_second": d["ess_per_second"] / ex["ess_per_second"],
            "seconds_per_iteration": ex["seconds"]["sample"] / d["seconds"]["sample"],
        }
        tv, se = total_variation(runs[name], runs["exact"])
        d["total_variation_vs_exact"] = {"tv": tv, "monte_carlo_se": se}
        print(f"{name}: vs exact  evaluations per iteration {d['ratio_vs_exact']['evaluations_per_iteration']:.1f}x fewer, "
              f"ESS per evaluation {d['ratio_vs_exact']['ess_per_evaluation']:.1f}x, ESS per second "
              f"{d['ratio_vs_exact']['ess_per_second']:.1f}x, TV {tv:.4f} (s.e. {se:.4f})")
    if args.check:
        for name in ("racing (data)", "racing (parameter)"):
            run = samplers[name].run(args.seed + 2, method="racing", num_adapt=0, num_samples=args.check,
                                     num_chains=args.chains, check_decisions=True, progress_bar=False,
                                     initial_prior="laplace")
            results[name]["decision_error_rates"] = run.error_rates()
            print(f"{name}: decision errors {run.error_rates()}")
    out = {
        "size": args.size, "true_order": args.order, "theta": theta.tolist(), "orders": list(orders),
        "adapt": args.adapt, "samples": args.samples, "chains": args.chains, "seed": args.seed,
        "setup_seconds": setup, "results": results,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "jax": jax.__version__,
                    "load_average": os.getloadavg()},
    }
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as fh:
        json.dump(out, fh, indent=2)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
