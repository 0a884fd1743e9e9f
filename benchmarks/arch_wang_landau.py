"""Fig. 2(b) quantified: likelihood evaluations until the Wang-Landau estimate of log p(q|r) settles.

On the S&P 500 series, both samplers adapt ``pi~`` from a uniform start (Sec. 5.2).  For
each chain we record the cumulative likelihood evaluations after which the estimate
``log pi(q) - log pi~(q)`` (normalised) stays within ``--tol`` nats of a reference for every
order whose reference log posterior is above ``--floor``.  The reference is the final
estimate of a long exact adaptation (``--reference-iters``).

    python benchmarks/arch_wang_landau.py
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from subsample_mcmc.models.arch import load_returns, prepare
from subsample_mcmc.models.arch_sampler import ArchOrderSampler


def settle_point(est, cum, ref, mask, tol):
    """First cumulative-evaluation count after which |est - ref| <= tol on ``mask`` for good."""
    err = np.abs(est[:, mask] - ref[mask]).max(axis=1)
    bad = np.nonzero(err > tol)[0]
    if len(bad) == 0:
        return float(cum[0])
    if bad[-1] == len(err) - 1:
        return float("nan")
    return float(cum[bad[-1] + 1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--reference-iters", type=int, default=6000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--tol", type=float, default=1.0)
    ap.add_argument("--floor", type=float, default=-10.0)
    ap.add_argument("--output", default="benchmarks/results/arch_wang_landau.json")
    args = ap.parse_args()
    data = prepare(load_returns("sp500").returns)
    smp = ArchOrderSampler(data)
    ref_run = smp.run(123, method="exact", num_adapt=args.reference_iters, num_samples=1, num_chains=1, progress_bar=False)
    ref = ref_run.estimated_log_posterior_adaptive()[0, -1]
    ref = np.asarray(ref)
    mask = ref > args.floor
    out = {"reference": ref.tolist(), "orders": list(data.orders), "tol": args.tol, "floor": args.floor,
           "iters": args.iters, "chains": args.chains, "settle_evaluations": {}}
    for method in ("exact", "racing"):
        run = smp.run(0, method=method, num_adapt=args.iters, num_samples=1, num_chains=args.chains, progress_bar=False)
        est = np.asarray(run.estimated_log_posterior_adaptive())
        pts = [settle_point(est[c], np.cumsum(run.adapt_evals[c]), ref, mask, args.tol) for c in range(args.chains)]
        out["settle_evaluations"][method] = pts
        print(f"{method:6s}: evaluations until within {args.tol} nat of the reference: {[f'{p:.3g}' for p in pts]} "
              f"(median {np.nanmedian(pts):.3g}); evaluations per iteration {run.adapt_evals.mean() / smp.num_data:.2f} N")
    med = {m: float(np.nanmedian(v)) for m, v in out["settle_evaluations"].items()}
    out["median_ratio_exact_over_racing"] = med["exact"] / med["racing"]
    print(f"median ratio exact / racing: {out['median_ratio_exact_over_racing']:.2f}")
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as fh:
        json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
