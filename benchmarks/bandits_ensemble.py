"""Ensemble sampling (Lu & Van Roy Sec. 5): Gaussian bandit and ReLU-network bandits.

(1) 50 independent Gaussian arms, N(0, 1) means, unit noise: cumulative regret of TS
and of ensembles of M models, paired problems (ES - TS with its standard error).
(2) Single-neuron and two-layer ReLU bandits (reduced sizes by default; the paper's
are K = d = 100, D = 50): ensemble sampling vs epsilon-greedy (fixed, annealed) and
dropout.  Writes benchmarks/results/bandits_ensemble.json.

    nice -n 10 .venv/bin/python benchmarks/bandits_ensemble.py
"""

import argparse
import os
import time

import jax

from subsample_mcmc.bandits import ensemble as es
from subsample_mcmc.bandits import simulate
from subsample_mcmc.bandits import thompson as th
from subsample_mcmc.bandits.environments import gaussian, neural

from bandits_common import paired_difference, write_json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--horizon", type=int, default=500)
    ap.add_argument("--problems", type=int, default=500)
    ap.add_argument("--models", default="5,10,20,30,100,1000")
    ap.add_argument("--neural", default="30,20,16,200,12",
                    help="K,d,D,T,runs of the network bandits")
    ap.add_argument("--noise-var", type=float, default=100.0)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "bandits_ensemble.json"))
    args = ap.parse_args()
    out = dict(gaussian=[], neural={})
    env, key = gaussian(50), jax.random.PRNGKey(0)
    ts = simulate(th.ts_gaussian(), env, args.horizon, key, args.problems)
    out["gaussian"].append(dict(policy="TS", regret=[ts.mean, ts.stderr]))
    print(f"50-arm Gaussian, T={args.horizon}: TS {ts.mean:.2f} ± {ts.stderr:.2f}", flush=True)
    for m in (int(x) for x in args.models.split(",")):
        r = simulate(es.ensemble_gaussian(m), env, args.horizon, key, args.problems)
        diff, se = paired_difference(r.regret[:, 0], ts.regret[:, 0])
        out["gaussian"].append(dict(policy=f"ES-{m}", regret=[r.mean, r.stderr],
                                    minus_ts=[diff, se]))
        print(f"  ES M={m:5d}: {r.mean:8.2f} ± {r.stderr:.2f}   ES - TS {diff:+7.2f} ± {se:.2f}",
              flush=True)
    k, d, hidden, horizon, runs = (int(x) for x in args.neural.split(","))
    for title, h, prior in (("single_neuron", 0, 10.0), ("two_layer", hidden, 1.0)):
        env = neural(num_arms=k, dim=d, hidden=h, prior_var=prior, noise_var=args.noise_var)
        agents = {"ensemble_10": es.neural_agent("ensemble", 10, hidden=h, prior_var=prior,
                                                 noise_var=args.noise_var),
                  "ensemble_30": es.neural_agent("ensemble", 30, hidden=h, prior_var=prior,
                                                 noise_var=args.noise_var),
                  "eps_greedy_0.05": es.neural_agent("eps_greedy", hidden=h, epsilon=0.05,
                                                     prior_var=prior, noise_var=args.noise_var),
                  "eps_greedy_0.1": es.neural_agent("eps_greedy", hidden=h, epsilon=0.1,
                                                    prior_var=prior, noise_var=args.noise_var),
                  "eps_annealed_20": es.neural_agent("eps_annealed", hidden=h, epsilon=20.0,
                                                     prior_var=prior, noise_var=args.noise_var)}
        if h:
            for p in (0.25, 0.5):
                agents[f"dropout_{p}"] = es.neural_agent("dropout", hidden=h, dropout=p,
                                                         prior_var=prior, noise_var=args.noise_var)
        res = {}
        for name, agent in agents.items():
            t0 = time.perf_counter()
            r = simulate(agent, env, horizon, jax.random.PRNGKey(1), runs)
            res[name] = dict(regret=[r.mean, r.stderr], seconds=time.perf_counter() - t0)
            print(f"{title:14s} {name:16s} regret {r.mean:9.1f} ± {r.stderr:6.1f} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        out["neural"][title] = dict(K=k, d=d, D=h, T=horizon, runs=runs, results=res)
    write_json(args.out, out)


if __name__ == "__main__":
    main()
