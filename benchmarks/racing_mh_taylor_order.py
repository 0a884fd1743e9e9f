"""RacingMH's automatic Taylor-proxy order against forced orders 2 and 3, over seeds.

``RacingMH(logistic_model)`` with no options (``taylor_order=None``: the order chosen at init
from the race cost predicted on pairs of Laplace draws) against ``taylor_order=2`` and
``taylor_order=3``, on the real data sets of ``peers_real_data.py`` (AER Fertility, openintro
military), the same logistic model.  Per (data set, variant, seed): one chain through
:func:`experiments.logistic.timed_run` -- 2,000 warmup + 10,000 draws in NumPyro's ``MCMC``,
then a compiled steady continuation of 20,000 steps, timed alone.  Reported per variant (mean
and standard error over seeds): the order used, per-datum likelihood evaluations per step
(``num_likelihood_evals``, every computation in evaluation units), data read per step (evals
divided by the calibrated cost of one raced point), the fraction of steps whose race read all
``N`` data, steady ms per step, min bulk ESS of the steady stretch, min-ESS per steady second,
evaluations per effective draw, and the seconds of ``mcmc.warmup`` (init, compilation, warmup); and
per seed the ratios of the default to
``taylor_order=2`` (same seed).

Seeds differ in the chain's key only (the data are fixed); evaluations per step are noisy
because a race that reads all N data happens once in several thousand steps and costs 2 N
points.

    python benchmarks/racing_mh_taylor_order.py            # -> results/racing_mh_taylor_order.{json,md}
    python benchmarks/racing_mh_taylor_order.py --seeds 3  # seeds 0, 1, 2 (the default)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATASETS = ("fertility", "military")
VARIANTS = {"default": {}, "taylor_order=2": {"taylor_order": 2}, "taylor_order=3": {"taylor_order": 3}}
WARMUP, SAMPLES, STEADY = 2000, 10000, 20000
FULL_READ_SHARE = 0.99  # a step whose evaluations reach this share of 2 N point-costs read all N


def one(name: str, variant: str, seed: int) -> dict:
    """One chain of one variant on one data set (run in its own process)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(HERE))
    import jax.numpy as jnp
    import numpy as np

    from experiments import logistic as L
    from experiments import peers as P
    from subsample_mcmc.numpyro import RacingMH

    ds = P.load_dataset(name)
    x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
    kernel = RacingMH(L.logistic_model, **VARIANTS[variant])
    r = L.timed_run(kernel, (x, y), {}, num_warmup=WARMUP, num_samples=SAMPLES, num_steady=STEADY, seed=seed,
                    extra_fields=("num_likelihood_evals", "race_stage"))
    evals = np.asarray(r.extra_steady["num_likelihood_evals"], np.float64)
    ess = L.ess_summary(r.theta_steady)
    point = float(kernel._cost("point"))
    n = int(x.shape[0])
    return {
        "data": name, "variant": variant, "seed": seed, "n": n, "order": kernel.proxy_order,
        "exact_mode": bool(np.asarray(r.mcmc.last_state.exact_mode)),
        "evals_per_step": float(evals.mean()), "point_cost": point, "reads_per_step": float(evals.mean()) / point,
        # a full read counts 2 N point-costs, truncated to an integer
        "full_read_fraction": float(np.mean(evals >= FULL_READ_SHARE * 2 * n * point)),
        "steady_ms_per_step": 1e3 * r.steady_seconds / STEADY, "min_ess": float(ess["min_ess"]),
        "min_ess_per_s": float(ess["min_ess"]) / r.steady_seconds,
        "evals_per_effective_draw": float(evals.sum()) / float(ess["min_ess"]),
        "warmup_seconds": r.warmup_seconds,
    }


def _mean_se(values):
    import numpy as np

    v = np.asarray(values, np.float64)
    return float(v.mean()), (float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan"))


def _num(v, digits=3):
    return f"{v:,.0f}" if abs(v) >= 10 ** digits else f"{v:.{digits}g}"


def _fmt(m, se, digits=3):
    return f"{_num(m, digits)} ± {_num(se, 2)}" if se == se else _num(m, digits)


def markdown(payload: dict) -> str:
    import numpy as np

    runs, meta = payload["runs"], payload["meta"]
    lines = ["# RacingMH's automatic Taylor-proxy order against forced orders (benchmarks/racing_mh_taylor_order.py)",
             "", f"`RacingMH(logistic_model)` with no options (`taylor_order=None`) against `taylor_order=2` and "
             f"`taylor_order=3`; one chain per run, {WARMUP} warmup + {SAMPLES} draws, then {STEADY} steady steps "
             f"(compiled, timed alone); seeds {meta['seeds']} (the chain's key); mean ± s.e. over seeds. "
             f"Commit {meta['git_commit'][:10]}{' (+ modified files)' if meta['git_dirty'] else ''}; "
             f"{meta['date']}; {meta['cpu_count']} CPU cores (load average {meta['loadavg_start'][0]:.1f} at the start, "
             f"{meta['loadavg_end'][0]:.1f} at the end); run {meta['minutes']:.1f} min.", "",
             "Columns: *order* = the proxy order used (per seed); *evals/step* = `num_likelihood_evals` per steady "
             "step (every computation in likelihood-evaluation units); *reads/step* = evals / the calibrated cost "
             "of one raced point (both arms); *full reads* = fraction of steps whose race read all N; "
             "*evals/draw* = evaluations per effective draw (min bulk ESS); *warmup s* = `mcmc.warmup` (init with the "
             "mode search and proxy passes, compilation, warmup).", ""]
    if meta.get("full_read_share") != FULL_READ_SHARE:
        lines += ["*full reads*: n/a in this run (its test compared the truncated integer count with 2 N point-costs "
                  "less 0.5 and missed most reads of all N; fixed since).", ""]
    for name in payload["datasets"]:
        rs = [r for r in runs if r["data"] == name]
        if not rs:
            continue
        full_ok = meta.get("full_read_share") == FULL_READ_SHARE
        lines += [f"## {name}: N = {rs[0]['n']:,}", "",
                  "| variant | order | evals/step | reads/step | full reads | steady ms/step | min ESS | "
                  "min-ESS/s steady | evals/draw | warmup s |", "|---|---|---|---|---|---|---|---|---|---|"]
        for variant in VARIANTS:
            v = [r for r in rs if r["variant"] == variant]
            if not v:
                continue
            col = lambda k: _mean_se([r[k] for r in v])  # noqa: E731
            orders = "/".join(str(r["order"]) for r in v)
            lines.append(f"| {variant} | {orders} | {_fmt(*col('evals_per_step'))} | {_fmt(*col('reads_per_step'))} "
                         f"| {_fmt(*col('full_read_fraction'), 2) if full_ok else 'n/a'} | {_fmt(*col('steady_ms_per_step'))} "
                         f"| {_fmt(*col('min_ess'))} | {_fmt(*col('min_ess_per_s'))} "
                         f"| {_fmt(*col('evals_per_effective_draw'))} | {_fmt(*col('warmup_seconds'))} |")
        pairs = {}
        for r in rs:
            pairs.setdefault(r["seed"], {})[r["variant"]] = r
        ratios = {k: [p["default"][k] / p["taylor_order=2"][k] for p in pairs.values()
                      if "default" in p and "taylor_order=2" in p]
                  for k in ("evals_per_step", "steady_ms_per_step", "min_ess_per_s")}
        if ratios["evals_per_step"]:
            lines += ["", "Default / `taylor_order=2`, same seed: evals per step "
                      f"{_fmt(*_mean_se(ratios['evals_per_step']))}, steady time per step "
                      f"{_fmt(*_mean_se(ratios['steady_ms_per_step']))}, min-ESS/s steady "
                      f"{_fmt(*_mean_se(ratios['min_ess_per_s']))} (per seed: "
                      + ", ".join(f"{a:.2f}" for a in ratios["min_ess_per_s"]) + ")."]
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "racing_mh_taylor_order.json")
    ap.add_argument("--worker", nargs=3, metavar=("DATA", "VARIANT", "SEED"), help=argparse.SUPPRESS)
    ap.add_argument("--markdown-only", action="store_true", help="rewrite the .md from the .json")
    args = ap.parse_args(argv)
    if args.markdown_only:
        args.out.with_suffix(".md").write_text(markdown(json.loads(args.out.read_text())))
        return
    if args.worker:
        print(json.dumps(one(args.worker[0], args.worker[1], int(args.worker[2]))))
        return
    import datetime

    t0 = time.perf_counter()
    load_start = list(os.getloadavg())
    runs = []
    for name in args.datasets:
        for seed in range(args.seeds):
            for variant in VARIANTS:
                out = subprocess.run([sys.executable, __file__, "--worker", name, variant, str(seed)],
                                     capture_output=True, text=True)
                if out.returncode != 0:
                    raise RuntimeError(f"{name} / {variant} / seed {seed} failed:\n{out.stderr[-3000:]}")
                r = json.loads(out.stdout.strip().splitlines()[-1])
                runs.append(r)
                print(f"[{time.perf_counter() - t0:7.1f} s] {name} {variant} seed {seed}: order {r['order']}, "
                      f"evals/step {r['evals_per_step']:.0f}, steady {r['steady_ms_per_step']:.3f} ms, "
                      f"min ESS {r['min_ess']:.0f}", file=sys.stderr, flush=True)

    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=HERE, capture_output=True, text=True, check=True).stdout
        except Exception:  # noqa: BLE001
            return ""

    meta = {"seeds": list(range(args.seeds)), "full_read_share": FULL_READ_SHARE, "git_commit": git("rev-parse", "HEAD").strip() or "unknown",
            "git_dirty": [ln[3:] for ln in git("status", "--porcelain", "--untracked-files=no").splitlines()],
            "date": datetime.datetime.now().isoformat(timespec="seconds"), "cpu_count": os.cpu_count(),
            "loadavg_start": load_start, "loadavg_end": list(os.getloadavg()),
            "minutes": (time.perf_counter() - t0) / 60}
    payload = {"meta": meta, "datasets": args.datasets, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1))
    args.out.with_suffix(".md").write_text(markdown(payload))
    print(markdown(payload))


if __name__ == "__main__":
    main()
