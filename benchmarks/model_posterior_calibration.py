"""Are ``model_posterior``'s probabilities unbiased and its standard errors right?  A calibration study on
the closed-form instance (polynomial degree 1-3, conjugate Gaussian priors, known noise), with the cubic
coefficient set so that degrees 2 and 3 are equally probable (``benchmarks/model_selection.py``'s data).

Per data set (fresh data), ``ModelSelection(models)`` (defaults) and ``method="exact"`` each run ``--chains``
independent vectorized chains (one compile); every chain is a replicate: its own ``p_hat`` and standard
error (``subsample_mcmc.kernels.product_space.model_probabilities``, what ``model_posterior`` computes for
one chain) and ``z = (p_hat - p) / stderr`` for degree 3 against the closed form ``p``.  If the estimate is
unbiased and its standard error right, ``z`` has mean 0 and standard deviation 1 over replicates.  Two
standard errors of the same delta method are compared: ArviZ's MCSE of the mean of the estimator's
influence series ``psi_t = w_{k_t} (1{k_t = 3} - p_hat) / (w . f)`` (Geyer's initial sequence; the default
of ``model_posterior``) and batch means with ``sqrt(S)`` batches (``num_batches``).

    python benchmarks/model_posterior_calibration.py [--n 5000] [--datasets 3] [--chains 16] [--x64]
    # -> results/model_posterior_calibration[_x64].{json,md}
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main() -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--datasets", type=int, default=3)
    parser.add_argument("--chains", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--x64", action="store_true", help="run with jax_enable_x64 (float64 likelihoods)")
    args = parser.parse_args()
    import jax

    if args.x64:
        jax.config.update("jax_enable_x64", True)
    import numpy as np
    from numpyro.infer import MCMC

    from model_selection import DEGREES, balanced_data
    from subsample_mcmc import ModelSelection
    from subsample_mcmc.kernels.product_space import model_probabilities
    from subsample_mcmc.models import polynomial as pm

    warnings.simplefilter("ignore")
    t0 = time.time()
    rows = []
    for data_set in range(args.datasets):
        x, y, _, exact = balanced_data(args.n, 1000 + data_set)
        per = {}
        for method in ("racing", "exact"):
            kernel = ModelSelection(pm.polynomial_models(DEGREES), **({} if method == "racing" else {"method": "exact"}))
            mcmc = MCMC(kernel, num_warmup=args.warmup, num_samples=args.samples, num_chains=args.chains,
                        chain_method="vectorized", progress_bar=False)
            mcmc.run(jax.random.PRNGKey(data_set), x, y)
            models = np.asarray(mcmc.get_samples(group_by_chain=True)["model"])
            adjust = np.asarray(mcmc.last_state.log_prior_adjustment, np.float64).reshape(args.chains, -1)
            per[method] = []
            for c in range(args.chains):
                _, se_bm = model_probabilities(models[c], adjust[c], len(DEGREES), int(np.sqrt(args.samples)))
                p, se = model_probabilities(models[c], adjust[c], len(DEGREES))  # model_posterior's default
                per[method].append({"p": float(p[2]), "stderr_batch_means": float(se_bm[2]),
                                    "stderr_influence": float(se[2]),
                                    "z_batch_means": float((p[2] - exact[2]) / se_bm[2]),
                                    "z_influence": float((p[2] - exact[2]) / se[2])})
            z = [r["z_influence"] for r in per[method]]
            print(data_set, method, f"p {np.mean([r['p'] for r in per[method]]):.4f} vs {exact[2]:.4f}, "
                  f"z mean {np.mean(z):+.2f} sd {np.std(z, ddof=1):.2f}", flush=True)
            jax.clear_caches()  # one compile per run: keep the process's memory mappings bounded
            gc.collect()
        for c in range(args.chains):
            rows.append({"data_set": data_set, "chain": c, "closed_form": exact.tolist(),
                         "racing": per["racing"][c], "exact": per["exact"][c]})
    summary = {}
    for method in ("racing", "exact"):
        out = {}
        for key in ("z_batch_means", "z_influence"):
            z = np.array([r[method][key] for r in rows])
            r_ = len(z)
            out[key] = {"mean": float(z.mean()), "mean_se": float(z.std(ddof=1) / np.sqrt(r_)),
                        "sd": float(z.std(ddof=1)), "sd_se": float(z.std(ddof=1) / np.sqrt(2 * (r_ - 1))),
                        "coverage_2se": float(np.mean(np.abs(z) < 2))}
        err = np.array([r[method]["p"] - r["closed_form"][2] for r in rows])
        out["error"] = {"mean": float(err.mean()), "mean_se": float(err.std(ddof=1) / np.sqrt(len(err))),
                        "rms": float(np.sqrt(np.mean(err ** 2)))}
        out["mean_stderr_batch_means"] = float(np.mean([r[method]["stderr_batch_means"] for r in rows]))
        out["mean_stderr_influence"] = float(np.mean([r[method]["stderr_influence"] for r in rows]))
        summary[method] = out
    result = {"n": args.n, "datasets": args.datasets, "chains": args.chains, "warmup": args.warmup, "samples": args.samples,
              "x64": args.x64, "seconds": time.time() - t0, "summary": summary, "rows": rows}
    name = "model_posterior_calibration" + ("_x64" if args.x64 else "")
    (HERE / "results" / f"{name}.json").write_text(json.dumps(result, indent=1))
    lines = [f"# Calibration of model_posterior: polynomial degree (1, 2, 3), N = {args.n:,}, "
             f"{args.datasets} data sets x {args.chains} chains{' (x64)' if args.x64 else ''}", "",
             f"`python benchmarks/model_posterior_calibration.py --n {args.n} --datasets {args.datasets} --chains "
             f"{args.chains}{' --x64' if args.x64 else ''}`; {args.warmup} warmup, {args.samples} draws per chain, "
             "each chain a replicate (p(degree 2) = p(degree 3) in closed form for each data set); "
             f"{result['seconds'] / 60:.0f} min. z = (p_hat - p) / stderr for degree 3; unbiased estimates with "
             "right standard errors give mean 0, sd 1, 95% of |z| < 2.", "",
             "| sampler | standard error | mean z | sd z | share of abs(z) < 2 | mean stderr | mean error p_hat - p "
             "| rms error |", "|---|---|---|---|---|---|---|---|"]
    for method in ("racing", "exact"):
        s = summary[method]
        for key, label, se_key in (("z_batch_means", "batch means, sqrt(S) batches", "mean_stderr_batch_means"),
                                   ("z_influence", "ArviZ MCSE of the influence series (model_posterior)",
                                    "mean_stderr_influence")):
            z = s[key]
            lines.append(f"| {method} | {label} | {z['mean']:+.2f} ± {z['mean_se']:.2f} | {z['sd']:.2f} ± "
                         f"{z['sd_se']:.2f} | {z['coverage_2se']:.2f} | {s[se_key]:.4f} | "
                         f"{s['error']['mean']:+.4f} ± {s['error']['mean_se']:.4f} | {s['error']['rms']:.4f} |")
    (HERE / "results" / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
