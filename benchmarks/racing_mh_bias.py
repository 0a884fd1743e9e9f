"""Is RacingMH biased on a Gaussian location-scale model?  Posterior means against exact grid answers, over seeds.

A fresh user saw RacingMH's posterior mean of mu in Normal(mu, sigma) sit 0.02-0.03 posterior sd below
NUTS's (z -1.9 to -2.6 in four runs), and sigma at z -2.5 to -2.9 in a model with a precise calibration
measurement of mu outside the data plate.  Every run was compared with one NUTS reference, so the four
z-scores shared that reference's own Monte Carlo error.  Here the reference is exact: the posterior of
(mu, log sigma) on a fine grid (float64, sufficient statistics), so a z-score carries only the chain's
Monte Carlo error, and the seeds are independent replicates.

Models (NumPy float64 data, ``RacingMH(model)`` with its defaults, ``numpyro.infer.MCMC``, vectorized chains):

* ``normal``: y_i ~ Normal(mu, sigma), mu ~ Normal(0, 10), sigma ~ HalfCauchy(2), N = 5,000 draws of
  Normal(0.3, 1.3) (the user's model);
* ``calibration``: mu ~ Normal(0, 1), sigma ~ LogNormal(0, 1), one measurement calib ~ Normal(mu, 0.001)
  = 1.0 outside the plate, y_i ~ Normal(mu, sigma), N = 5,000 draws of Normal(0.3, 1).

Per seed: posterior mean of each site over its chains, its MCSE (ArviZ, bulk), z = (mean - exact) / MCSE.
Reported: the mean of the z's over seeds with its standard error (an unbiased sampler gives about 0 +- 1/sqrt(S)),
and the pooled bias (mean over seeds of mean - exact, in posterior sds, with its s.e. from the spread
over seeds).

    python benchmarks/racing_mh_bias.py [--seeds 8] [--first-seed S] [--x64] [--delta D]
        # -> results/racing_mh_bias[_x64][_deltaD, 0.01 as 0p01][_fromS].{json,md}
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def grid_posterior(y: np.ndarray, log_prior, calib=None, calib_sd=None, points: int = 1601) -> dict:
    """Exact posterior means and sds of mu and sigma on a (mu, log sigma) grid around the mode.

    log p(mu, s | y) = log prior(mu, sigma) + log sigma (Jacobian of s = log sigma)
                       - N log sigma - (S2 - 2 mu S1 + N mu^2) / (2 sigma^2) [+ calibration term].
    """
    n, s1, s2 = len(y), float(np.sum(y)), float(np.sum(y * y))
    m0, sd0 = s1 / n, np.sqrt(max(s2 / n - (s1 / n) ** 2, 1e-12))
    if calib is not None:
        m0 = calib
        sd0 = np.sqrt(s2 / n - 2 * m0 * s1 / n + m0 * m0)
    half_mu = 10 * (calib_sd if calib is not None else sd0 / np.sqrt(n))
    mu = np.linspace(m0 - half_mu, m0 + half_mu, points)
    ls = np.linspace(np.log(sd0) - 10 / np.sqrt(2 * n), np.log(sd0) + 10 / np.sqrt(2 * n), points)
    M, L = np.meshgrid(mu, ls, indexing="ij")
    sig = np.exp(L)
    lp = log_prior(M, sig) + L - n * L - (s2 - 2 * M * s1 + n * M * M) / (2 * sig * sig)
    if calib is not None:
        lp = lp - 0.5 * ((calib - M) / calib_sd) ** 2
    w = np.exp(lp - lp.max())
    w /= w.sum()
    out = {}
    for name, v in (("mu", M), ("sigma", sig)):
        mean = float(np.sum(w * v))
        out[name] = {"mean": mean, "sd": float(np.sqrt(np.sum(w * (v - mean) ** 2)))}
    # the grid must hold the posterior: no mass at its border
    edge = max(w[0].sum(), w[-1].sum(), w[:, 0].sum(), w[:, -1].sum())
    assert edge < 1e-12, f"grid too narrow (border mass {edge:.2e})"
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first_seed, ..., first_seed + seeds - 1")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--samples", type=int, default=2500)
    parser.add_argument("--models", default="normal,calibration")
    parser.add_argument("--delta", type=float, default=None, help="RacingMH's delta (default: its default, 0.05)")
    parser.add_argument("--x64", action="store_true", help="turn on jax_enable_x64 (the float32 rounding hypothesis)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    if args.x64:
        jax.config.update("jax_enable_x64", True)
    import arviz as az
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC
    from scipy import stats

    from compile_time import head_label, mean_se, write_results
    from subsample_mcmc import RacingMH

    def normal_model(y):
        mu = numpyro.sample("mu", dist.Normal(0, 10))
        sigma = numpyro.sample("sigma", dist.HalfCauchy(2))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, sigma), obs=y)

    def calibration_model(y, calib):
        mu = numpyro.sample("mu", dist.Normal(0, 1))
        sigma = numpyro.sample("sigma", dist.LogNormal(0, 1))
        numpyro.sample("calib", dist.Normal(mu, 0.001), obs=calib)
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, sigma), obs=y)

    y_normal = np.random.default_rng(5).normal(0.3, 1.3, size=5000)
    y_calib = np.random.default_rng(1).normal(0.3, 1.0, size=5000)
    setups = {
        "normal": (normal_model, (y_normal,),
                   grid_posterior(y_normal, lambda m, s: stats.norm.logpdf(m, 0, 10) + stats.halfcauchy.logpdf(s, scale=2))),
        "calibration": (calibration_model, (y_calib, 1.0),
                        grid_posterior(y_calib, lambda m, s: stats.norm.logpdf(m, 0, 1) + stats.lognorm.logpdf(s, 1.0),
                                       calib=1.0, calib_sd=0.001)),
    }
    summary = {"revision": head_label(), "x64": args.x64, "delta": args.delta, "seeds": args.seeds,
               "first_seed": args.first_seed, "chains": args.chains,
               "warmup": args.warmup, "samples": args.samples, "models": {}}
    lines = []
    for name in args.models.split(","):
        model, margs, exact = setups[name]
        kernel = RacingMH(model) if args.delta is None else RacingMH(model, delta=args.delta)
        mcmc = MCMC(kernel, num_warmup=args.warmup, num_samples=args.samples, num_chains=args.chains,
                    chain_method="vectorized", progress_bar=False)
        per_seed = {site: {"z": [], "bias_sd": []} for site in exact}
        rhat_max = 0.0
        t0 = time.time()
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            mcmc.run(jax.random.PRNGKey(1000 + seed), *margs)
            draws = mcmc.get_samples(group_by_chain=True)
            for site in exact:
                v = np.asarray(draws[site], dtype=np.float64)
                mean, mcse = float(v.mean()), float(az.mcse(v))
                rhat_max = max(rhat_max, float(az.rhat(v)))
                per_seed[site]["z"].append((mean - exact[site]["mean"]) / mcse)
                per_seed[site]["bias_sd"].append((mean - exact[site]["mean"]) / exact[site]["sd"])
            print(name, seed, {s: round(per_seed[s]["z"][-1], 2) for s in exact}, flush=True)
        result = {"exact": exact, "seconds": time.time() - t0, "rhat_max": rhat_max, "sites": {}}
        for site in exact:
            zm, zse = mean_se(per_seed[site]["z"])
            bm, bse = mean_se(per_seed[site]["bias_sd"])
            result["sites"][site] = {"z": per_seed[site]["z"], "z_mean": zm, "z_se": zse,
                                     "bias_in_sd": bm, "bias_in_sd_se": bse}
            lines.append(f"| {name} | {site} | {exact[site]['mean']:.5f} | {zm:+.2f} ± {zse:.2f} | "
                         f"{bm:+.4f} ± {bse:.4f} | {', '.join(f'{z:+.1f}' for z in per_seed[site]['z'])} |")
        summary["models"][name] = result
    header = [f"# RacingMH posterior means against exact grid answers ({'x64' if args.x64 else 'float32'})", "",
              f"`python benchmarks/racing_mh_bias.py --seeds {args.seeds}{' --x64' if args.x64 else ''}"
              f"{'' if args.first_seed == 0 else f' --first-seed {args.first_seed}'}"
              f"{'' if args.delta is None else f' --delta {args.delta}'}` at {summary['revision']}; "
              f"`RacingMH(model{'' if args.delta is None else f', delta={args.delta}'})` (otherwise defaults), {args.chains} vectorized chains, "
              f"{args.warmup} + {args.samples} draws per seed, NumPy float64 data, N = 5,000. "
              "z = (chain mean - exact mean) / ArviZ MCSE per seed; bias in posterior sds, mean ± s.e. over seeds.", "",
              "| model | site | exact mean | z, mean ± s.e. over seeds | bias / posterior sd | z per seed |",
              "|---|---|---|---|---|---|"]
    default_out = ("racing_mh_bias" + ("_x64" if args.x64 else "") + ("" if args.delta is None else f"_delta{args.delta:g}".replace(".", "p"))
                   + ("" if args.first_seed == 0 else f"_from{args.first_seed}"))
    out = HERE / "results" / (args.out or default_out)
    write_results(out, summary, header + lines)


if __name__ == "__main__":
    main()
