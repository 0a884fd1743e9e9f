"""RacingMH's checks at init, over chains: the Pareto ``k`` of its automatic proposal choice and the
residual-spread ratio of its rare-influential-data check.

``RacingMH(logistic_model)`` with no options on AER Fertility and openintro military (as in
``peers_real_data.py``) and on a rare-event logistic regression with a rare binary stratum (N = 200,000,
~0.5% events, the stratum 0.3% of the rows: the model a fresh user's trial found biased before the
check), 2 seeds x 8 vectorized chains, for several ``num_draws`` of
:func:`subsample_mcmc.kernels.reference_k_hat` (the default is the last one's value in the package).
Reported per setting: mean, standard deviation and maximum of ``k`` over the 16 chains, the fraction
of chains that chose the Crank-Nicolson-t move (``k <= K_HAT_MAX``), how many chains warned that
their start is not a mode, the range of ``residual_spread_ratio`` (the median over pairs of Laplace
draws of the rewards' sd over what a first batch typically sees) and the fraction of chains the
check sent to the exact step.  Only init runs (2 warmup + 2 draws).

    python benchmarks/racing_mh_k_hat.py   # -> results/racing_mh_k_hat.{json,md}
"""

from __future__ import annotations

import functools
import json
import os
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATASETS = ("fertility", "military", "rare_stratum")


def rare_stratum(n=200_000, seed=6):
    """Design and response of the rare-event logistic regression with a rare binary stratum."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=n)
    stratum = (rng.random(n) < 0.003).astype(np.float32)
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(-5.4 + 0.5 * x1 + 1.0 * stratum)))).astype(np.float32)
    return np.column_stack([x1, stratum]).astype(np.float32), y
NUM_DRAWS = (4000, 16000)
SEEDS, CHAINS = 2, 8


def main() -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(HERE))
    import jax
    import jax.numpy as jnp
    import numpy as np
    from numpyro.infer import MCMC

    import subsample_mcmc.numpyro.mh as mh_module
    from experiments import logistic as L
    from experiments import peers as P
    from subsample_mcmc import RacingMH
    from subsample_mcmc.kernels import K_HAT_MAX, reference_k_hat

    rows = []
    for name in DATASETS:
        if name == "rare_stratum":
            x, y = (jnp.asarray(v) for v in rare_stratum())
        else:
            ds = P.load_dataset(name, n=None, seed=0)
            x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
        for num_draws in NUM_DRAWS:
            mh_module.reference_k_hat = functools.partial(reference_k_hat, num_draws=num_draws)
            ks, off_mode, ratios, exact = [], 0, [], []
            for seed in range(SEEDS):
                mcmc = MCMC(RacingMH(L.logistic_model), num_warmup=2, num_samples=2, num_chains=CHAINS,
                            chain_method="vectorized", progress_bar=False)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    mcmc.run(jax.random.PRNGKey(seed), x, y)
                off_mode += sum("is not a mode" in str(w.message) for w in caught)
                ks += np.asarray(mcmc.last_state.laplace_k_hat, np.float64).tolist()
                ratios += np.asarray(mcmc.last_state.residual_spread_ratio, np.float64).tolist()
                exact += np.asarray(mcmc.last_state.exact_mode, bool).tolist()
            k = np.array(ks)
            rows.append({"dataset": name, "n": int(x.shape[0]), "num_draws": num_draws, "k": ks,
                         "mean": float(k.mean()), "sd": float(k.std(ddof=1)), "max": float(k.max()),
                         "fraction_crank_nicolson": float(np.mean(k <= K_HAT_MAX)), "off_mode_warnings": off_mode,
                         "spread_ratio": ratios, "spread_ratio_min": float(np.min(ratios)),
                         "spread_ratio_max": float(np.max(ratios)), "fraction_exact": float(np.mean(exact))})
            print(f"{name} num_draws={num_draws}: k {k.mean():.3f} +- {k.std(ddof=1):.3f} (max {k.max():.3f}), "
                  f"CN {np.mean(k <= K_HAT_MAX):.3f}", file=sys.stderr)
        mh_module.reference_k_hat = reference_k_hat
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    payload = {"seeds": SEEDS, "chains": CHAINS, "k_hat_max": K_HAT_MAX, "rows": rows}
    (results / "racing_mh_k_hat.json").write_text(json.dumps(payload, indent=1) + "\n")
    lines = ["# RacingMH's automatic proposal choice over chains (benchmarks/racing_mh_k_hat.py)", "",
             f"`RacingMH(logistic_model)`, {SEEDS} seeds x {CHAINS} vectorized chains; Crank-Nicolson-t when "
             f"k <= {K_HAT_MAX}.", "",
             "| data | N | num_draws | k mean | k sd | k max | chains choosing CN | off-mode warnings "
             "| spread ratio (min-max) | chains sent to the exact step |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['dataset']} | {r['n']:,} | {r['num_draws']:,} | {r['mean']:.3f} | {r['sd']:.3f} | {r['max']:.3f} "
              f"| {r['fraction_crank_nicolson']:.3f} | {r['off_mode_warnings']} "
              f"| {r['spread_ratio_min']:.2f}-{r['spread_ratio_max']:.2f} | {r['fraction_exact']:.3f} |" for r in rows]
    (results / "racing_mh_k_hat.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
