"""Reproduce the untuned-policy rows of Table 1 of Maes, Wehenkel & Ernst.

Two arms with means uniform on [0, 1]; Bernoulli and truncated-Gaussian rewards;
T in {10, 100, 1000}.  For each cell prints ours +- standard error, the paper's value
and the z-score against the combined Monte Carlo error (ours and the paper's 10^4
problems).  Writes benchmarks/results/bandits_table1.json.

    nice -n 10 .venv/bin/python benchmarks/bandits_table1.py [--problems 20000]
"""

import argparse
import math
import os
import time

import jax

from subsample_mcmc.bandits import parse_policy, simulate
from subsample_mcmc.bandits.environments import bernoulli, truncated_gaussian
from subsample_mcmc.bandits.paper_values import MAES_TABLE1_UNTUNED, MAES_TEST_PROBLEMS

from bandits_common import write_json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=20000)
    ap.add_argument("--horizons", default="10,100,1000")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "bandits_table1.json"))
    args = ap.parse_args()
    rows = []
    for dist, env in (("bernoulli", bernoulli(2)), ("gaussian", truncated_gaussian(2))):
        for horizon in [int(h) for h in args.horizons.split(",")]:
            for name, paper in MAES_TABLE1_UNTUNED[dist].items():
                t0 = time.perf_counter()
                res = simulate(parse_policy(name), env, horizon, jax.random.PRNGKey(horizon),
                               args.problems)
                se_paper = res.stderr * math.sqrt(args.problems / MAES_TEST_PROBLEMS)
                z = (res.mean - paper[horizon]) / math.hypot(res.stderr, se_paper)
                row = dict(distribution=dist, horizon=horizon, policy=name, ours=res.mean,
                           stderr=res.stderr, paper=paper[horizon], z=z,
                           seconds=time.perf_counter() - t0)
                rows.append(row)
                print(f"{dist:9s} T={horizon:5d} {name:12s} ours {res.mean:7.3f} +- "
                      f"{res.stderr:.3f}  paper {paper[horizon]:6.2f}  z {z:+5.1f}  "
                      f"({row['seconds']:.1f}s)", flush=True)
    write_json(args.out, dict(problems=args.problems, rows=rows))
    print(f"max |z| = {max(abs(r['z']) for r in rows):.2f} over {len(rows)} cells")


if __name__ == "__main__":
    main()
