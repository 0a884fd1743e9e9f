"""Symbolic formula search (Maes et al. Sec. 5) for T = 100 on the Bernoulli protocol.

Enumerates formulas of length <= L (default 5; the paper used 7, 33.5 M formulas),
clusters them by the ranking of d random points, then identifies the best class with
(a) UCB1-Tuned pure exploration (batched) on N = 100 training problems, as in the paper,
and (b) racing (``subsample_mcmc.racing.best_arm``, Normal bound) over N = 2000 training
problems.  Each winner is tested on 10,000 problems against UCB1-Tuned.

    nice -n 10 .venv/bin/python benchmarks/bandits_formula_search.py [--length 5]

Writes benchmarks/results/bandits_formula_search.json.
"""

import argparse
import os
import time

import jax
import numpy as np

from subsample_mcmc.bandits import formulas as F
from subsample_mcmc.bandits import index as ix
from subsample_mcmc.bandits import simulate
from subsample_mcmc.bandits.environments import bernoulli

from bandits_common import write_json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--length", type=int, default=5)
    ap.add_argument("--horizon", type=int, default=100)
    ap.add_argument("--points", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--race-problems", type=int, default=2000)
    ap.add_argument("--test-problems", type=int, default=10000)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "bandits_formula_search.json"))
    args = ap.parse_args()
    env = bernoulli(2)
    t0 = time.perf_counter()
    pts = F.sample_points(jax.random.PRNGKey(0), args.points, args.horizon)
    fs = F.enumerate_formulas(args.length, pts)
    classes = F.equivalence_classes(fs)
    t_enum = time.perf_counter() - t0
    print(f"L={args.length}: |Theta| = {fs.num_formulas:,} formulas, {fs.num_value_classes:,} "
          f"valid distinct value vectors, M = {len(classes.tokens):,} rank classes "
          f"({t_enum:.1f} s)", flush=True)
    out = dict(length=args.length, horizon=args.horizon, num_formulas=fs.num_formulas,
               value_classes=fs.num_value_classes, rank_classes=len(classes.tokens),
               enumerate_seconds=t_enum)
    key = jax.random.PRNGKey(7)
    tuned = simulate(ix.ucb1_tuned(), env, args.horizon, key, args.test_problems)
    out["ucb1_tuned_test"] = [tuned.mean, tuned.stderr]
    print(f"UCB1-Tuned test regret {tuned.mean:.3f} +- {tuned.stderr:.3f}", flush=True)
    for name, fn in (("ucb1_tuned", lambda: F.identify_ucb1_tuned(
            classes, env, args.horizon, jax.random.PRNGKey(1), num_problems=100,
            rounds=args.rounds, batch=args.batch)),
                     ("ucb1_tuned_most_played", lambda: F.identify_ucb1_tuned(
            classes, env, args.horizon, jax.random.PRNGKey(1), num_problems=100,
            rounds=args.rounds, batch=args.batch, recommend="most_played")),
                     ("racing", lambda: F.identify_racing(
            classes, env, args.horizon, jax.random.PRNGKey(2),
            num_problems=args.race_problems))):
        res = fn()
        test = simulate(F.formula_policy(classes.tokens[res.best]), env, args.horizon, key,
                        args.test_problems)
        d = test.regret[:, 0] - tuned.regret[:, 0]
        out[name] = dict(formula=res.formula, episodes=res.episodes, seconds=res.seconds,
                         test=[test.mean, test.stderr],
                         diff_vs_ucb1_tuned=[float(d.mean()), float(d.std() / np.sqrt(len(d)))])
        print(f"{name:10s}: {res.formula:35s} {res.episodes:9,d} episodes/evaluations "
              f"{res.seconds:7.1f} s  test regret {test.mean:.3f} +- {test.stderr:.3f} "
              f"(vs UCB1-Tuned {d.mean():+.3f} +- {d.std() / np.sqrt(len(d)):.3f})", flush=True)
    write_json(args.out, out)


if __name__ == "__main__":
    main()
