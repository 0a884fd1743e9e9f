"""RacingMH's variants over models of the test zoo (models it was not tuned on):

* ``--study mass`` (default): the mass matrix -- the full-data Laplace covariance at the
  mode, dense or diagonal, kept or re-estimated from the warmup draws (Welford); random
  walk proposal throughout (the default proposal when this study was first run);
* ``--study proposal``: the proposal -- ``RacingMH(model)`` with no options (preconditioned
  Crank-Nicolson around the Laplace approximation) against the random walk and Langevin.

For each model and variant, ``SEEDS`` runs (2 vectorized chains, the zoo's warmup and
sample sizes, NumPy inputs); per run the minimum bulk ESS over all scalar components of
the latent sites (ArviZ) and the max split R-hat.  Reported: mean and standard error
over seeds of min-ESS per 1,000 draws, the mean max R-hat, and the ratio of each
variant's mean min-ESS to the baseline's, measured in the same run; the proposal study
adds min-ESS per second of ``mcmc.run`` (init, compilation, warmup and sampling: what a
user waits for) and the mean per-datum likelihood evaluations per step.

    python benchmarks/racing_mh_mass.py                    # benchmarks/results/racing_mh_mass.{json,md}
    python benchmarks/racing_mh_mass.py --study proposal   # benchmarks/results/racing_mh_proposal.{json,md}
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

RW = dict(proposal="random_walk")
STUDIES = {  # name: (models, {variant: RacingMH options}, baseline variant)
    "mass": (("gaussian_mixture", "weibull_survival", "logistic_regression"), {
        "diagonal, re-estimated (old default)": dict(RW, dense_mass=False, adapt_mass_matrix=True),
        "diagonal, Laplace kept": dict(RW, dense_mass=False, adapt_mass_matrix=False),
        "dense, Laplace kept (default)": RW,
    }, "diagonal, re-estimated (old default)"),
    "proposal": (("logistic_regression", "poisson_exposure", "negative_binomial", "robust_student_t",
                  "weibull_survival", "gaussian_mixture", "ordinal_regression"), {
        "random walk (old default)": RW,
        "langevin": dict(proposal="langevin"),
        "RacingMH(model): Crank-Nicolson (default)": {},
    }, "random walk (old default)"),
}
SEEDS = int(os.environ.get("MASS_SEEDS", 3))


def one_run(entry, options, seed):
    args, kwargs = entry.data()
    kernel = RacingMH(entry.model, **options)
    mcmc = MCMC(kernel, num_warmup=entry.num_warmup, num_samples=entry.num_samples, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    start = time.time()
    mcmc.run(jax.random.PRNGKey(seed), *args, extra_fields=("num_likelihood_evals",), **kwargs)
    seconds = time.time() - start
    idata = az.from_numpyro(mcmc, log_likelihood=False)
    ess, rhat = az.ess(idata), az.rhat(idata)
    min_ess = min(float(ess[v].min()) for v in ess.data_vars)
    max_rhat = max(float(rhat[v].max()) for v in rhat.data_vars)
    return {"min_ess_per_1000": 1000.0 * min_ess / (2 * entry.num_samples), "max_rhat": max_rhat,
            "seconds": seconds, "min_ess_per_second": min_ess / seconds,
            "evals_per_step": float(np.mean(mcmc.get_extra_fields()["num_likelihood_evals"])),
            "exact_mode": float(np.mean(mcmc.last_state.exact_mode))}


def _mean_se(values):
    v = np.asarray(values, float)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")


def main():
    import argparse
    import warnings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", choices=sorted(STUDIES), default="mass")
    parser.add_argument("--models", nargs="+", default=None, help="a subset of the study's models")
    cli = parser.parse_args()
    study = cli.study
    models, variants, baseline = STUDIES[study]
    models = models if cli.models is None else tuple(cli.models)
    warnings.simplefilter("ignore")
    results = {"study": study, "seeds": SEEDS, "command": " ".join(sys.argv), "models": {}}
    for name in models:
        entry = ZOO_BY_NAME[name]
        ctx = jax.enable_x64(True) if entry.x64 else None
        if ctx:
            ctx.__enter__()
        rows = {}
        for variant, options in variants.items():
            runs = [one_run(entry, options, seed) for seed in range(SEEDS)]
            row = {"runs": runs, "max_rhat_mean": float(np.mean([r["max_rhat"] for r in runs]))}
            for key in ("min_ess_per_1000", "min_ess_per_second", "evals_per_step", "exact_mode"):
                row[key + "_mean"], row[key + "_se"] = _mean_se([r[key] for r in runs])
            rows[variant] = row
            print(name, variant, f"{row['min_ess_per_1000_mean']:.1f} +- {row['min_ess_per_1000_se']:.1f}",
                  flush=True)
        if ctx:
            ctx.__exit__(None, None, None)
        base = rows[baseline]
        for row in rows.values():
            row["ratio_to_old_default"] = row["min_ess_per_1000_mean"] / base["min_ess_per_1000_mean"]
            row["ratio_per_second"] = row["min_ess_per_second_mean"] / base["min_ess_per_second_mean"]
        results["models"][name] = {"kind": entry.kind, "N": entry.plate_size, "variants": rows}
        write(results, study)  # after every model: a crash keeps what was measured


def write(results, study):
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"racing_mh_{study}.json"), "w") as f:
        json.dump(results, f, indent=1)
    lines = [f"# RacingMH {study}: min bulk ESS per 1,000 draws (mean +- s.e. over "
             f"{SEEDS} seeds, 2 chains each)", "",
             f"`python benchmarks/racing_mh_mass.py --study {study}`; models from `tests/statistical/zoo.py` (NumPy inputs, "
             "the zoo's sizes); ratios to the baseline variant, measured in the same run.", ""]
    if study == "mass":
        lines += ["| model | variant | min ESS / 1000 draws | ratio to old default | mean max R-hat |",
                  "|---|---|---|---|---|"]
    else:
        lines += ["min-ESS/s is over `mcmc.run` (init, compilation, warmup, sampling); evals/step counts every "
                  "per-datum likelihood evaluation a step computed; exact = fraction of chains that chose the exact "
                  "MH step at the end of warmup (the race cost more than N).", "",
                  "| model | variant | min ESS / 1000 draws | ratio | min-ESS/s | ratio /s | evals/step | exact | "
                  "mean max R-hat |", "|---|---|---|---|---|---|---|---|---|"]
    for name, m in results["models"].items():
        for variant, row in m["variants"].items():
            cells = [f"{name} (N={m['N']})", variant,
                     f"{row['min_ess_per_1000_mean']:.1f} +- {row['min_ess_per_1000_se']:.1f}",
                     f"{row['ratio_to_old_default']:.2f}"]
            if study != "mass":
                cells += [f"{row['min_ess_per_second_mean']:.1f} +- {row['min_ess_per_second_se']:.1f}",
                          f"{row['ratio_per_second']:.2f}", f"{row['evals_per_step_mean']:.0f}",
                          f"{row['exact_mode_mean']:.2f}"]
            cells.append(f"{row['max_rhat_mean']:.3f}")
            lines.append("| " + " | ".join(cells) + " |")
    with open(os.path.join(out, f"racing_mh_{study}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
