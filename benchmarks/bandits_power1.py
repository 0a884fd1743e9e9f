"""Learn Power-1 (Maes et al., Alg. 2) for T = 100 on the two-armed Bernoulli protocol,
timed end to end, then test it as in Table 1 / Table 2.

Paper protocol (Sec. 6.1): N = 100 training problems, Delta averaged over 100 runs per
problem, n_p = max(8d, 40) = 128, b = 32, 100 iterations; test on 10,000 problems.
The paper's C++ took one hour on 10 cores for this (Sec. 6.3).

    nice -n 10 .venv/bin/python benchmarks/bandits_power1.py [--runs 100 --iterations 100]

Writes benchmarks/results/bandits_power1.json.
"""

import argparse
import json
import os
import time

import jax
import numpy as np

from subsample_mcmc.bandits import index as ix
from subsample_mcmc.bandits import meta, simulate
from subsample_mcmc.bandits.environments import bernoulli, truncated_gaussian
from subsample_mcmc.bandits.paper_values import MAES_TABLE1_LEARNED, MAES_TABLE2_WINS


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--degree", type=int, default=1)
    ap.add_argument("--horizon", type=int, default=100)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--test-problems", type=int, default=10000)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = args.out or os.path.join(os.path.dirname(__file__), "results",
                                   f"bandits_power{args.degree}.json")
    env = bernoulli(2)
    t0 = time.perf_counter()
    res = meta.learn_policy(meta.power_policy(args.degree), env, args.horizon,
                            jax.random.PRNGKey(2024), num_problems=100, num_runs=args.runs,
                            iterations=args.iterations, verbose=True)
    learn_seconds = time.perf_counter() - t0
    print(f"learned Power-{args.degree} in {learn_seconds:.1f} s "
          f"({res.evaluations} candidate evaluations); training Delta {res.best_value:.3f}")
    policy = meta.power_policy(args.degree, res.best_theta)
    key = jax.random.PRNGKey(7)
    rows = {}
    for dist, e in (("bernoulli", env), ("gaussian", truncated_gaussian(2))):
        learned = simulate(policy, e, args.horizon, key, args.test_problems)
        tuned = simulate(ix.ucb1_tuned(), e, args.horizon, key, args.test_problems)
        rows[dist] = dict(power=learned.mean, power_se=learned.stderr, ucb1_tuned=tuned.mean,
                          ucb1_tuned_se=tuned.stderr)
        print(f"{dist:9s}: Power-{args.degree} {learned.mean:.3f} +- {learned.stderr:.3f}  "
              f"UCB1-Tuned {tuned.mean:.3f} +- {tuned.stderr:.3f}")
    wins = meta.win_percentage(policy, ix.ucb1_tuned(), env, args.horizon, key,
                               num_problems=args.test_problems, num_runs=100)
    name = f"power{args.degree}"
    paper = MAES_TABLE1_LEARNED[name].get(args.horizon)
    print(f"wins vs UCB1-Tuned: {wins:.1f}%  (paper: {MAES_TABLE2_WINS[name].get(args.horizon)}%);"
          f" paper regret (bernoulli, gaussian): {paper}")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(dict(degree=args.degree, horizon=args.horizon, runs=args.runs,
                       iterations=args.iterations, learn_seconds=learn_seconds,
                       training_delta=res.best_value, theta=res.best_theta.tolist(),
                       history=res.history.tolist(), test=rows, wins_vs_ucb1_tuned=wins,
                       paper_regret=paper, paper_wins=MAES_TABLE2_WINS[name].get(args.horizon)),
                  f, indent=1)


if __name__ == "__main__":
    main()
