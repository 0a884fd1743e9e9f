"""ModelSelection with its defaults against its exact counterpart (``method="exact"``), on the instance
with closed-form answers: polynomial degree 1-3, conjugate Gaussian priors, known noise
(``subsample_mcmc.models.polynomial``), with the cubic coefficient set so that degrees 2 and 3 are equally
probable (``log p(y | 3) = log p(y | 2)``, found by root finding on the closed-form evidences).

Per seed (fresh data and a fresh chain per seed), for ``ModelSelection(models)`` and
``ModelSelection(models, method="exact")``: the posterior model probabilities and their MCSE against the
closed form (z-scores), per-datum likelihood evaluations per sweep (everything the sweep computes: the
model race with the proxies' cost, and the selected model's MH step), the ESS of the indicator of degree 3
(ArviZ, bulk), and the steady sampling time (a second ``run`` from ``post_warmup_state``: no compilation).
Reported: mean and standard error over seeds of each figure and of the racing/exact ratios of ESS per
million evaluations and ESS per second.

    python benchmarks/model_selection.py [--n 100000] [--seeds 4]   # -> results/model_selection.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEGREES = (1, 2, 3)


def balanced_data(n, seed):
    import numpy as np
    from scipy.optimize import brentq

    from subsample_mcmc.models import polynomial as pm

    x, noise = pm.simulate(n, [0.0], seed=seed)

    def data(c3):
        return x, 0.5 + 0.3 * x - 0.2 * x ** 2 + c3 * x ** 3 + noise

    c3 = brentq(lambda c: pm.log_evidence(*data(c), 3) - pm.log_evidence(*data(c), 2), 0.0, 0.2)
    return (*data(c3), float(c3), np.asarray(pm.model_probabilities(*data(c3), DEGREES)))


def run_one(method, x, y, seed, warmup, samples):
    import arviz as az
    import jax
    import numpy as np
    from numpyro.infer import MCMC

    from subsample_mcmc import ModelSelection, model_posterior
    from subsample_mcmc.models import polynomial as pm

    kernel = ModelSelection(pm.polynomial_models(DEGREES), **({} if method == "racing" else {"method": "exact"}))
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=10, progress_bar=False)
    t0 = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), x, y)
    first = time.perf_counter() - t0
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.num_samples = samples
    mcmc.run(mcmc.post_warmup_state.rng_key, x, y, extra_fields=("num_likelihood_evals", "race_stage"))
    # a third run of the same length: compiled, so its time is the steady sampling time
    mcmc.post_warmup_state = mcmc.last_state
    t0 = time.perf_counter()
    mcmc.run(mcmc.post_warmup_state.rng_key, x, y, extra_fields=("num_likelihood_evals", "race_stage"))
    steady = time.perf_counter() - t0
    post = model_posterior(mcmc)
    k = np.asarray(mcmc.get_samples()["model"])
    ess = float(az.ess(np.asarray(k == 2, np.float64)[None], method="bulk"))
    fields = mcmc.get_extra_fields()
    evals = float(np.mean(fields["num_likelihood_evals"]))
    stages = np.asarray(fields["race_stage"])
    return dict(probabilities=post.probabilities.tolist(), stderr=post.stderr.tolist(),
                evals_per_sweep=evals, ess_degree3=ess, steady_seconds=steady, first_run_seconds=first,
                ess_per_million_evals=ess / (evals * samples) * 1e6, ess_per_second=ess / steady,
                first_stage_fraction=float(np.mean(stages == 1)) if method == "racing" else None)


def mean_se(values):
    import numpy as np

    v = np.asarray(values, np.float64)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")


def main() -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--output", default=str(HERE / "results" / "model_selection"))
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite the markdown from the JSON of an earlier run (closed forms recomputed)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import gc

    import jax

    if args.report_only:
        report(json.loads(Path(args.output + ".json").read_text()), args.output)
        return
    runs = []
    for seed in range(args.seeds):
        x, y, c3, exact = balanced_data(args.n, seed)
        row = dict(seed=seed, c3=c3, closed_form=exact.tolist())
        for method in ("racing", "exact"):
            res = run_one(method, x, y, seed, args.warmup, args.samples)
            p, se = np.asarray(res["probabilities"]), np.asarray(res["stderr"])
            res["z"] = [float(v) for v in np.where(se > 0, (p - exact) / np.where(se > 0, se, 1), 0.0)]
            row[method] = res
            print(seed, method, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()}, flush=True)
            # drop the compiled programs: each run compiles its own, and a process holding thousands of
            # XLA executables runs out of memory mappings (vm.max_map_count; LLVM "Cannot allocate memory")
            jax.clear_caches()
            gc.collect()
        runs.append(row)
    summary = {}
    for key in ("evals_per_sweep", "ess_degree3", "ess_per_million_evals", "ess_per_second", "steady_seconds",
                "first_run_seconds"):
        for method in ("racing", "exact"):
            summary[f"{method}.{key}"] = mean_se([r[method][key] for r in runs])
    for key in ("ess_per_million_evals", "ess_per_second"):
        summary[f"ratio.{key}"] = mean_se([r["racing"][key] / r["exact"][key] for r in runs])
    summary["ratio.evals_per_sweep"] = mean_se([r["exact"]["evals_per_sweep"] / r["racing"]["evals_per_sweep"]
                                                for r in runs])
    zs = {m: np.asarray([r[m]["z"] for r in runs]) for m in ("racing", "exact")}
    summary["max_abs_z"] = {m: float(np.max(np.abs(z))) for m, z in zs.items()}
    out = dict(n=args.n, seeds=args.seeds, warmup=args.warmup, samples=args.samples, degrees=DEGREES,
               runs=runs, summary=summary)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output + ".json").write_text(json.dumps(out, indent=1))
    report(out, args.output)


def report(out, output):
    from types import SimpleNamespace

    args = SimpleNamespace(**{k: out[k] for k in ("n", "seeds", "warmup", "samples")})
    runs, summary = out["runs"], out["summary"]
    for r in runs:
        if "closed_form" not in r:  # a JSON written before the key was named apart from the exact method's
            r["closed_form"] = balanced_data(out["n"], r["seed"])[3].tolist()
    lines = [f"# ModelSelection vs exact: polynomial degree {DEGREES}, N = {args.n:,}, {args.seeds} seeds",
             "", f"`python benchmarks/model_selection.py --n {args.n} --seeds {args.seeds}`; {args.warmup} warmup, "
             f"{args.samples} draws per chain, one chain per seed; mean ± s.e. over seeds.", "",
             "| figure | racing (defaults) | exact | racing / exact |", "|---|---|---|---|"]

    def fmt(m, s):
        return f"{m:.4g} ± {s:.2g}"

    for key, label in (("evals_per_sweep", "likelihood evaluations per sweep"), ("ess_degree3", "ESS of 1{degree 3}"),
                       ("ess_per_million_evals", "ESS per million evaluations"), ("ess_per_second", "ESS per second"),
                       ("steady_seconds", "sampling seconds (compiled)"), ("first_run_seconds", "init + warmup + compile seconds")):
        ratio = summary.get(f"ratio.{key}")
        if key == "evals_per_sweep":
            ratio_s = f"{fmt(*summary['ratio.evals_per_sweep'])}x fewer"
        else:
            ratio_s = "" if ratio is None else fmt(*ratio)
        lines.append(f"| {label} | {fmt(*summary[f'racing.{key}'])} | {fmt(*summary[f'exact.{key}'])} | {ratio_s} |")
    lines += ["", f"Largest |z| of a model probability against the closed form over seeds and degrees: racing "
              f"{summary['max_abs_z']['racing']:.2f}, exact {summary['max_abs_z']['exact']:.2f}.", "",
              "| seed | closed-form p(degree 2, 3) | racing p ± MCSE | exact-method p ± MCSE |", "|---|---|---|---|"]
    for r in runs:
        def pp(m):
            return ", ".join(f"{p:.3f} ± {s:.3f}" for p, s in zip(r[m]["probabilities"][1:], r[m]["stderr"][1:]))
        lines.append(f"| {r['seed']} | {r['closed_form'][1]:.3f}, {r['closed_form'][2]:.3f} | {pp('racing')} | {pp('exact')} |")
    Path(output + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
