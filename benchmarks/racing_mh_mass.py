"""RacingMH's mass matrix: the full-data Laplace covariance at the mode, dense or diagonal,
kept or re-estimated from the warmup draws (Welford), over models of the test zoo.

For each model and variant, ``SEEDS`` runs (2 vectorized chains, the zoo's warmup and
sample sizes, NumPy inputs); per run the minimum bulk ESS over all scalar components of
the latent sites (ArviZ) and the max split R-hat.  Reported: mean and standard error
over seeds of min-ESS per 1,000 draws, the mean max R-hat, and the ratio of each
variant's mean min-ESS to the old default's (diagonal, re-estimated), measured in the
same run.

    python benchmarks/racing_mh_mass.py            # writes benchmarks/results/racing_mh_mass.{json,md}
"""

from __future__ import annotations

import json
import os
import sys
import time

import arviz as az
import jax
import numpy as np
from numpyro.infer import MCMC

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from subsample_mcmc import RacingMH  # noqa: E402
from zoo import ZOO_BY_NAME  # noqa: E402

MODELS = ("gaussian_mixture", "weibull_survival", "logistic_regression")
VARIANTS = {  # name: RacingMH options
    "diagonal, re-estimated (old default)": dict(dense_mass=False, adapt_mass_matrix=True),
    "diagonal, Laplace kept": dict(dense_mass=False, adapt_mass_matrix=False),
    "dense, Laplace kept (default)": {},
}
SEEDS = int(os.environ.get("MASS_SEEDS", 3))


def one_run(entry, options, seed):
    args, kwargs = entry.data()
    kernel = RacingMH(entry.model, **options)
    mcmc = MCMC(kernel, num_warmup=entry.num_warmup, num_samples=entry.num_samples, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    start = time.time()
    mcmc.run(jax.random.PRNGKey(seed), *args, **kwargs)
    seconds = time.time() - start
    idata = az.from_numpyro(mcmc, log_likelihood=False)
    ess, rhat = az.ess(idata), az.rhat(idata)
    min_ess = min(float(ess[v].min()) for v in ess.data_vars)
    max_rhat = max(float(rhat[v].max()) for v in rhat.data_vars)
    return {"min_ess_per_1000": 1000.0 * min_ess / (2 * entry.num_samples), "max_rhat": max_rhat,
            "seconds": seconds}


def main():
    import warnings

    warnings.simplefilter("ignore")
    results = {"seeds": SEEDS, "models": {}}
    for name in MODELS:
        entry = ZOO_BY_NAME[name]
        ctx = jax.enable_x64(True) if entry.x64 else None
        if ctx:
            ctx.__enter__()
        rows = {}
        for variant, options in VARIANTS.items():
            runs = [one_run(entry, options, seed) for seed in range(SEEDS)]
            e = np.array([r["min_ess_per_1000"] for r in runs])
            rows[variant] = {"runs": runs, "min_ess_per_1000_mean": float(e.mean()),
                             "min_ess_per_1000_se": float(e.std(ddof=1) / np.sqrt(len(e))),
                             "max_rhat_mean": float(np.mean([r["max_rhat"] for r in runs]))}
            print(name, variant, f"{e.mean():.1f} +- {rows[variant]['min_ess_per_1000_se']:.1f}", flush=True)
        if ctx:
            ctx.__exit__(None, None, None)
        base = rows["diagonal, re-estimated (old default)"]["min_ess_per_1000_mean"]
        for row in rows.values():
            row["ratio_to_old_default"] = row["min_ess_per_1000_mean"] / base
        results["models"][name] = {"kind": entry.kind, "N": entry.plate_size, "variants": rows}
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "racing_mh_mass.json"), "w") as f:
        json.dump(results, f, indent=1)
    lines = ["# RacingMH mass matrix: min bulk ESS per 1,000 draws (mean +- s.e. over "
             f"{SEEDS} seeds, 2 chains each)", "",
             "`python benchmarks/racing_mh_mass.py`; models from `tests/zoo.py` (NumPy inputs, the zoo's sizes).", "",
             "| model | variant | min ESS / 1000 draws | ratio to old default | mean max R-hat |",
             "|---|---|---|---|---|"]
    for name, m in results["models"].items():
        for variant, row in m["variants"].items():
            lines.append(f"| {name} (N={m['N']}) | {variant} | {row['min_ess_per_1000_mean']:.1f} +- "
                         f"{row['min_ess_per_1000_se']:.1f} | {row['ratio_to_old_default']:.2f} | "
                         f"{row['max_rhat_mean']:.3f} |")
    with open(os.path.join(out, "racing_mh_mass.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
