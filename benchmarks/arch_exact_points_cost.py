"""What the model race's sums over its exactly-read points cost, and whether gathering their rows once would help.

    python benchmarks/arch_exact_points_cost.py [--data djia] [--rounds 9] [--calls 300]

Every racing sweep of ``ModelSelection`` on the ARCH job sums each of the K models' log-likelihoods over
the control variate's exactly-read points (``exact_fraction = 0.2`` of N: 7,580 of the DJIA's 37,900 rows,
``selection.py``'s ``race_exact_points``), each model at its parameters of this sweep.  The rows are
gathered from the data on every sweep.  Gathering them once per chain (keeping the ``[n_exact, 1 + max Q]``
rows in the state) was a candidate lever for the racing sweep's wall time; this script measured what it
could save on these sums alone before it was built (``arch_exact_rows_cost.py`` times it in the sweep, where
the MH race's proposal reads the same rows).  Four forms of the same K sums are jitted and timed in turn, ``--calls``
calls per round, ``--rounds`` rounds (median and per-round paired ratios):

* ``kernel``: as the kernel computes them, each model's NumPyro likelihood at the indices (its rows read from
  ``ArchData.series`` windows, as ``mcmc.run(key, y, series=series)`` runs the job);
* ``lag rows``: the same from the lag matrix's rows (``mcmc.run(key, y)``);
* ``pre-gathered``: the Student-t formula on rows gathered once, outside the timed call: the most a cached
  gather could save (no gather, no NumPyro trace);
* ``features``: each model's ``LinearFeatureControlVariate.log_likelihood_points`` on covariates gathered
  once (the control variate's own per-datum likelihood).

The indices are a fixed random 20% of the rows (the kernel's are the largest proxy residuals at pseudoprior
draws; the count is what sets the cost).  The four forms' sums are checked to agree before timing.  Writes
``benchmarks/results/arch_exact_points_cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from arch_sweep_cost import write_results
from subsample_mcmc import ModelSelection
from subsample_mcmc.models.arch import (DEFAULT_ORDERS, arch_control_variates, arch_models, load_returns, prepare,
                                        student_t_logpdf)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="djia")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--exact-fraction", type=float, default=0.2)
    ap.add_argument("--out", default="arch_exact_points_cost")
    args = ap.parse_args()
    orders = DEFAULT_ORDERS
    data = prepare(load_returns(args.data).returns, orders)
    y, series = jnp.asarray(data.y), jnp.asarray(data.series)
    n = y.shape[0]
    cvs = arch_control_variates(data.y, orders, exact_fraction=args.exact_fraction)
    kernel = ModelSelection(arch_models(orders), control_variate=cvs)
    kernel._setup((y,), {"series": series})
    names = kernel.names
    thetas = []
    for kern, q in zip(kernel.kernels, orders):
        values = {"alpha": jnp.full(q, 0.3 / q), "alpha0": jnp.asarray(0.5), "nu": jnp.asarray(5.0)}
        flat, kern._unravel = ravel_pytree(values)
        thetas.append(jnp.log(flat))  # unconstrained: the Gamma sites' support is positive (exp)
    rng = np.random.default_rng(0)
    exact = np.sort(rng.choice(n, int(np.floor(args.exact_fraction * n)), replace=False))
    idx = jnp.asarray(exact, jnp.int32)
    by_series = kernel._log_lik_fns((y,), {"series": series})
    by_rows = kernel._log_lik_fns((y,), {})
    rows = jnp.asarray(np.asarray(data.y)[exact])
    features = [(cvs[name].covariates[exact], cvs[name].response[exact]) for name in names]

    def sums(fns):
        return jax.jit(lambda thetas, idx: jnp.stack([jnp.sum(f(t, idx)) for f, t in zip(fns, thetas)]))

    def pre_gathered(thetas, rows):
        out = []
        for t, q in zip(thetas, orders):
            u = jnp.exp(t)  # ravel order: alpha [q], alpha0, nu
            s = u[q] + rows[:, 1:q + 1] @ u[:q]
            out.append(jnp.sum(student_t_logpdf(rows[:, 0], s, u[q + 1])))
        return jnp.stack(out)

    def by_features(thetas, features):
        out = []
        for name, kern, t, data_ex in zip(names, kernel.kernels, thetas, features):
            a = cvs[name].matrix(kern._subsampler.constrain(kern._unravel(t)))
            out.append(jnp.sum(cvs[name].log_likelihood_points(a, data=data_ex)))
        return jnp.stack(out)

    forms = {"kernel": (sums(by_series), idx), "lag rows": (sums(by_rows), idx),
             "pre-gathered": (jax.jit(pre_gathered), rows), "features": (jax.jit(by_features), features)}
    values = {k: np.asarray(f(thetas, a), np.float64) for k, (f, a) in forms.items()}
    for k, v in values.items():
        if not np.allclose(v, values["kernel"], rtol=1e-4):
            raise AssertionError(f"{k} sums {v} differ from the kernel's {values['kernel']}")

    def timed(f, a):
        jax.block_until_ready(f(thetas, a))
        t0 = time.perf_counter()
        for _ in range(args.calls):
            out = f(thetas, a)
        jax.block_until_ready(out)
        return (time.perf_counter() - t0) / args.calls * 1e3

    ms = {k: [] for k in forms}
    for _ in range(args.rounds):
        for k, (f, a) in forms.items():
            ms[k].append(timed(f, a))
    base = np.asarray(ms["kernel"])
    result = {"command": "python " + " ".join(shlex.quote(a) for a in sys.argv), "data": args.data, "n": int(n),
              "n_exact": int(exact.size), "orders": list(orders), "ms_per_call": ms, "forms": {}}
    lines = [f"# The model race's sums over its exactly-read points ({args.data}, N = {n:,}, "
             f"{exact.size:,} points, orders {list(orders)})", "",
             f"`{result['command']}` ({args.rounds} rounds of {args.calls} jitted calls, forms timed in turn; "
             "one call = the K sums one racing sweep computes)", "",
             "| form | ms per call (median) | over kernel, paired mean +- s.e. |", "|---|---|---|"]
    for k in forms:
        r = np.asarray(ms[k]) / base
        row = {"ms_median": float(np.median(ms[k])), "over_kernel_mean": float(r.mean()),
               "over_kernel_stderr": float(r.std(ddof=1) / np.sqrt(r.size))}
        result["forms"][k] = row
        lines.append(f"| {k} | {row['ms_median']:.3f} | {row['over_kernel_mean']:.3f} +- "
                     f"{row['over_kernel_stderr']:.3f} |")
    write_results(args.out, result, lines)


if __name__ == "__main__":
    main()
