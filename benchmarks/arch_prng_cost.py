"""What the PRNG implementation of the chain's key costs a ModelSelection sweep (DJIA ARCH job).

    python benchmarks/arch_prng_cost.py [--sweeps 200] [--rounds 9] [--starts 3] [--impls rbg]

Every random number a sweep draws (pseudoprior draws, the MH proposal and its ``u``, the Gumbel noise
and index streams of the races) comes from ``state.rng_key`` by ``jax.random`` calls, which dispatch on
the key's implementation.  A NumPyro user chooses it: ``jax.random.PRNGKey(0)`` / ``jax.random.key(0)``
is threefry2x32 (JAX's default), ``jax.random.key(0, impl="rbg")`` draws its bits with XLA's
``RngBitGenerator`` (splits and fold-ins still threefry).

Each sampler (racing and exact ``ModelSelection``, shared Laplace pseudopriors, the shipped control
variates) runs ``--warmup`` + 50 sweeps in NumPyro's ``MCMC`` with a typed threefry key.  From its
post-warmup state, ``--starts`` keys (the state's key folded with 0, 1, ...) start one ``fori_loop`` of
``--sweeps`` sweeps each, once with the key as it is (threefry) and once re-wrapped in each of ``--impls``
(its two words and their xor with a constant as the four words of an ``rbg`` key); every loop is
compiled once and the loops are timed in turn for ``--rounds`` rounds (paired: this machine's clock
drifts by tens of percent).  A loop also sums the sweeps' likelihood evaluations and counts model
switches, so a time difference that comes from a different path (another model, longer races) shows.
Reported per sampler and implementation: median ms per sweep, evaluations per sweep over N, and the ratio
to threefry from the same start (mean and s.e. over rounds and starts).

Writes ``benchmarks/results/arch_prng_cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import gc
import shlex
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

from subsample_mcmc import ModelSelection
from subsample_mcmc.models.arch import DEFAULT_ORDERS, arch_control_variates, arch_models, load_returns, prepare

from arch_sweep_cost import write_results  # benchmarks/ is the script's folder


def rewrap(state, impl: str):
    """``state`` with every typed key re-wrapped as an ``impl`` key (threefry: unchanged)."""
    def conv(k):
        if impl == "threefry2x32" or not jax.dtypes.issubdtype(getattr(k, "dtype", np.float32), jax.dtypes.prng_key):
            return k
        d = jax.random.key_data(k)
        return jax.random.wrap_key_data(jnp.concatenate([d, d ^ jnp.uint32(0x9E3779B9)], -1), impl=impl)
    return jax.tree.map(conv, state)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="djia")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--sweeps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--impls", default="rbg", help="comma-separated JAX PRNG implementations beside threefry2x32")
    ap.add_argument("--out", default="arch_prng_cost")
    args = ap.parse_args()
    impls = ["threefry2x32"] + [s.strip() for s in args.impls.split(",") if s.strip()]
    orders = DEFAULT_ORDERS
    y = np.asarray(prepare(load_returns(args.data).returns, orders).y)
    n = y.shape[0]
    models = arch_models(orders)
    fitter = ModelSelection(models, pseudoprior="laplace")
    pseudopriors = fitter.pseudopriors(fitter.init(jax.random.key(10_000), args.warmup, None, (y,), None))
    del fitter
    loops = {}
    for sampler, method in (("racing", "normal"), ("exact", "exact")):
        cv = arch_control_variates(y, orders) if method != "exact" else None
        kernel = ModelSelection(models, method=method, pseudoprior=pseudopriors, control_variate=cv, check_decisions=0)
        mcmc = MCMC(kernel, num_warmup=args.warmup, num_samples=50, progress_bar=False)
        mcmc.run(jax.random.key(0), y)
        state = mcmc.last_state

        def body(_, carry, kernel=kernel):
            st, evals, switches, d = carry
            new = kernel.sample(st, (d,), {})
            return (new, evals + new.num_likelihood_evals.astype(jnp.float32),
                    switches + (new.z["model"] != st.z["model"]).astype(jnp.float32), d)

        run = jax.jit(lambda s, d, body=body: jax.lax.fori_loop(0, args.sweeps, body, (s, 0.0, 0.0, d))[1:3])
        for start in range(args.starts):
            base = state._replace(rng_key=jax.random.fold_in(state.rng_key, start))
            for impl in impls:
                st = rewrap(base, impl)
                loops[(sampler, impl, start)] = (run.lower(st, y).compile(), st)
        print(f"{sampler}: compiled", flush=True)
        del mcmc
        jax.clear_caches()
        gc.collect()
    times = {key: [] for key in loops}
    paths = {}
    for _ in range(args.rounds):
        for key, (loop, st) in loops.items():
            t0 = time.perf_counter()
            evals, switches = jax.block_until_ready(loop(st, y))
            times[key].append((time.perf_counter() - t0) / args.sweeps * 1e3)
            paths[key] = (float(evals) / args.sweeps / n, int(switches))
    result = {"data": args.data, "n": int(n), "orders": list(orders), "args": vars(args), "samplers": {}}
    lines = [f"# ms per ModelSelection sweep by the key's PRNG implementation ({args.data}, N = {n:,}, orders "
             f"{list(orders)}, Laplace pseudopriors)", "",
             f"`python {shlex.join(sys.argv)}`: {args.starts} starts from each sampler's post-warmup state, one "
             f"compiled loop of {args.sweeps} sweeps per start and implementation, loops timed in turn for "
             f"{args.rounds} rounds. Ratio: ms per sweep over threefry's from the same start and round, mean +- s.e. "
             "over rounds and starts.", "",
             "| sampler | key | ms/sweep (median) | evals/sweep / N (per start) | model switches (per start) | "
             "over threefry |", "|---|---|---|---|---|---|"]
    for sampler in ("racing", "exact"):
        rows = {}
        for impl in impls:
            keys = [(sampler, impl, s) for s in range(args.starts)]
            ratios = np.concatenate([np.array(times[k]) / np.array(times[(sampler, "threefry2x32", k[2])])
                                     for k in keys])
            ms = np.concatenate([times[k] for k in keys])
            rows[impl] = {"ms_per_sweep": float(np.median(ms)),
                          "evaluations_per_sweep_over_n": [paths[k][0] for k in keys],
                          "model_switches": [paths[k][1] for k in keys],
                          "over_threefry": {"mean": float(ratios.mean()),
                                            "stderr": float(ratios.std(ddof=1) / np.sqrt(ratios.size))},
                          "ms_per_sweep_all": {str(k[2]): times[k] for k in keys}}
            r = rows[impl]
            lines.append(f"| {sampler} | {impl} | {r['ms_per_sweep']:.2f} | "
                         f"{', '.join(f'{v:.2f}' for v in r['evaluations_per_sweep_over_n'])} | "
                         f"{', '.join(str(v) for v in r['model_switches'])} | "
                         f"{r['over_threefry']['mean']:.3f} +- {r['over_threefry']['stderr']:.3f} |")
        result["samplers"][sampler] = rows
    write_results(args.out, result, lines)


if __name__ == "__main__":
    main()
