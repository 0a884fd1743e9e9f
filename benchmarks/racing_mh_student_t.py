#!/usr/bin/env python
r"""Does ``RacingMH(model)`` with its defaults get a heavy-tailed regression's posterior right?

A Student-t linear regression (intercept, three covariates two of which are correlated, scale,
degrees of freedom ``nu`` with a Gamma(2, 0.1) prior) on ``N`` rows of NumPy float64 data whose
noise is ``0.7 t_nu_true``: the per-datum log-likelihood differences a race reads are skewed and,
for ``nu_true <= 2``, of infinite variance, which is where Racing-Normal's error promise is most at
risk (the heavy-tail guard of :mod:`subsample_mcmc.racing.bounds` exists for it).  Against NumPyro's
NUTS on the same data, per seed and parameter: the ratio of posterior sds and the difference of
means in units of the combined Monte Carlo standard error (ArviZ's ``mcse``).  Each seed draws new
data; the table reports the mean and the standard error over seeds.

Usage::

    python benchmarks/racing_mh_student_t.py                 # 3 seeds x nu in {3, 1.5}, ~20 min on 2 cores
    python benchmarks/racing_mh_student_t.py --seeds 1 --nu 3 --samples 1000

Writes ``results/racing_mh_student_t.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings
from pathlib import Path

import arviz as az
import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS

from subsample_mcmc import RacingMH

RESULTS = Path(__file__).resolve().parent / "results"


def model(x, y=None):
    a = numpyro.sample("a", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 2.0).expand([x.shape[1]]).to_event(1))
    s = numpyro.sample("s", dist.HalfNormal(2.0))
    nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.StudentT(nu, a + x @ b, s), obs=y)


def make_data(seed: int, n: int, nu: float):
    rng = np.random.default_rng(100 + seed)
    x = rng.normal(size=(n, 3))
    x[:, 1] = 0.6 * x[:, 0] + 0.8 * x[:, 1]
    y = 1.0 + x @ np.array([0.5, -0.3, 0.2]) + 0.7 * rng.standard_t(nu, size=n)
    return x, y


def run(kernel, seed, x, y, warmup, samples, chain_method):
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=samples, num_chains=4, chain_method=chain_method,
                progress_bar=False)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(seed), x, y)
    seconds = time.perf_counter() - t0
    idata = az.from_numpyro(mcmc, log_likelihood=False)
    summary = az.summary(idata, round_to="none")
    out = {name: dict(mean=float(summary.loc[name, "mean"]), sd=float(summary.loc[name, "sd"]),
                      mcse=float(summary.loc[name, "mcse_mean"]), ess=float(summary.loc[name, "ess_bulk"]),
                      rhat=float(summary.loc[name, "r_hat"])) for name in summary.index}
    return dict(seconds=seconds, params=out,
                warnings=[str(w.message)[:200] for w in caught if issubclass(w.category, UserWarning)])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--nu", type=float, nargs="+", default=[3.0, 1.5])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=2000, help="per chain (RacingMH draws twice as many)")
    ap.add_argument("--out", default=str(RESULTS / "racing_mh_student_t.json"))
    args = ap.parse_args(argv)
    rows, runs = [], []
    for nu in args.nu:
        for seed in range(args.seeds):
            x, y = make_data(seed, args.n, nu)
            racing = run(RacingMH(model), seed, x, y, args.warmup, 2 * args.samples, "vectorized")
            nuts = run(NUTS(model), seed, x, y, args.warmup, args.samples, "sequential")
            for name, r in racing["params"].items():
                n_ = nuts["params"][name]
                rows.append(dict(nu=nu, seed=seed, param=name, sd_ratio=r["sd"] / n_["sd"],
                                 z=(r["mean"] - n_["mean"]) / float(np.hypot(r["mcse"], n_["mcse"])),
                                 ess_racing=r["ess"], ess_nuts=n_["ess"], rhat_racing=r["rhat"],
                                 rhat_nuts=n_["rhat"]))
            print(f"nu={nu} seed={seed}: racing {racing['seconds']:.0f}s, NUTS {nuts['seconds']:.0f}s; "
                  + ", ".join(f"{r['param']} {r['sd_ratio']:.3f}" for r in rows if r["nu"] == nu and r["seed"] == seed),
                  flush=True)
            runs.append(dict(nu=nu, seed=seed, racing_seconds=racing["seconds"], nuts_seconds=nuts["seconds"],
                             racing_warnings=racing["warnings"], nuts_warnings=nuts["warnings"]))
    lines = ["# RacingMH(model) vs NUTS on Student-t regressions (benchmarks/racing_mh_student_t.py)", "",
             f"N = {args.n:,} rows of NumPy float64 data, noise 0.7 t_nu; 4 chains, {args.warmup} warmup, "
             f"{2 * args.samples} (RacingMH) and {args.samples} (NUTS) draws per chain; {args.seeds} seeds (new data "
             "each). sd ratio = RacingMH / NUTS posterior sd; z = difference of means over the combined MCSE. "
             "Mean +- standard error over seeds; max |z| over seeds.", "",
             "| nu | parameter | sd ratio | z | max abs z | min ESS RacingMH | max R-hat RacingMH |", "|---|---|---|---|---|---|---|"]
    summary = []
    for nu in args.nu:
        for name in sorted({r["param"] for r in rows}):
            sel = [r for r in rows if r["nu"] == nu and r["param"] == name]
            ratio, z = np.array([r["sd_ratio"] for r in sel]), np.array([r["z"] for r in sel])
            se = (lambda v: float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan"))
            summary.append(dict(nu=nu, param=name, sd_ratio=float(ratio.mean()), sd_ratio_se=se(ratio),
                                z=float(z.mean()), z_se=se(z), max_abs_z=float(np.abs(z).max())))
            lines.append(f"| {nu:g} | {name} | {ratio.mean():.3f} +- {se(ratio):.3f} | {z.mean():+.2f} +- {se(z):.2f} | "
                         f"{np.abs(z).max():.2f} | {min(r['ess_racing'] for r in sel):.0f} | "
                         f"{max(r['rhat_racing'] for r in sel):.3f} |")
    Path(args.out).write_text(json.dumps(dict(args=vars(args), rows=rows, runs=runs, summary=summary,
                                              machine=platform.platform(), jax=jax.__version__), indent=1))
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
