"""RacingMH's cost with its defaults in float32 and under ``jax_enable_x64``.

A Poisson regression (N = 20,000, intercept + 3 covariates, NumPy float64 inputs), one
chain of 500 warmup + 1,500 draws per setting, each setting in its own process (x64 is
a global switch).  Reported: likelihood evaluations per step / N, whether the chain
sampled in exact mode (the race cost more than N during warmup), acceptance rate, and
the posterior means of ``w`` against NUTS in NUTS posterior sds.

    python benchmarks/racing_mh_precision.py   # -> results/racing_mh_precision.{json,md}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
N = 20_000


def one(x64: bool) -> dict:
    import jax

    jax.config.update("jax_enable_x64", x64)
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    from subsample_mcmc import RacingMH

    rng = np.random.default_rng(3)
    x = rng.normal(size=(N, 3))
    y = rng.poisson(np.exp(x @ np.array([0.4, -0.8, 0.2]) + 0.5)).astype(np.float64)

    def model(x, y=None):
        b = numpyro.sample("b", dist.Normal(0, 2))
        w = numpyro.sample("w", dist.Normal(0, 1).expand([x.shape[1]]).to_event(1))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Poisson(jnp.exp(x @ w + b)), obs=y)

    ref = MCMC(NUTS(model), num_warmup=300, num_samples=600, progress_bar=False)
    ref.run(jax.random.PRNGKey(0), x, y)
    m = MCMC(RacingMH(model), num_warmup=500, num_samples=1500, progress_bar=False)
    m.run(jax.random.PRNGKey(1), x, y, extra_fields=("num_likelihood_evals", "exact_mode", "accept_prob"))
    f = m.get_extra_fields()
    w, w_ref = np.asarray(m.get_samples()["w"], np.float64), np.asarray(ref.get_samples()["w"], np.float64)
    return {
        "x64": x64,
        "evals_per_step_over_n": float(np.mean(f["num_likelihood_evals"])) / N,
        "exact_mode": bool(np.asarray(f["exact_mode"])[-1]),
        "accept_rate": float(np.mean(f["accept_prob"])),
        "mean_diff_in_nuts_sd": ((w.mean(0) - w_ref.mean(0)) / w_ref.std(0)).round(3).tolist(),
        "sd_ratio": (w.std(0) / w_ref.std(0)).round(3).tolist(),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("float32", "x64"):
        print(json.dumps(one(sys.argv[1] == "x64")))
        return
    rows = []
    for mode in ("float32", "x64"):
        out = subprocess.run([sys.executable, __file__, mode], capture_output=True, text=True, check=True,
                             env={**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")})
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "racing_mh_precision.json").write_text(json.dumps({"N": N, "rows": rows}, indent=1) + "\n")
    lines = ["# RacingMH defaults: float32 vs jax_enable_x64 (Poisson regression, N = 20,000)", "",
             "`python benchmarks/racing_mh_precision.py`; one chain, 500 warmup + 1,500 draws per row.", "",
             "| precision | evals per step / N | exact mode | accept | mean diff (NUTS sd) | sd ratio |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {'x64' if r['x64'] else 'float32'} | {r['evals_per_step_over_n']:.4f} | {r['exact_mode']} | "
                     f"{r['accept_rate']:.2f} | {r['mean_diff_in_nuts_sd']} | {r['sd_ratio']} |")
    (results / "racing_mh_precision.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
