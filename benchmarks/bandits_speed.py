"""Episodes per second: one jitted vmap(scan) program vs a per-episode Python loop.

Both run the same policy (default UCB1-Tuned, also TS-Beta) on Maes et al.'s two-armed
Bernoulli problems with the same keys; the loop is ``run_episode_loop`` (a jitted step
called once per round) -- the plain way to write a bandit simulator.  Also times a
``jit(run_episode)`` called once per episode (scan, no vmap).  Writes
benchmarks/results/bandits_speed.json.

    nice -n 10 .venv/bin/python benchmarks/bandits_speed.py
"""

import argparse
import os
import time

import jax
import numpy as np

from subsample_mcmc.bandits import make_policy, run_episode, run_episode_loop, simulate
from subsample_mcmc.bandits.environments import bernoulli

from bandits_common import write_json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--horizon", type=int, default=100)
    ap.add_argument("--problems", type=int, default=10000)
    ap.add_argument("--loop-episodes", type=int, default=5)
    ap.add_argument("--policies", default="ucb1_tuned,ts_beta")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "bandits_speed.json"))
    args = ap.parse_args()
    env = bernoulli(2)
    rows = []
    for name in args.policies.split(","):
        policy = make_policy(name)
        params = jax.tree_util.tree_map(np.float32, policy.default_params)
        key = jax.random.PRNGKey(0)
        simulate(policy, env, args.horizon, key, args.problems)          # compile
        t0 = time.perf_counter()
        res = simulate(policy, env, args.horizon, key, args.problems)
        vmapped = args.problems / (time.perf_counter() - t0)

        keys = jax.random.split(key, args.loop_episodes)
        run_episode_loop(policy, env, args.horizon, params, keys[0])     # compile the step
        t0 = time.perf_counter()
        for k in keys:
            jax.block_until_ready(run_episode_loop(policy, env, args.horizon, params, k).arms)
        loop = args.loop_episodes / (time.perf_counter() - t0)

        one = jax.jit(lambda k: run_episode(policy, env, args.horizon, params, k, curve=False).regret)
        one(keys[0]).block_until_ready()
        t0 = time.perf_counter()
        for k in jax.random.split(key, 50):
            one(k).block_until_ready()
        scan_only = 50 / (time.perf_counter() - t0)
        row = dict(policy=name, horizon=args.horizon, vmapped_episodes_per_s=vmapped,
                   loop_episodes_per_s=loop, jit_scan_per_episode_episodes_per_s=scan_only,
                   speedup_vs_loop=vmapped / loop, mean_regret=res.mean)
        rows.append(row)
        print(f"{name:12s} T={args.horizon}: vmapped {vmapped:10.0f} ep/s | jit(scan) per "
              f"episode {scan_only:8.1f} ep/s | python loop {loop:6.2f} ep/s | "
              f"speed-up {vmapped / loop:8.0f}x", flush=True)
    write_json(args.out, rows)


if __name__ == "__main__":
    main()
