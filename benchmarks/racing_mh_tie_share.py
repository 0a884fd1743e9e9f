"""RacingMH's tie band: ``tie_share`` 0.5 against the default 0.8 (:data:`subsample_mcmc.kernels.mh.TIE_SHARE`).

Both keep the promise ``P(racing decision != exact decision) <= delta`` (the race at ``(1 - s) delta``, the
band ``epsilon = s delta / 2`` nats); a larger share widens the band, so fewer near-ties read far into the
data, and tightens the race's bound.  ``RacingMH(logistic_model)`` with its defaults but ``tie_share``, 2000
warmup + 10000 draws, 1 chain, seeds 0 and 1, on AER Fertility, openintro military and the correlated
d = 50 design of ``peers_real_data.py`` (N = 1e6): evaluations per step and per effective draw, acceptance,
mean and standard error over the seeds.

    python benchmarks/racing_mh_tie_share.py   # -> results/racing_mh_tie_share.{json,md}
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATASETS = (("fertility", None), ("military", None), ("synthetic50", 1_000_000))
SHARES = (0.5, 0.8)
SEEDS = (0, 1)


def main() -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(HERE))
    import jax.numpy as jnp

    from experiments import peers as P
    from racing_mh_defensive_reference import logistic_row, logistic_run, logistic_table

    rows = []
    for name, n in DATASETS:
        ds = P.load_dataset(name, n=n, seed=0)
        x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
        for share in SHARES:
            runs = [logistic_run(x, y, None, seed, tie_share=share) for seed in SEEDS]
            row = logistic_row(runs, dataset=name, n=int(x.shape[0]), p=int(x.shape[1]) + 1, tie_share=share)
            rows.append(row)
            print(f"{name} tie_share={share}: {row['evals_per_step']}", file=sys.stderr)
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "racing_mh_tie_share.json").write_text(json.dumps({"seeds": list(SEEDS), "rows": rows}, indent=1) + "\n")

    lines = ["# RacingMH's tie share (benchmarks/racing_mh_tie_share.py)", "",
             f"Defaults but `tie_share`; 2000 warmup + 10,000 draws, 1 chain, seeds {list(SEEDS)}, mean +- s.e.", ""]
    lines += logistic_table(rows, "tie_share", "tie_share")
    (results / "racing_mh_tie_share.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
