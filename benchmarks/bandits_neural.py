"""Neural bandits of Lu & Van Roy (Sec. 5.2, Figures 2-3) at a reduced size: ensemble
sampling against epsilon-greedy (fixed and annealed) and dropout.

Paper: K = 100 actions in R^100 (entries U[-1, 1], last = 1); single neuron
``max(0, theta^T a)``, ``theta ~ N(0, 10 I)``; two-layer ``W2^T max(0, W1 a)``, D = 50,
entries N(0, 1); noise variance 100; agents take 3 gradient steps on minibatches of 64
per period (leaky ReLU inside the agents); ~1,000 realisations.  Claim: ensemble
sampling, even with 10 models, beats epsilon-greedy with its best parameters on the
single neuron, and beats epsilon-greedy and dropout on the two-layer network.

Reduced sizes keep the paper's signal-to-noise ratio (``--noise-var`` default: the
noise variance scaled like the prior variance of the mean reward).  Every agent runs on
the *same* problems and run keys, so each comparison is a
paired difference of cumulative regrets with its standard error over problems; each
baseline family is reported at its best setting (the paper's "best tuned").

    nice -n 10 .venv/bin/python benchmarks/bandits_neural.py [--arms 50 --dim 20 --hidden 16]

Writes benchmarks/results/bandits_neural.json and prints the table.
"""

import argparse
import os
import time

import jax

from subsample_mcmc.bandits import ensemble as es
from subsample_mcmc.bandits import simulate
from subsample_mcmc.bandits.environments import neural

from bandits_common import paired_difference, write_json


def signal_variance(dim, hidden, prior):
    """Variance of the mean reward of one action ``a`` (entries U[-1, 1], last = 1)
    under the prior: ``lambda ((d-1)/3 + 1)`` for a neuron's pre-activation, and for the
    two-layer network ``D E[W2^2] E[relu(h)^2] = D lambda^2 ((d-1)/3 + 1) / 2``."""
    pre = prior * ((dim - 1) / 3.0 + 1.0)
    return pre if hidden == 0 else hidden * prior * pre / 2.0


def matched_noise_var(dim, hidden, prior):
    """Noise variance giving the paper's signal-to-noise ratio (d = 100, D = 50, noise
    variance 100) at a reduced size."""
    paper = signal_variance(100, 50 if hidden else 0, prior)
    return 100.0 * signal_variance(dim, hidden, prior) / paper


def agents_for(hidden, prior, noise, lr, dropout_lr):
    common = dict(hidden=hidden, prior_var=prior, noise_var=noise, learning_rate=lr)
    agents = {"ensemble_10": es.neural_agent("ensemble", 10, **common),
              "ensemble_30": es.neural_agent("ensemble", 30, **common)}
    for eps in (0.05, 0.1, 0.2):
        agents[f"eps_greedy_{eps}"] = es.neural_agent("eps_greedy", epsilon=eps, **common)
    for scale in ((10, 30, 70) if hidden else (50, 150, 300)):
        agents[f"eps_annealed_{scale}"] = es.neural_agent("eps_annealed", epsilon=float(scale),
                                                          **common)
    if hidden:
        for p in (0.25, 0.5):
            agents[f"dropout_{p}"] = es.neural_agent(
                "dropout", dropout=p, **dict(common, learning_rate=dropout_lr))
    return agents


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arms", type=int, default=50)
    ap.add_argument("--dim", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--horizon-single", type=int, default=400)
    ap.add_argument("--horizon-two-layer", type=int, default=300)
    ap.add_argument("--runs", type=int, default=100, help="problems (one run each)")
    ap.add_argument("--noise-var", type=float, default=None,
                    help="default: the paper's signal-to-noise ratio at this size")
    ap.add_argument("--lr", type=float, default=1e-2, help="Adam step of ES and eps-greedy")
    ap.add_argument("--dropout-lr", type=float, default=1e-2)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "bandits_neural.json"))
    args = ap.parse_args()
    out = dict(args=vars(args), settings={})
    key = jax.random.PRNGKey(1)
    for title, hidden, prior, horizon in (("single_neuron", 0, 10.0, args.horizon_single),
                                          ("two_layer", args.hidden, 1.0, args.horizon_two_layer)):
        noise = args.noise_var or matched_noise_var(args.dim, hidden, prior)
        env = neural(num_arms=args.arms, dim=args.dim, hidden=hidden, prior_var=prior,
                     noise_var=noise)
        print(f"{title}: K={args.arms}, d={args.dim}, D={hidden}, T={horizon}, noise variance "
              f"{noise:.1f}, {args.runs} problems", flush=True)
        res, regrets = {}, {}
        for name, agent in agents_for(hidden, prior, noise, args.lr, args.dropout_lr).items():
            t0 = time.perf_counter()
            r = simulate(agent, env, horizon, key, args.runs)
            regrets[name] = r.regret[:, 0]
            res[name] = dict(regret=[r.mean, r.stderr], seconds=time.perf_counter() - t0)
            print(f"{title:14s} {name:18s} regret {r.mean:9.1f} +- {r.stderr:6.1f} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        families = {"eps_greedy": [n for n in regrets if n.startswith("eps_greedy")],
                    "eps_annealed": [n for n in regrets if n.startswith("eps_annealed")],
                    "dropout": [n for n in regrets if n.startswith("dropout")]}
        comparisons = {}
        for fam, names in families.items():
            if not names:
                continue
            best = min(names, key=lambda n: regrets[n].mean())
            for ens in ("ensemble_10", "ensemble_30"):
                diff, se = paired_difference(regrets[ens], regrets[best])
                comparisons[f"{ens} - {best}"] = [diff, se]
                print(f"  {title}: {ens} - best {fam} ({best}): {diff:+8.1f} +- {se:6.1f}"
                      f"  (z = {diff / se:+.1f})", flush=True)
        out["settings"][title] = dict(K=args.arms, d=args.dim, D=hidden, T=horizon,
                                      runs=args.runs, prior_var=prior, noise_var=noise, results=res,
                                      ensemble_minus_best_baseline=comparisons)
        write_json(args.out, out)


if __name__ == "__main__":
    main()
