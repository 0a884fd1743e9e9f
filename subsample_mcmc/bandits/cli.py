"""``subsample-mcmc bandits ...``: the bandit experiments from the command line.

* ``maes``     -- Maes et al.'s protocol (two arms, means uniform on [0, 1], Bernoulli or
  truncated-Gaussian rewards): mean regret and standard error of each policy.
* ``batch``    -- Karbasi et al. Sec. 7: TS vs B-TS vs static batches on a Bernoulli
  bandit (regret and number of batch queries).
* ``ensemble`` -- Lu & Van Roy Sec. 5.1: ensemble sampling vs TS on the independent
  Gaussian bandit.
"""

from __future__ import annotations

import argparse
import json
import time

__all__ = ["add_subparser", "main"]

_DISTRIBUTIONS = ("bernoulli", "gaussian")


def _positive_int(name):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--{name} must be an integer, got {text!r}")
        if value < 1:
            raise argparse.ArgumentTypeError(f"--{name} must be >= 1, got {value}")
        return value
    return parse


def _int_list(name):
    def parse(text):
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"--{name} must be a comma-separated list of integers")
        if not values or min(values) < 1:
            raise argparse.ArgumentTypeError(f"--{name} must list positive integers")
        return values
    return parse


def _emit(args, rows, header):
    if args.json:
        print(json.dumps(rows, indent=None))
        return
    print(header)
    for row in rows:
        print("  " + "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in row.items()))


def _maes(args) -> int:
    import jax

    from .environments import bernoulli, truncated_gaussian
    from .registry import parse_policy
    from .simulate import check_horizon, simulate

    env = bernoulli(2) if args.distribution == "bernoulli" else truncated_gaussian(2)
    names = [p for p in args.policies.split(",") if p.strip()]
    if not names:
        raise SystemExit("--policies: give at least one policy name")
    try:
        policies = [parse_policy(n) for n in names]
        check_horizon(env, args.horizon)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}")
    rows = []
    key = jax.random.PRNGKey(args.seed)
    for policy in policies:
        t0 = time.perf_counter()
        res = simulate(policy, env, args.horizon, key, args.problems, num_runs=args.runs)
        rows.append(dict(policy=policy.name, distribution=args.distribution,
                         horizon=args.horizon, problems=args.problems, runs=args.runs,
                         mean_regret=res.mean, stderr=res.stderr,
                         seconds=time.perf_counter() - t0))
    _emit(args, rows, f"Maes et al. protocol: 2 arms, {args.distribution}, T={args.horizon}")
    return 0


def _batch(args) -> int:
    import math

    import jax

    from .environments import bernoulli
    from .simulate import check_horizon, simulate
    from .thompson import dynamic_batch, static_batch, ts_beta

    env = bernoulli(args.arms)
    try:
        check_horizon(env, args.horizon)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}")
    key = jax.random.PRNGKey(args.seed)
    rows = []

    def run(name, policy):
        res = simulate(policy, env, args.horizon, key, args.problems)
        rows.append(dict(policy=name, arms=args.arms, horizon=args.horizon,
                         mean_regret=res.mean, stderr=res.stderr,
                         batches=float(res.num_batches.mean())))
        return res

    run("TS", ts_beta())
    b = run("B-TS", dynamic_batch(ts_beta()))
    nb = max(1, int(round(float(b.num_batches.mean()))))
    for factor, name in ((1, "Static-TS"), (2, "Static-TS-2"), (4, "Static-TS-4")):
        run(name, static_batch(ts_beta(), max(1, math.ceil(args.horizon / (factor * nb)))))
    _emit(args, rows, f"Batch TS (Karbasi et al. Sec. 7): Bernoulli, N={args.arms}, T={args.horizon}")
    return 0


def _ensemble(args) -> int:
    import jax

    from .ensemble import ensemble_gaussian
    from .environments import gaussian
    from .simulate import check_horizon, simulate
    from .thompson import ts_gaussian

    env = gaussian(args.arms)
    try:
        check_horizon(env, args.horizon)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}")
    key = jax.random.PRNGKey(args.seed)
    rows = []
    res = simulate(ts_gaussian(), env, args.horizon, key, args.problems)
    rows.append(dict(policy="TS", models=0, mean_regret=res.mean, stderr=res.stderr,
                     per_period=res.mean / args.horizon))
    for m in args.models:
        res = simulate(ensemble_gaussian(m), env, args.horizon, key, args.problems)
        rows.append(dict(policy=f"ES-{m}", models=m, mean_regret=res.mean, stderr=res.stderr,
                         per_period=res.mean / args.horizon))
    _emit(args, rows, f"Ensemble sampling (Lu & Van Roy 5.1): {args.arms} Gaussian arms, "
                      f"T={args.horizon}")
    return 0


def add_subparser(subparsers) -> argparse.ArgumentParser:
    """Register ``bandits`` (with ``maes``, ``batch``, ``ensemble``) on ``subparsers``."""
    bandits = subparsers.add_parser("bandits", help="bandit experiments (Maes et al., "
                                    "Karbasi et al., Lu & Van Roy)")
    sub = bandits.add_subparsers(dest="bandits_command", required=True)

    maes = sub.add_parser("maes", help="Maes et al. protocol: regret of index policies")
    maes.add_argument("--horizon", type=_positive_int("horizon"), default=100)
    maes.add_argument("--problems", type=_positive_int("problems"), default=10_000)
    maes.add_argument("--runs", type=_positive_int("runs"), default=1)
    maes.add_argument("--policies", default="ucb1,ucb1_tuned,ucb1_normal,ucb2,ucb_v,kl_ucb,"
                      "kl_ucb:c=3,eps_greedy",
                      help="comma-separated names, parameters as name:key=value")
    maes.add_argument("--distribution", choices=_DISTRIBUTIONS, default="bernoulli")
    maes.add_argument("--seed", type=int, default=0)
    maes.add_argument("--json", action="store_true")
    maes.set_defaults(func=_maes)

    batch = sub.add_parser("batch", help="TS vs batch TS vs static batches (Karbasi et al.)")
    batch.add_argument("--arms", type=_positive_int("arms"), default=10)
    batch.add_argument("--horizon", type=_positive_int("horizon"), default=1000)
    batch.add_argument("--problems", type=_positive_int("problems"), default=1000)
    batch.add_argument("--seed", type=int, default=0)
    batch.add_argument("--json", action="store_true")
    batch.set_defaults(func=_batch)

    ens = sub.add_parser("ensemble", help="ensemble sampling vs TS (Lu & Van Roy 5.1)")
    ens.add_argument("--arms", type=_positive_int("arms"), default=50)
    ens.add_argument("--horizon", type=_positive_int("horizon"), default=500)
    ens.add_argument("--problems", type=_positive_int("problems"), default=500)
    ens.add_argument("--models", type=_int_list("models"), default=[5, 10, 20, 30])
    ens.add_argument("--seed", type=int, default=0)
    ens.add_argument("--json", action="store_true")
    ens.set_defaults(func=_ensemble)
    return bandits


def main(argv=None) -> int:
    """Stand-alone entry point (``python -m subsample_mcmc.bandits.cli maes ...``)."""
    parser = argparse.ArgumentParser(prog="bandits")
    sub = parser.add_subparsers(dest="command", required=True)
    add_subparser(sub)
    import sys

    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(["bandits"] + argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
