"""What RacingGibbs's joint moves cost per chain, where a discrete value moves the continuous posterior
and where it does not.

Two models, NumPy float64 inputs, ``RacingGibbs(model, inner_kernel=RacingMH(model))`` at its defaults:

* ``uncoupled``: a linear regression (N = 5,000, 3 covariates) whose coefficients' prior sd is a discrete
  hyper-choice in {0.5, 1, 2, 5}: at this N the choice moves the coefficients' posterior by far less than
  a posterior sd, so init leaves the joint moves off;
* ``coupled``: Student-t data (tail index 4, N = 5,000), nu on the grid [1, 2, 3, 5, 8, 30] beside loc and
  scale: the scale's conditional mode moves by many sds with nu, so init turns the joint moves on.

Each model runs in three of four settings (``as_decided`` coincides with ``forced_off`` on the first
model and with ``forced_on`` on the second, and is not repeated), which differ only in two module constants of
``subsample_mcmc.numpyro.gibbs``, monkeypatched by this script:

* ``as_decided``: the defaults (init fits each configuration's Laplace approximation and decides);
* ``forced_on``: ``_COUPLED_SDS = -1`` (joint moves made whatever the coupling);
* ``forced_off``: ``_COUPLED_SDS = 1e30`` (the fits made at init, the joint moves never);
* ``no_fits``: ``_MAX_JOINT_CONFIGURATIONS = 0`` (no Laplace fits at init and no joint moves: the
  baseline, RacingGibbs without the feature).

Per chain (one chain, ``chain_method="sequential"``): ``init_s``, the seconds of ``kernel.init`` on a
fresh kernel (compilation of the K full-data Laplace fits included, as a user pays it); ``first_run_s``,
the seconds of the first ``MCMC.run`` from that state (compilation, 200 warmup + 200 draws); ``step_ms``, the
steady milliseconds per step (a second ``run`` of 400 draws from the post-warmup state, compiled);
``evals_per_step``, the mean ``num_likelihood_evals`` per step of that run, and ratios of each to the
``no_fits`` baseline of the same model.  The evaluation counts are deterministic; the seconds are
wall-clock on whatever CPU runs it (the committed run: 2 cores shared with other jobs, noisy: see the
markdown).

    python benchmarks/racing_gibbs_joint_cost.py   # -> results/racing_gibbs_joint_cost.{json,md}
    python benchmarks/racing_gibbs_joint_cost.py --markdown-only   # the .md again from the .json
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import subsample_mcmc.numpyro.gibbs as gibbs
from subsample_mcmc import RacingGibbs, RacingMH

HERE = Path(__file__).resolve().parent
PRIOR_SDS = np.array([0.5, 1.0, 2.0, 5.0])
NU = np.array([1.0, 2.0, 3.0, 5.0, 8.0, 30.0])
NUM_WARMUP, NUM_SAMPLES = 200, 200
NUM_STEADY = NUM_WARMUP + NUM_SAMPLES  # the same MCMC object (its collection size), compiled once


def uncoupled_model(X, y=None):
    s = numpyro.sample("s", dist.Categorical(probs=jnp.ones(len(PRIOR_SDS)) / len(PRIOR_SDS)))
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 5.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, jnp.asarray(PRIOR_SDS)[s]).expand([X.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(alpha + X @ beta, sigma), obs=y)


def uncoupled_data(n=5000):
    rng = np.random.default_rng(31)
    X = rng.normal(size=(n, 3))
    return (X, 0.3 + X @ np.array([0.5, -0.3, 0.2]) + rng.normal(size=n)), {}


def coupled_model(y):
    k = numpyro.sample("k", dist.Categorical(probs=jnp.ones(len(NU)) / len(NU)))
    loc = numpyro.sample("loc", dist.Normal(0.0, 5.0))
    scale = numpyro.sample("scale", dist.HalfNormal(5.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.StudentT(jnp.asarray(NU)[k], loc, scale), obs=y)


def coupled_data(n=5000):
    return (0.5 + 1.2 * np.random.default_rng(4).standard_t(4.0, size=n),), {}


SETTINGS = {
    "as_decided": {},
    "forced_on": {"_COUPLED_SDS": -1.0},
    "forced_off": {"_COUPLED_SDS": 1e30},
    "no_fits": {"_MAX_JOINT_CONFIGURATIONS": 0},
}
# as_decided is forced_off on the uncoupled model and forced_on on the coupled one (init's decision):
# the duplicate is not run
RUN = {"uncoupled": ("as_decided", "forced_on", "no_fits"), "coupled": ("as_decided", "forced_off", "no_fits")}


def measure(model, data, setting):
    saved = {k: getattr(gibbs, k) for k in SETTINGS[setting]}
    for k, v in SETTINGS[setting].items():
        setattr(gibbs, k, v)
    try:
        args, kwargs = data()
        kernel = RacingGibbs(model, inner_kernel=RacingMH(model))
        t0 = time.perf_counter()
        state = kernel.init(jax.random.PRNGKey(0), NUM_WARMUP, None, args, kwargs)
        jax.block_until_ready(state)
        init_s = time.perf_counter() - t0

        # the warmup and the first draws from that state (the kernel's own warmup counter adapts it)
        mcmc = MCMC(kernel, num_warmup=0, num_samples=NUM_WARMUP + NUM_SAMPLES, num_chains=1, progress_bar=False)
        mcmc.post_warmup_state = state
        t0 = time.perf_counter()
        mcmc.run(state.rng_key, *args, extra_fields=("num_likelihood_evals",), **kwargs)
        jax.block_until_ready(mcmc.get_samples())
        first_s = time.perf_counter() - t0
        joint, coupling = bool(np.asarray(mcmc.last_state.joint_moves)), float(mcmc.last_state.coupling_sds)

        mcmc.post_warmup_state = mcmc.last_state
        t0 = time.perf_counter()
        mcmc.run(mcmc.post_warmup_state.rng_key, *args, extra_fields=("num_likelihood_evals",), **kwargs)
        jax.block_until_ready(mcmc.get_samples())
        steady_s = time.perf_counter() - t0
        evals = np.asarray(mcmc.get_extra_fields()["num_likelihood_evals"], np.float64)
        discrete = np.asarray(mcmc.get_samples()["s" if model is uncoupled_model else "k"])
    finally:
        for k, v in saved.items():
            setattr(gibbs, k, v)
    return {"init_s": init_s, "first_run_s": first_s, "step_ms": 1e3 * steady_s / NUM_STEADY,
            "evals_per_step": float(evals.mean()), "joint_moves": joint, "coupling_sds": coupling,
            "discrete_values_visited": sorted(int(v) for v in np.unique(discrete))}


def main():
    models = {"uncoupled": (uncoupled_model, uncoupled_data), "coupled": (coupled_model, coupled_data)}
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for name, (model, data) in models.items():
            n = data()[0][0].shape[0]
            for setting in RUN[name]:
                r = {"model": name, "N": n, "setting": setting, **measure(model, data, setting)}
                print(json.dumps(r), flush=True)
                rows.append(r)
    for r in rows:
        base = next(b for b in rows if b["model"] == r["model"] and b["setting"] == "no_fits")
        for k in ("init_s", "first_run_s", "step_ms", "evals_per_step"):
            r[f"{k}_ratio"] = r[k] / base[k]
    meta = {"num_warmup": NUM_WARMUP, "num_samples_first_run": NUM_SAMPLES, "num_steady_steps": NUM_STEADY,
            "chains": 1, "platform": platform.platform(), "jax": jax.__version__, "numpyro": numpyro.__version__,
            "load_average_1min_at_end": os.getloadavg()[0], "cpus": os.cpu_count(),
            "settings": {k: {c: str(v) for c, v in s.items()} for k, s in SETTINGS.items()}}
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "racing_gibbs_joint_cost.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    write_markdown(rows, meta)


def write_markdown(rows, meta):
    """results/racing_gibbs_joint_cost.md from the rows (``--markdown-only``: from the committed json)."""
    load = meta.get("load_average_1min_at_end")
    lines = ["# RacingGibbs joint moves: cost per chain (N = 5,000, NumPy float64, defaults, inner RacingMH)", "",
             "Settings monkeypatch `subsample_mcmc.numpyro.gibbs`: `forced_on` `_COUPLED_SDS = -1`, `forced_off` "
             "`_COUPLED_SDS = 1e30`, `no_fits` `_MAX_JOINT_CONFIGURATIONS = 0` (the baseline; ratios against it). "
             f"One chain; init of a fresh kernel; first run from its state: {meta['num_warmup']} warmup + "
             f"{meta['num_samples_first_run']} draws; steady: {meta['num_steady_steps']} further draws from the "
             "post-warmup state.", "",
             "The likelihood evaluations per step are counts (deterministic for the seeds); the seconds are "
             f"wall-clock on a shared machine ({meta.get('cpus')} CPUs"
             + (f", 1-minute load average {load:.1f} at the end of the run" if load is not None else "")
             + "): two settings doing identical steps (`coupled` `forced_off` and `no_fits`) differ by a factor "
             "1.6 in step ms, so only timing ratios far from 1 mean anything.", "",
             "| model | setting | joint moves | coupling (sds) | init s | first run s | step ms | evals/step | "
             "init x | step x | evals x | values visited |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['setting']} | {r['joint_moves']} | {r['coupling_sds']:.2f} | "
                     f"{r['init_s']:.1f} | {r['first_run_s']:.1f} | {r['step_ms']:.2f} | {r['evals_per_step']:.0f} | "
                     f"{r['init_s_ratio']:.2f} | {r['step_ms_ratio']:.2f} | {r['evals_per_step_ratio']:.2f} | "
                     f"{r['discrete_values_visited']} |")
    (HERE / "results" / "racing_gibbs_joint_cost.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if "--markdown-only" in sys.argv:
        saved = json.loads((HERE / "results" / "racing_gibbs_joint_cost.json").read_text())
        write_markdown(saved["rows"], saved["meta"])
    else:
        main()
