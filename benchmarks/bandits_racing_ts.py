"""Thompson sampling on a logistic (parametrised Bernoulli) bandit with RacingMH
posterior draws, against Laplace-TS, an exact-MH chain and uniform play.

Setting: ``logistic_bernoulli(K, d, preference_sd)`` (paper 004's model; the
policies' prior is the true one, ``prior_sd = preference_sd``), horizon T.  Policies:

* racing-TS: ``steps`` racing MH moves per round (random walk or Langevin, Taylor-proxy
  control variate), warm-started at the previous draw (:mod:`subsample_mcmc.bandits.racing_ts`);
* exact-MH TS: the same chain with ``method="exact"`` (reads the whole history each
  step) and ``--exact-steps`` moves per round: the reference close to exact TS;
* Laplace-TS (:mod:`subsample_mcmc.bandits.laplace`), uniform play (analytic).

Regrets are on the same problems (paired differences with their standard errors).
Cost: per-round likelihood evaluations of the MH steps (``MHInfo.num_likelihood_evals``
of :func:`subsample_mcmc.kernels.mh.build_kernel`: both arms of each race, padding of the
static race population included; the exact chain reads the padded population once per
step, its current sum cached, and once more at a round's first step) against the
history length n, binned, next to the ``2 n`` per step of exact MH without that cache.

    nice -n 10 .venv/bin/python benchmarks/bandits_racing_ts.py [--horizon 1000 --problems 100]

Writes benchmarks/results/bandits_racing_ts.json and prints the tables.
"""

import argparse
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from subsample_mcmc.bandits import laplace, simulate
from subsample_mcmc.bandits import racing_ts as R
from subsample_mcmc.bandits.environments import logistic_bernoulli

from bandits_common import paired_difference, write_json


def uniform_regret(env, horizon, key, num_problems):
    """Expected regret of uniform play: ``T * mean_a (mu* - mu_a)`` per problem."""
    keys = jax.random.split(key, num_problems)

    def one(k):
        k_problem, _ = jax.random.split(k)
        problem = env.sample_problem(k_problem)
        mu = env.mean_rewards(problem, env.observe(problem, k, 1))
        return horizon * jnp.mean(jnp.max(mu) - mu)

    return np.asarray(jax.vmap(one)(keys))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arms", type=int, default=10)
    ap.add_argument("--dim", type=int, default=3)
    ap.add_argument("--preference-sd", type=float, default=1.0)
    ap.add_argument("--horizon", type=int, default=1000)
    ap.add_argument("--problems", type=int, default=100)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--exact-steps", type=int, default=10)
    ap.add_argument("--cost-problems", type=int, default=20)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "bandits_racing_ts.json"))
    args = ap.parse_args()
    env = logistic_bernoulli(args.arms, args.dim, args.preference_sd)
    sd = args.preference_sd
    policies = {
        "racing_rw": R.ts_racing(sd, steps=args.steps, proposal="random_walk"),
        "racing_langevin": R.ts_racing(sd, steps=args.steps, proposal="langevin"),
        "racing_rw_no_proxy": R.ts_racing(sd, steps=args.steps, proxy=False),
        "exact_mh": R.ts_racing(sd, steps=args.exact_steps, method="exact"),
        "laplace": laplace.ts_laplace(sd),
    }
    key = jax.random.PRNGKey(11)
    uni = uniform_regret(env, args.horizon, key, args.problems)
    out = dict(args=vars(args), regret={}, cost={})
    out["regret"]["uniform"] = dict(mean=float(uni.mean()), se=float(uni.std(ddof=1) / math.sqrt(len(uni))))
    print(f"logistic bandit K={args.arms}, d={args.dim}, sd={sd}, T={args.horizon}, "
          f"{args.problems} problems\n  uniform play: {uni.mean():.1f} +- "
          f"{uni.std(ddof=1) / math.sqrt(len(uni)):.1f}", flush=True)
    results = {}
    for name, pol in policies.items():
        t0 = time.perf_counter()
        r = simulate(pol, env, args.horizon, key, args.problems)
        results[name] = r.regret[:, 0]
        out["regret"][name] = dict(mean=r.mean, se=r.stderr, seconds=time.perf_counter() - t0)
        print(f"  {name:20s} regret {r.mean:7.2f} +- {r.stderr:5.2f}   "
              f"({time.perf_counter() - t0:.0f} s incl. compile)", flush=True)
    print("  paired differences (row - exact_mh):")
    for name, reg in results.items():
        if name == "exact_mh":
            continue
        diff, se = paired_difference(reg, results["exact_mh"])
        out["regret"][name]["minus_exact_mh"] = [diff, se]
        print(f"    {name:20s} {diff:+7.2f} +- {se:5.2f}")
    # cost per round against the history length
    bins = [1] + [p for p in R.population_levels(args.horizon)] + [args.horizon + 1]
    bins = sorted(set(bins))
    keys = jax.random.split(jax.random.PRNGKey(5), args.cost_problems)
    print("  likelihood evaluations per round (mean over rounds with n in the bin; "
          f"{args.cost_problems} episodes):")
    header = "    n in        " + "".join(f"{name:>20s}" for name in
                                          ("racing_rw", "racing_langevin", "racing_rw_no_proxy",
                                           "exact_mh")) + f"{'2n x steps (exact)':>20s}"
    print(header)
    cost_rows = {}
    for name in ("racing_rw", "racing_langevin", "racing_rw_no_proxy", "exact_mh"):
        pol = policies[name]
        c = jax.jit(jax.vmap(lambda k: R.episode_costs(pol, env, args.horizon, k)))(keys)
        n = np.asarray(c["history"])[0]
        per_round = np.asarray(c["mh_evals"]).mean(0)
        proxy = np.asarray(c["proxy_evals"]).mean(0)
        acc = np.asarray(c["accepted"]).sum() / (c["accepted"].size * pol_steps(name, args))
        rows = []
        for lo, hi in zip(bins[:-1], bins[1:]):
            sel = (n >= lo) & (n < hi)
            rows.append(dict(n_lo=lo, n_hi=hi - 1, mh_evals_per_round=float(per_round[sel].mean()),
                             proxy_evals_per_round=float(proxy[sel].mean()),
                             exact_2n_steps=float(2 * n[sel].mean() * pol_steps(name, args))))
        cost_rows[name] = dict(rows=rows, acceptance=float(acc),
                               total_mh_evals=float(per_round.sum()),
                               total_proxy_evals=float(proxy.sum()))
    out["cost"] = cost_rows
    for i, (lo, hi) in enumerate(zip(bins[:-1], bins[1:])):
        line = f"    [{lo:4d},{hi - 1:4d}]  " + "".join(
            f"{cost_rows[name]['rows'][i]['mh_evals_per_round']:20.1f}" for name in cost_rows)
        line += f"{cost_rows['racing_rw']['rows'][i]['exact_2n_steps']:20.1f}"
        print(line)
    for name, c in cost_rows.items():
        print(f"    {name:20s} acceptance {c['acceptance']:.2f}; whole episode: {c['total_mh_evals']:.3g} "
              f"race evaluations + {c['total_proxy_evals']:.3g} proxy evaluations")
    write_json(args.out, out)


def pol_steps(name, args):
    return args.exact_steps if name == "exact_mh" else args.steps


if __name__ == "__main__":
    main()
