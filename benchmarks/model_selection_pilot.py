"""ModelSelection's NUTS pilot on a float32 NegativeBinomial2 candidate: bounded, and named, against a
baseline revision whose pilot was unbounded.

Poisson (``lam ~ Gamma(2, 0.5)``) against NegativeBinomial2 (``mu ~ Gamma(2, 0.5)``, ``alpha ~
Exponential(1)``, concentration ``1 / alpha``) on ``y ~ Poisson(3)``, N = 5,000 (NumPy int64, keyword
data), ``ModelSelection([pois, nb2])`` defaults, 300 warmup + 300 draws.  With Poisson data the
NegativeBinomial2's posterior puts ``alpha`` near 0, a concentration in the thousands, where float32
``lgamma`` differences are noisy enough to break NUTS; ``pseudoprior="auto"`` sends that candidate to
the NUTS pilot.  Each configuration runs in a fresh process (:func:`compile_time.run_worker`), one CPU
core where ``taskset`` exists, the baseline in a ``git worktree``; a run past ``--timeout`` seconds is
killed and counted as censored.  Recorded: wall seconds, whether the pilot warned, ``auto_choice`` and
the posterior model probabilities.

    python benchmarks/model_selection_pilot.py --baseline b7f7870   # -> results/model_selection_pilot.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
import warnings
from pathlib import Path

from compile_time import ROOT, baseline_worktree, head_label, run_worker, write_results

HERE = Path(__file__).resolve().parent


def _worker() -> dict:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC

    import subsample_mcmc
    from subsample_mcmc import ModelSelection, model_posterior

    y = np.random.default_rng(0).poisson(3.0, 5_000)

    def pois(y=None):
        lam = numpyro.sample("lam", dist.Gamma(2.0, 0.5))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Poisson(lam), obs=y)

    def nb2(y=None):
        mu = numpyro.sample("mu", dist.Gamma(2.0, 0.5))
        alpha = numpyro.sample("alpha", dist.Exponential(1.0))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.NegativeBinomial2(mu, 1.0 / alpha), obs=y)

    t0 = time.perf_counter()
    kernel = ModelSelection([pois, nb2])
    mcmc = MCMC(kernel, num_warmup=300, num_samples=300, progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(1), y=y)
    return {"package": os.path.dirname(subsample_mcmc.__file__), "censored": False,
            "wall_seconds": time.perf_counter() - t0, "x64": bool(jax.config.jax_enable_x64),
            "pilot_warning": next((str(w.message) for w in caught if "pilot" in str(w.message)), None),
            "auto_choice": kernel.auto_choice,
            "probabilities": np.asarray(model_posterior(mcmc).probabilities, np.float64).tolist()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", help="git revision to compare against (float32 only)")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--output", type=Path, default=HERE / "results" / "model_selection_pilot")
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker()))
        return
    one_core = ("taskset", "-c", "0") if shutil.which("taskset") else ()
    script = Path(__file__).resolve()
    runs = []

    def run(label, source, x64):
        r = run_worker(str(script), ["--worker"], source, timeout=args.timeout,
                       env_extra={"JAX_ENABLE_X64": "1" if x64 else "0"}, prefix=one_core)
        r.update(revision=label, x64=x64)
        runs.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "pilot_warning"}), flush=True)

    run(head_label(), ROOT, False)
    run(head_label(), ROOT, True)
    if args.baseline:
        with baseline_worktree(args.baseline) as base:
            run(args.baseline, base, False)
    lines = [f"# ModelSelection's NUTS pilot on a float32 NegativeBinomial2: {head_label()}"
             + (f" against {args.baseline}" if args.baseline else ""), "",
             f"`python benchmarks/model_selection_pilot.py{' --baseline ' + args.baseline if args.baseline else ''}"
             f"`: Poisson vs NegativeBinomial2 on Poisson(3) data, N = 5,000, defaults, 300 + 300 draws, one core; "
             f"censored at {args.timeout:.0f} s.", "",
             "| revision | dtype | wall s | pilot warned | P(poisson), P(nb2) |", "|---|---|---|---|---|"]
    for r in runs:
        wall = f"> {r['wall_seconds']:.0f} (censored)" if r["censored"] else f"{r['wall_seconds']:.0f}"
        probs = ", ".join(f"{p:.3f}" for p in r.get("probabilities", [])) or "-"
        warned = "-" if r["censored"] else ("yes" if r.get("pilot_warning") else "no")
        lines.append(f"| {r['revision']} | {'float64' if r['x64'] else 'float32'} | {wall} | {warned} | {probs} |")
    write_results(args.output, runs, lines)


if __name__ == "__main__":
    main()
