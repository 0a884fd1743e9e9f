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


def _checked_key(env, horizon, seed):
    """The PRNG key of ``--seed`` after checking ``--horizon`` against the arms."""
    import jax

    from .simulate import check_horizon

    try:
        check_horizon(env, horizon)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}")
    return jax.random.PRNGKey(seed)


def _run(rows, pol, env, args, key, extra=None, **fields):
    """Simulate ``pol`` on ``--problems`` problems, append its output row (``fields``,
    the regret, and ``extra(result)``) to ``rows``; return the result."""
    from .simulate import simulate

    t0 = time.perf_counter()
    res = simulate(pol, env, args.horizon, key, args.problems,
                   num_runs=getattr(args, "runs", 1))
    rows.append(dict(fields, horizon=args.horizon, problems=args.problems,
                     mean_regret=res.mean, stderr=res.stderr,
                     seconds=time.perf_counter() - t0, **(extra(res) if extra else {})))
    return res


def _maes(args) -> int:
    from .environments import bernoulli, truncated_gaussian
    from .registry import parse_policy

    env = bernoulli(2) if args.distribution == "bernoulli" else truncated_gaussian(2)
    names = [p for p in args.policies.split(",") if p.strip()]
    if not names:
        raise SystemExit("--policies: give at least one policy name")
    try:
        policies = [parse_policy(n) for n in names]
    except ValueError as exc:
        raise SystemExit(f"error: {exc}")
    key, rows = _checked_key(env, args.horizon, args.seed), []
    for policy in policies:
        _run(rows, policy, env, args, key, policy=policy.name, distribution=args.distribution,
             runs=args.runs)
    _emit(args, rows, f"Maes et al. protocol: 2 arms, {args.distribution}, T={args.horizon}")
    return 0


def _batch(args) -> int:
    import math

    from .environments import bernoulli
    from .thompson import dynamic_batch, static_batch, ts_beta

    env = bernoulli(args.arms)
    key, rows = _checked_key(env, args.horizon, args.seed), []

    def run(name, policy):
        return _run(rows, policy, env, args, key, policy=name, arms=args.arms,
                    extra=lambda r: dict(batches=float(r.num_batches.mean())))

    run("TS", ts_beta())
    b = run("B-TS", dynamic_batch(ts_beta()))
    nb = max(1, int(round(float(b.num_batches.mean()))))
    for factor, name in ((1, "Static-TS"), (2, "Static-TS-2"), (4, "Static-TS-4")):
        run(name, static_batch(ts_beta(), max(1, math.ceil(args.horizon / (factor * nb)))))
    _emit(args, rows, f"Batch TS (Karbasi et al. Sec. 7): Bernoulli, N={args.arms}, T={args.horizon}")
    return 0


def _ensemble(args) -> int:
    from .ensemble import ensemble_gaussian
    from .environments import gaussian
    from .thompson import ts_gaussian

    env = gaussian(args.arms)
    key, rows = _checked_key(env, args.horizon, args.seed), []
    for m, policy in [(0, ts_gaussian())] + [(m, ensemble_gaussian(m)) for m in args.models]:
        _run(rows, policy, env, args, key, policy=f"ES-{m}" if m else "TS", models=m,
             extra=lambda r: dict(per_period=r.mean / args.horizon))
    _emit(args, rows, f"Ensemble sampling (Lu & Van Roy 5.1): {args.arms} Gaussian arms, "
                      f"T={args.horizon}")
    return 0


def _common(parser, func):
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=func)


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
    _common(maes, _maes)

    batch = sub.add_parser("batch", help="TS vs batch TS vs static batches (Karbasi et al.)")
    batch.add_argument("--arms", type=_positive_int("arms"), default=10)
    batch.add_argument("--horizon", type=_positive_int("horizon"), default=1000)
    batch.add_argument("--problems", type=_positive_int("problems"), default=1000)
    _common(batch, _batch)

    ens = sub.add_parser("ensemble", help="ensemble sampling vs TS (Lu & Van Roy 5.1)")
    ens.add_argument("--arms", type=_positive_int("arms"), default=50)
    ens.add_argument("--horizon", type=_positive_int("horizon"), default=500)
    ens.add_argument("--problems", type=_positive_int("problems"), default=500)
    ens.add_argument("--models", type=_int_list("models"), default=[5, 10, 20, 30])
    _common(ens, _ensemble)
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
