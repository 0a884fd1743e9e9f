"""Paired test of learned Power-P policies against each other and UCB1-Tuned (Maes et
al. Table 1-2, T = 100, two Bernoulli arms): the parameters come from the JSON files
written by ``bandits_power1.py`` (``--degree 1`` and ``--degree 2``); every policy runs on
the same ``--test-problems`` problems and run keys, so differences have paired standard
errors.

    nice -n 10 .venv/bin/python benchmarks/bandits_power_compare.py

Writes benchmarks/results/bandits_power_compare.json.
"""

import argparse
import json
import os

import jax
import numpy as np

from subsample_mcmc.bandits import index as ix
from subsample_mcmc.bandits import meta, simulate
from subsample_mcmc.bandits.environments import bernoulli, truncated_gaussian

from bandits_common import paired_difference, write_json

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--power1", default=os.path.join(RESULTS, "bandits_power1_paper_protocol.json"))
    ap.add_argument("--power2", default=os.path.join(RESULTS, "bandits_power2.json"))
    ap.add_argument("--test-problems", type=int, default=10000)
    ap.add_argument("--out", default=os.path.join(RESULTS, "bandits_power_compare.json"))
    args = ap.parse_args()
    learned = {}
    for name, path in (("power1", args.power1), ("power2", args.power2)):
        with open(path) as f:
            rec = json.load(f)
        learned[name] = dict(policy=meta.power_policy(rec["degree"], np.asarray(rec["theta"],
                                                                                np.float32)),
                             source=os.path.basename(path), runs=rec["runs"],
                             iterations=rec["iterations"], horizon=rec["horizon"])
    horizon = learned["power1"]["horizon"]
    key = jax.random.PRNGKey(7)
    out = dict(sources={k: {kk: v for kk, v in d.items() if kk != "policy"}
                        for k, d in learned.items()}, test_problems=args.test_problems)
    for dist, env in (("bernoulli", bernoulli(2)), ("gaussian", truncated_gaussian(2))):
        res = {name: simulate(d["policy"], env, horizon, key, args.test_problems)
               for name, d in learned.items()}
        res["ucb1_tuned"] = simulate(ix.ucb1_tuned(), env, horizon, key, args.test_problems)
        per = {n: r.regret[:, 0] for n, r in res.items()}
        row = {n: [r.mean, r.stderr] for n, r in res.items()}
        for a, b in (("power2", "power1"), ("power2", "ucb1_tuned"), ("power1", "ucb1_tuned")):
            row[f"{a} - {b}"] = list(paired_difference(per[a], per[b]))
        out[dist] = row
        print(f"{dist:9s}: " + "  ".join(f"{n} {v[0]:.3f} +- {v[1]:.3f}" for n, v in row.items()),
              flush=True)
    write_json(args.out, out)


if __name__ == "__main__":
    main()
