"""Batch Thompson sampling vs sequential TS vs static batches (Karbasi et al. Sec. 7).

Bernoulli arms with means uniform on [0, 1]; for each (N, T): TS (Beta), B-TS (dynamic
doubling batches, Alg. 1), and Static-TS / -2 / -4 with equal batches and 1x, 2x, 4x
B-TS's number of queries.  Paired problems (same key) give the B-TS / TS ratio an
honest standard error.  Writes benchmarks/results/bandits_batch_ts.json.

    nice -n 10 .venv/bin/python benchmarks/bandits_batch_ts.py
"""

import argparse
import math
import os

import jax

from subsample_mcmc.bandits import simulate
from subsample_mcmc.bandits import thompson as th
from subsample_mcmc.bandits.environments import bernoulli

from bandits_common import write_json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--settings", default="10x1000,10x5000,50x2000")
    ap.add_argument("--problems", type=int, default=500)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "bandits_batch_ts.json"))
    args = ap.parse_args()
    rows = []
    for setting in args.settings.split(","):
        n, horizon = (int(x) for x in setting.split("x"))
        env, key = bernoulli(n), jax.random.PRNGKey(n * 7 + horizon)
        ts = simulate(th.ts_beta(), env, horizon, key, args.problems)
        bts = simulate(th.dynamic_batch(th.ts_beta()), env, horizon, key, args.problems)
        nb = float(bts.num_batches.mean())
        ratio = bts.mean / ts.mean
        # delta-method standard error of the ratio of paired means
        a, b = bts.regret[:, 0], ts.regret[:, 0]
        g = a / b.mean() - a.mean() * b / b.mean() ** 2
        ratio_se = g.std() / math.sqrt(len(g))
        row = dict(arms=n, horizon=horizon, problems=args.problems, ts=[ts.mean, ts.stderr],
                   b_ts=[bts.mean, bts.stderr], b_ts_queries=nb,
                   b_ts_queries_max=int(bts.num_batches.max()),
                   bound_n_log2t=n * (math.floor(math.log2(horizon)) + 1),
                   ratio=ratio, ratio_se=ratio_se)
        print(f"N={n:3d} T={horizon:5d}: TS {ts.mean:8.2f} ± {ts.stderr:5.2f} | B-TS {bts.mean:8.2f} "
              f"± {bts.stderr:5.2f} ({nb:6.1f} queries, bound {row['bound_n_log2t']}) | ratio "
              f"{ratio:.3f} ± {ratio_se:.3f}", flush=True)
        for f in (1, 2, 4):
            st = simulate(th.static_batch(th.ts_beta(), math.ceil(horizon / (f * nb))), env, horizon,
                          key, args.problems)
            d = st.regret[:, 0] - bts.regret[:, 0]
            row[f"static_x{f}"] = dict(regret=[st.mean, st.stderr], queries=float(st.num_batches.mean()),
                                       minus_b_ts=[float(d.mean()), float(d.std() / math.sqrt(len(d)))])
            print(f"      Static-TS x{f}: {st.mean:8.2f} ± {st.stderr:5.2f} ({st.num_batches.mean():6.1f} "
                  f"queries), minus B-TS {d.mean():+7.2f} ± {d.std() / math.sqrt(len(d)):.2f}", flush=True)
        rows.append(row)
    write_json(args.out, rows)


if __name__ == "__main__":
    main()
