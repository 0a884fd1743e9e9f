"""Where RacingMH's per-datum evaluations go: the cost of its default races by stage.

``RacingMH(logistic_model)`` with no options on the real data sets of
``peers_real_data.py`` (AER Fertility, openintro military), one chain of 2,000 warmup +
20,000 draws, seed 0.  Per race stage ``k`` (``race_stage``: 1 = the first mini-batch
decided; the doubling schedule reads ``first_batch x 2^(k-1)`` points per arm by stage
``k``, the last stage ends at ``N``): the fraction of steps that stopped there, their mean
``num_likelihood_evals`` and their share of all evaluations.

The race stops at stage ``k`` when the confidence bound at ``n_(k-1)`` points could not
separate the log MH ratio from ``log u``: the probability of reaching stage ``k`` falls like
``sigma sqrt(N / n_k)`` (a near-tie within the bound's width), while its cost grows like
``n_k``, so the expected cost of the tail grows like ``sqrt(n_k)`` toward the last stage
and the rare races that read everything carry much of the mean on large ``N``.

    python benchmarks/racing_mh_stages.py   # -> results/racing_mh_stages.{json,md}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATASETS = ("fertility", "military")
WARMUP, SAMPLES = 2000, 20000


def one(name: str) -> dict:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(HERE))
    import jax
    import jax.numpy as jnp
    import numpy as np
    from numpyro.infer import MCMC

    from experiments import logistic as L
    from experiments import peers as P
    from subsample_mcmc import RacingMH

    ds = P.load_dataset(name, n=None, seed=0)
    x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
    t = time.perf_counter()
    kernel = RacingMH(L.logistic_model)
    mcmc = MCMC(kernel, num_warmup=WARMUP, num_samples=SAMPLES, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), x, y, extra_fields=("num_likelihood_evals", "race_stage", "accept_prob"))
    seconds = time.perf_counter() - t
    f = mcmc.get_extra_fields()
    ev = np.asarray(f["num_likelihood_evals"], np.float64)
    st = np.asarray(f["race_stage"])
    n = int(x.shape[0])
    stages = []
    for s in np.unique(st):
        sel = st == s
        stages.append({"stage": int(s), "fraction_of_steps": float(sel.mean()), "mean_evals": float(ev[sel].mean()),
                       "share_of_evals": float(ev[sel].sum() / ev.sum())})
    last = st.max()
    return {
        "dataset": name, "n": n, "d": int(x.shape[1]), "seconds": seconds,
        "proposal": "crank_nicolson" if bool(np.asarray(mcmc.last_state.crank_nicolson)) else "random_walk",
        "mean_evals": float(ev.mean()), "accept_rate": float(np.mean(f["accept_prob"])),
        "first_stage_share": float(ev[st == 1].sum() / ev.sum()),
        "last_two_stages_share": float(ev[st >= last - 1].sum() / ev.sum()),
        "last_two_stages_fraction": float(np.mean(st >= last - 1)),
        "stages": stages,
    }


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2])))
        return
    rows = []
    for name in DATASETS:  # one process each: clean memory and compilation per data set
        out = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"{name}: mean evals {rows[-1]['mean_evals']:.0f}, last two stages "
              f"{100 * rows[-1]['last_two_stages_share']:.0f}% of them", file=sys.stderr)
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    payload = {"warmup": WARMUP, "samples": SAMPLES, "seed": 0, "rows": rows}
    (results / "racing_mh_stages.json").write_text(json.dumps(payload, indent=1) + "\n")
    lines = ["# Where RacingMH's evaluations go, by race stage (benchmarks/racing_mh_stages.py)", "",
             f"`RacingMH(logistic_model)` with no options, one chain, {WARMUP} warmup + {SAMPLES} draws (the "
             "sampling draws are tabulated), seed 0.", ""]
    for r in rows:
        lines += [f"## {r['dataset']}: N = {r['n']:,}, d = {r['d']}", "",
                  f"Proposal chosen: {r['proposal']}; mean evaluations per step {r['mean_evals']:,.0f}; acceptance "
                  f"{r['accept_rate']:.3f}; first stage {100 * r['first_stage_share']:.1f}% of the evaluations; the "
                  f"last two stages {100 * r['last_two_stages_share']:.1f}% of them from "
                  f"{100 * r['last_two_stages_fraction']:.3f}% of the steps; {r['seconds']:.0f} s.", "",
                  "| stage | fraction of steps | mean evals | share of evals |", "|---|---|---|---|"]
        lines += [f"| {s['stage']} | {s['fraction_of_steps']:.5f} | {s['mean_evals']:,.0f} | {s['share_of_evals']:.3f} |"
                  for s in r["stages"]]
        lines.append("")
    (results / "racing_mh_stages.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
