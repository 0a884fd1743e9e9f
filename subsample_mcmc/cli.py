"""Command line: ``subsample-mcmc <command>`` (also ``python -m subsample_mcmc``)."""

from __future__ import annotations

import argparse
import json
import sys
import time

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    import jax
    import jax.numpy as jnp

    from .racing import best_arm, sample_discrete

    print(f"Racing demo: D={args.arms} arms, N={args.population:,} rewards per arm, "
          f"delta={args.delta}, first batch {args.first_batch}")
    key = jax.random.PRNGKey(args.seed)
    k_data, k_race = jax.random.split(key)
    n, d = args.population, args.arms
    # arm means spaced by `gap` reward standard deviations / sqrt(N): a realistic
    # Bayesian-sized gap, hard for naive subsampling, easy for a race with a bound.
    means = jnp.linspace(0.0, args.gap, d)
    rewards = means[:, None] + jax.random.normal(k_data, (d, n))
    exact = int(jnp.argmax(jnp.mean(rewards, axis=1)))
    rows = []
    for method in ("normal", "normal_union", "ebs", "lil_ucb", "exact"):
        kwargs = {} if method in ("lil_ucb", "exact") else {"first_batch": args.first_batch if method != "ebs" else None}
        res = best_arm(k_race, rewards, method=method, delta=args.delta, **kwargs)
        jax.block_until_ready(res)  # compile
        t0 = time.perf_counter()
        res = best_arm(k_race, rewards, method=method, delta=args.delta, **kwargs)
        jax.block_until_ready(res)
        dt = time.perf_counter() - t0
        frac = int(res.num_evaluations) / (n * d)
        rows.append((method, int(res.arm), frac, dt))
        print(f"  {method:13s} arm found {int(res.arm)} (exact {exact})  "
              f"fraction of rewards read {frac:8.4%}  time {dt * 1e3:8.2f} ms")
    # Gumbel-max discrete sampling, Eq. 2-3
    log_fn = rewards / n  # p(X=i) ∝ exp(sum_n l_in / N)
    # lax.map with a batch size bounds the memory of the vmapped late stages
    draws = jax.lax.map(lambda k: sample_discrete(k, jnp.zeros(d), log_fn, delta=args.delta).value,
                        jax.random.split(k_race, 2000), batch_size=50)
    print(f"  sample_discrete: 2000 vmapped draws, histogram {jnp.bincount(draws, length=d).tolist()}")
    if args.json:
        print(json.dumps([dict(method=m, arm=a, fraction=f, seconds=t) for m, a, f, t in rows]))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="subsample-mcmc", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="racing demo on synthetic rewards")
    demo.add_argument("--arms", type=int, default=10)
    demo.add_argument("--population", type=int, default=1_000_000)
    demo.add_argument("--gap", type=float, default=0.05)
    demo.add_argument("--delta", type=float, default=0.05)
    demo.add_argument("--first-batch", type=int, default=50)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--json", action="store_true")
    demo.set_defaults(func=_demo)
    from .bandits.cli import add_subparser as _add_bandits
    _add_bandits(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
