"""RacingMH on a likelihood whose support moves with the parameters: the mode search's polish along the
edge, against a baseline revision, over seeds.

The model is a shifted exponential written as a ``numpyro.factor`` (``log rate - rate (y - loc)`` for
``y > loc``, ``-inf`` below; ``loc ~ Normal(0, 10)``, ``rate ~ Gamma(2, 1)``), ``y = 3 + Exponential(rate
2)``, N = 20,000, NumPy float64 data by keyword, ``RacingMH(model)`` defaults, 2 vectorized chains, 500
warmup + 1,000 draws.  Its posterior mode lies on the edge ``loc = min(y)``, so the chains sample by the
exact MH step (``support_boundary``).  Given ``loc = min(y)``, ``rate`` is ``Gamma(2 + N, 1 + sum(y -
min y))``: its log has mode ``log(a / b)`` and sd ``1 / sqrt(a)``.

Recorded per seed and revision: the chains' initial centre of ``log rate`` in those sds from the mode,
the initial mass matrix's variance of ``log rate`` against ``1 / a``, R-hat and bulk ESS of ``rate``
(NumPyro's diagnostics over the two chains), the posterior mean of ``rate`` in sds from ``a / b``, and
the number of draws with a datum outside the support (``loc > min(y)``).  Each run is a fresh process
(:func:`compile_time.run_worker`); the baseline is a ``git worktree`` of ``--baseline``.

    python benchmarks/support_edge.py --baseline b7f7870 --seeds 4   # -> results/support_edge.{json,md}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
from pathlib import Path

from compile_time import ROOT, baseline_worktree, head_label, mean_se, run_worker, write_results

HERE = Path(__file__).resolve().parent


def _worker(seed: int) -> dict:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    from numpyro.diagnostics import effective_sample_size, split_gelman_rubin
    from numpyro.infer import MCMC

    import subsample_mcmc
    from subsample_mcmc import RacingMH

    def model(y=None):
        loc = numpyro.sample("loc", dist.Normal(0.0, 10.0))
        rate = numpyro.sample("rate", dist.Gamma(2.0, 1.0))
        with numpyro.plate("data", y.shape[0]):
            numpyro.factor("ll", jnp.where(y > loc, jnp.log(rate) - rate * (y - loc), -jnp.inf))

    rng = np.random.default_rng(seed)
    y = 3.0 + rng.exponential(0.5, 20_000)
    a, b = 2.0 + y.size, 1.0 + np.sum(y - y.min())
    t0 = time.perf_counter()
    mcmc = MCMC(RacingMH(model), num_warmup=500, num_samples=1000, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(seed), y=y)
    state = mcmc.last_state
    rate = np.asarray(mcmc.get_samples(group_by_chain=True)["rate"], np.float64)
    loc = np.asarray(mcmc.get_samples()["loc"], np.float64)
    inv_mass = np.asarray(state.inverse_mass_matrix, np.float64)
    log_rate_var = inv_mass[:, 1, 1] if inv_mass.ndim == 3 else inv_mass[:, 1]
    return {
        "seed": seed,
        "package": os.path.dirname(subsample_mcmc.__file__),
        "exact_mode": np.asarray(state.exact_mode).tolist(),
        "centre_log_rate_sds": ((np.asarray(state.center, np.float64)[:, 1] - np.log(a / b)) * np.sqrt(a)).tolist(),
        "log_rate_variance_ratio": (log_rate_var * a).tolist(),
        "rate_r_hat": float(split_gelman_rubin(rate)),
        "rate_ess": float(effective_sample_size(rate)),
        "rate_mean_sds": float((rate.mean() - a / b) / (np.sqrt(a) / b)),
        "draws_outside_support": int(np.sum(loc > y.min())),
        "warnings": sorted({str(w.message)[:120] for w in caught}),
        "wall_seconds": time.perf_counter() - t0,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", help="git revision to compare against")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--output", type=Path, default=HERE / "results" / "support_edge")
    args = ap.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(_worker(args.worker)))
        return
    revisions = {"current": ROOT}
    runs = {"current": []}
    with baseline_worktree(args.baseline) if args.baseline else contextlib.nullcontext() as base:
        if base is not None:
            revisions["baseline"], runs["baseline"] = base, []
        for seed in range(args.seeds):
            for label, source in revisions.items():
                r = run_worker(__file__, ["--worker", str(seed)], source)
                runs[label].append(r)
                print(f"seed {seed} {label:8s} R-hat {r['rate_r_hat']:.3f} ESS {r['rate_ess']:.0f} centre "
                      f"{[round(c, 1) for c in r['centre_log_rate_sds']]} sds, outside {r['draws_outside_support']}",
                      flush=True)
    summary = {"current": head_label(), "baseline": args.baseline, "seeds": args.seeds, "runs": runs, "results": {}}
    lines = [f"# RacingMH at a support edge: {summary['current']}"
             + (f" against {args.baseline}" if args.baseline else ""), "",
             f"`python benchmarks/support_edge.py{' --baseline ' + args.baseline if args.baseline else ''} "
             f"--seeds {args.seeds}`: shifted exponential as a factor, N = 20,000, `RacingMH(model)` defaults, "
             "2 vectorized chains, 500 + 1,000 draws; mean ± s.e. over seeds (max for the centre offset).", "",
             "| revision | R-hat(rate) | bulk ESS(rate) | max abs centre of log rate (sds from mode) | "
             "log-rate mass variance x a | mean rate (sds from exact) | draws outside support |",
             "|---|---|---|---|---|---|---|"]
    for label, rs in runs.items():
        rh, ess = mean_se([r["rate_r_hat"] for r in rs]), mean_se([r["rate_ess"] for r in rs])
        centre = max(abs(c) for r in rs for c in r["centre_log_rate_sds"])
        var = mean_se([v for r in rs for v in r["log_rate_variance_ratio"]])
        mean = mean_se([r["rate_mean_sds"] for r in rs])
        summary["results"][label] = {"rate_r_hat": rh, "rate_ess": ess, "max_centre_sds": centre, "variance_ratio": var,
                          "rate_mean_sds": mean, "draws_outside_support": sum(r["draws_outside_support"] for r in rs)}
        lines.append(f"| {label} ({summary['current'] if label == 'current' else args.baseline}) | "
                     f"{rh[0]:.2f} ± {rh[1]:.2f} | {ess[0]:.0f} ± {ess[1]:.0f} | {centre:.2f} | "
                     f"{var[0]:.3g} ± {var[1]:.2g} | {mean[0]:.2f} ± {mean[1]:.2f} | "
                     f"{summary['results'][label]['draws_outside_support']} |")
    write_results(args.output, summary, lines)


if __name__ == "__main__":
    sys.exit(main())
