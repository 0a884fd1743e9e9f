"""How much of a race's reward spread a second- and a third-order Taylor proxy leave.

For the logistic regressions of ``peers_real_data.py`` (AER Fertility, openintro military;
``w ~ N(0, I)``, ``b ~ N(0, 5^2)``): the full-data Newton MAP ``theta_hat`` and Laplace
covariance ``L L'``, then ``J = 16`` pairs ``(theta, theta')`` of independent draws from
the Student-t ``t_5(theta_hat, L L')`` that RacingMH's default Crank-Nicolson-t move
proposes from.  For each pair, the per-datum reward a race reads is the difference of the
proxy residuals ``D_n = r_n(theta') - r_n(theta)``, ``r_n = l_n - h_n``; a GLM's ``l_n``
depends on ``theta`` through ``eta_n = x_n' theta`` only, so the parameter-space Taylor
proxy of :mod:`subsample_mcmc.kernels.proxy` is the Taylor polynomial of ``l`` in ``eta``
around ``eta_hat_n``: second order ``l + l' de + l'' de^2 / 2``, third order ``+ l''' de^3 / 6``.

Reported per data set: the population sd of ``D_n`` (median over pairs) and ``N sd``
(the stage-``k`` width of a race is about ``B N sd / sqrt(n_k)``, and the share of races
that reach late stages scales with it); the ratio third / second order (median, ratio of
means, max over pairs); for the second order, the share of ``sum D_n^2`` carried by the
``K`` data with the largest ``|D_n|`` (could an exactly-read set of a few points remove
the spread?).  NumPy float64, no JAX.

    python benchmarks/proxy_residual_spread.py   # -> results/proxy_residual_spread.{json,md}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATASETS = ("fertility", "military")
PAIRS, DF = 16, 5
TOP_K = (100, 1000, 5000, 20000, 100000)


def _laplace(x, y, prior_prec):
    th = np.zeros(x.shape[1])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(x @ th)))
        g = x.T @ (y - p) - prior_prec * th
        h = -(x * (p * (1 - p))[:, None]).T @ x - np.diag(prior_prec)
        step = np.linalg.solve(h, g)
        th = th - step
        if np.max(np.abs(step)) < 1e-10:
            break
    return th, np.linalg.cholesky(np.linalg.inv(-h))


def one(name: str) -> dict:
    sys.path.insert(0, str(HERE))
    from experiments.peers import load_dataset

    ds = load_dataset(name)
    x = np.c_[ds.x.astype(np.float64), np.ones(len(ds.y))]
    y = ds.y.astype(np.float64)
    n, d = x.shape
    th, chol = _laplace(x, y, np.r_[np.ones(d - 1), 1.0 / 25.0])
    eta0 = x @ th
    p0 = 1.0 / (1.0 + np.exp(-eta0))
    q0 = p0 * (1.0 - p0)

    def ll(eta):
        return y * eta - np.logaddexp(0.0, eta)

    def residual(eta, order):
        de = eta - eta0
        h = ll(eta0) + (y - p0) * de - 0.5 * q0 * de ** 2
        if order == 3:
            h = h - q0 * (1.0 - 2.0 * p0) * de ** 3 / 6.0
        return ll(eta) - h

    rng = np.random.default_rng(0)

    def t_draw():
        return th + chol @ rng.normal(size=d) / np.sqrt(rng.chisquare(DF) / DF)

    sd = {2: [], 3: []}
    top_share = {k: [] for k in TOP_K}
    for _ in range(PAIRS):
        ea, eb = x @ t_draw(), x @ t_draw()
        for order in (2, 3):
            diff = residual(eb, order) - residual(ea, order)
            sd[order].append(float(diff.std()))
            if order == 2:
                c2 = (diff - diff.mean()) ** 2
                srt = np.sort(c2)[::-1]
                for k in TOP_K:
                    top_share[k].append(float(srt[:k].sum() / srt.sum()))
    s2, s3 = np.array(sd[2]), np.array(sd[3])
    return {
        "dataset": name, "n": n, "d": d, "pairs": PAIRS, "df": DF,
        "sd_order2_median": float(np.median(s2)), "n_sd_order2_median": float(n * np.median(s2)),
        "sd_order3_median": float(np.median(s3)), "n_sd_order3_median": float(n * np.median(s3)),
        "ratio_median": float(np.median(s3 / s2)), "ratio_of_means": float(s3.mean() / s2.mean()),
        "ratio_max": float(np.max(s3 / s2)),
        "top_k_share_order2_median": {str(k): float(np.median(v)) for k, v in top_share.items()},
    }


def main() -> None:
    rows = [one(name) for name in DATASETS]
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "proxy_residual_spread.json").write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    lines = ["# The spread a Taylor proxy leaves in a race's rewards (benchmarks/proxy_residual_spread.py)", "",
             f"Logistic regressions of `peers_real_data.py`; {PAIRS} pairs of independent draws from the Laplace "
             f"t_{DF} (RacingMH's default proposal); per-datum reward D_n = r_n(theta') - r_n(theta), r_n the proxy "
             "residual; sd = population sd of D_n (median over pairs).", "",
             "| data | N | d | sd, 2nd order | N sd, 2nd | sd, 3rd order | N sd, 3rd | 3rd / 2nd: median | of means | max |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['n']:,} | {r['d']} | {r['sd_order2_median']:.3g} | "
                     f"{r['n_sd_order2_median']:.3g} | {r['sd_order3_median']:.3g} | {r['n_sd_order3_median']:.3g} | "
                     f"{r['ratio_median']:.4f} | {r['ratio_of_means']:.4f} | {r['ratio_max']:.4f} |")
    lines += ["", "Share of the second-order sum of squares carried by the K data with the largest |D_n| (median "
              "over pairs):", "", "| data | " + " | ".join(f"K = {k:,}" for k in TOP_K) + " |",
              "|---|" + "---|" * len(TOP_K)]
    for r in rows:
        lines.append(f"| {r['dataset']} | " + " | ".join(f"{r['top_k_share_order2_median'][str(k)]:.3f}"
                                                        for k in TOP_K) + " |")
    (out / "proxy_residual_spread.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
