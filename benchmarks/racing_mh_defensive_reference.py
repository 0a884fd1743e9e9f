"""RacingMH's Crank-Nicolson reference: the Student-t, the Gaussian and the defensive mixture between them.

The reference of the Crank-Nicolson move is ``(1 - a) N(c, S) + a t_5(c, S)`` on the Laplace approximation
(:func:`subsample_mcmc.kernels.crank_nicolson`, ``t_weight=a``); ``RacingMH`` uses ``a = min(1, 2/p)``
(:func:`subsample_mcmc.kernels.defensive_t_weight`).  Two measurements:

1. **Tail cover.**  Exact-MH independence chains (``eps = inf``; 8 chains x 20,000 steps, the first 500
   dropped, 3 seeds) on a posterior with one rare-event direction: a Poisson log-rate with 3 events in
   N = 2000 (its left tail is exponential, heavier than its Laplace Gaussian's) and ``p - 1`` standard
   Gaussian parameters.  Reported: the bias of the chains' share of draws below the exact 1% quantile and
   its spread across chains in binomial standard deviations (a chain that sticks in the tail or misses it
   inflates the spread), and the acceptance rate.
2. **Logistic regressions** (``RacingMH(logistic_model)``, the defaults, 2000 warmup + 10000 draws,
   seeds 0 and 1) on AER Fertility (p = 8) and the correlated synthetic design of
   ``peers_real_data.py`` (p = 51, N = 1e6), with ``a`` forced to 1 (the t alone), to the default and to 0
   (the Gaussian): acceptance, evaluations per step, min bulk ESS per draw and evaluations per effective
   draw, mean and standard error over the seeds.

    python benchmarks/racing_mh_defensive_reference.py   # -> results/racing_mh_defensive_reference.{json,md}
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TAIL_DIMENSIONS = (1, 2, 5, 20)
TAIL_WEIGHTS = (1.0, 0.5, 0.2, 0.0)
TAIL_SEEDS, TAIL_CHAINS, TAIL_STEPS = 3, 8, 20000
LOGISTIC = (("fertility", None), ("synthetic50", 1_000_000))
LOGISTIC_SEEDS, WARMUP, SAMPLES = (0, 1), 2000, 10000


def tail_cover(p: int, t_weight: float, seed: int):
    """(bias, spread, acceptance) of exact-MH independence chains on the rare-event posterior (module doc)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from subsample_mcmc.kernels import build_kernel, crank_nicolson, init

    n, k, prior_sd = 2000, 3, 10.0
    y = jnp.zeros(n).at[:k].set(1.0)
    mode = jnp.zeros(p).at[0].set(math.log(k / n))
    inv_mass = jnp.ones(p).at[0].set(1.0 / k)

    def log_lik(x, idx):
        return y[idx] * x[0] - jnp.exp(x[0])

    def log_prior(x):
        return -0.5 * (x[0] / prior_sd) ** 2 - 0.5 * jnp.sum(x[1:] ** 2)

    step = build_kernel(crank_nicolson(t_weight=t_weight), method="exact")

    def run(key):
        def body(state, kk):
            state, info = step(kk, state, log_prior, log_lik, n, jnp.inf, inv_mass, center=mode)
            return state, (state.position[0], info.accepted)

        return jax.lax.scan(body, init(mode), jax.random.split(key, TAIL_STEPS))[1]

    xs, acc = jax.jit(jax.vmap(run))(jax.random.split(jax.random.PRNGKey(seed), TAIL_CHAINS))
    xs = np.asarray(xs, np.float64)[:, 500:]
    grid = np.linspace(-25.0, 0.0, 200001)
    log_post = k * grid - n * np.exp(grid) - 0.5 * (grid / prior_sd) ** 2
    cdf = np.cumsum(np.exp(log_post - log_post.max()))
    q01 = grid[np.searchsorted(cdf / cdf[-1], 0.01)]
    freq = (xs < q01).mean(axis=1)
    return float(abs(freq.mean() - 0.01)), float(freq.std(ddof=1) / math.sqrt(0.01 * 0.99 / xs.shape[1])), \
        float(np.mean(acc))


def logistic_run(x, y, weight, seed, **options):
    """One ``RacingMH(logistic_model, **options)`` chain with the reference's t weight forced to ``weight``
    (``None``: the default); its acceptance, evaluations per step and per effective draw."""
    import arviz as az
    import jax
    import numpy as np
    from numpyro.infer import MCMC

    import subsample_mcmc.numpyro.mh as mh_module
    from experiments import logistic as L

    original = mh_module.defensive_t_weight
    if weight is not None:
        mh_module.defensive_t_weight = lambda p: weight
    try:
        mcmc = MCMC(mh_module.RacingMH(L.logistic_model, **options), num_warmup=WARMUP, num_samples=SAMPLES, num_chains=1,
                    progress_bar=False)
        mcmc.run(jax.random.PRNGKey(seed), x, y, extra_fields=("num_likelihood_evals", "accept_prob"))
    finally:
        mh_module.defensive_t_weight = original
    s = mcmc.get_samples()
    theta = np.concatenate([np.asarray(s["w"]), np.asarray(s["b"])[:, None]], 1)
    ess = min(float(az.ess(theta[None, :, j])) for j in range(theta.shape[1]))
    extra = mcmc.get_extra_fields()
    evals = float(np.mean(extra["num_likelihood_evals"]))
    return {"accept": float(np.mean(extra["accept_prob"])), "evals_per_step": evals, "min_ess_per_draw": ess / SAMPLES,
            "evals_per_effective_draw": evals * SAMPLES / ess, "crank_nicolson": bool(mcmc.last_state.crank_nicolson)}


def logistic_table(rows, key: str, title: str) -> list:
    """Markdown table lines of :func:`logistic_run` summaries (mean +- s.e. over seeds), one row per setting
    ``row[key]`` (column ``title``)."""
    def fmt(v, d=3):
        return f"{v[0]:.{d}f} +- {v[1]:.{d}f}"

    lines = [f"| data | N, p | {title} | acceptance | evaluations per step | min ESS per draw "
             "| evaluations per effective draw |", "|---|---|---|---|---|---|---|"]
    return lines + [f"| {r['dataset']} | {r['n']:,}, {r['p']} | {r[key]} | {fmt(r['accept'])} "
                    f"| {fmt(r['evals_per_step'], 0)} | {fmt(r['min_ess_per_draw'])} "
                    f"| {fmt(r['evals_per_effective_draw'], 0)} |" for r in rows]


def logistic_row(runs, **fields) -> dict:
    """``fields`` and the runs of :func:`logistic_run` with the mean and standard error over them of each
    summary (acceptance, evaluations per step, min ESS per draw, evaluations per effective draw)."""
    row = {**fields, "runs": runs}
    for key in ("accept", "evals_per_step", "min_ess_per_draw", "evals_per_effective_draw"):
        row[key] = _mean_se([r[key] for r in runs])
    return row


def _mean_se(values):
    import numpy as np

    v = np.asarray(values, np.float64)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else float("nan")


def main() -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(HERE))
    import jax.numpy as jnp

    from experiments import peers as P
    from subsample_mcmc.kernels import defensive_t_weight

    tail = []
    for p in TAIL_DIMENSIONS:
        for a in sorted(set(TAIL_WEIGHTS) | {defensive_t_weight(p)}, reverse=True):
            runs = [tail_cover(p, a, seed) for seed in range(TAIL_SEEDS)]
            row = {"p": p, "t_weight": a, "default": a == defensive_t_weight(p),
                   "bias": [r[0] for r in runs], "spread": [r[1] for r in runs], "accept": [r[2] for r in runs]}
            tail.append(row)
            print(f"tail p={p} a={a:.3f}: spread {row['spread']}, accept {row['accept'][0]:.3f}", file=sys.stderr)
    logistic = []
    for name, n in LOGISTIC:
        ds = P.load_dataset(name, n=n, seed=0)
        x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
        p = int(x.shape[1]) + 1
        for label, weight in (("t alone (a = 1)", 1.0), (f"default (a = {defensive_t_weight(p):.3f})", None),
                              ("Gaussian (a = 0)", 0.0)):
            runs = [logistic_run(x, y, weight, seed) for seed in LOGISTIC_SEEDS]
            row = logistic_row(runs, dataset=name, n=int(x.shape[0]), p=p, reference=label)
            logistic.append(row)
            print(f"{name} {label}: {row['evals_per_effective_draw']}", file=sys.stderr)
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    payload = {"tail": tail, "logistic": logistic, "tail_seeds": TAIL_SEEDS, "tail_chains": TAIL_CHAINS,
               "tail_steps": TAIL_STEPS, "logistic_seeds": list(LOGISTIC_SEEDS), "warmup": WARMUP, "samples": SAMPLES}
    (results / "racing_mh_defensive_reference.json").write_text(json.dumps(payload, indent=1) + "\n")
    lines = ["# RacingMH's Crank-Nicolson reference (benchmarks/racing_mh_defensive_reference.py)", "",
             "## Tail cover: one rare-event direction among p", "",
             f"Exact-MH independence chains, {TAIL_CHAINS} x {TAIL_STEPS:,} steps, seeds 0-{TAIL_SEEDS - 1}: the "
             "spread across chains of the share of draws below the exact 1% quantile, in binomial sds (near 1-2: "
             "covered; larger: chains stick in the tail or miss it), the bias of that share, the acceptance.", "",
             "| p | t weight a | spread per seed | max bias | acceptance |", "|---|---|---|---|---|"]
    lines += [f"| {r['p']} | {r['t_weight']:.3f}{' (default)' if r['default'] else ''} | "
              f"{', '.join(f'{v:.2f}' for v in r['spread'])} | {max(r['bias']):.4f} | {r['accept'][0]:.3f} |"
              for r in tail]
    lines += ["", "## Logistic regressions, RacingMH's defaults but the reference", "",
              f"{WARMUP} warmup + {SAMPLES:,} draws, 1 chain, seeds {list(LOGISTIC_SEEDS)}: mean +- s.e. over seeds.",
              ""] + logistic_table(logistic, "reference", "reference")
    (results / "racing_mh_defensive_reference.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
