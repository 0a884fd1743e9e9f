"""XLA compile time of the kernels' programs, against a baseline revision of the package, in one run.

On a CPU most of a first ``mcmc.run`` is XLA compiling the kernel's programs (its init -- mode search,
Newton, proxy, checks -- and NumPyro's sampling loop around the step), not sampling: about 80% of the
wall time of a 300 + 300 draw RacingMH run of a logistic regression, and of the test suite.  XLA's CPU
compile time grows with the number of fused kernels it emits, so every traced copy of the model's
likelihood costs compile time; this benchmark measures what a change to the number of copies buys.

Each workload runs in a fresh process with JAX's persistent compilation cache off, once with this
checkout's package and once with the package of ``--baseline`` (a temporary ``git worktree``; the
``models/`` folder, installed from this checkout, must be the same in both), alternating, ``--repeats``
times.  Recorded per run: XLA backend compile seconds (``jax.monitoring``'s
``/jax/core/compile/backend_compile_duration``, all programs), wall seconds, and the posterior means
(the same answers from both revisions, up to floating-point reassociation).  The result is the ratio
baseline / current of the compile seconds and of the wall seconds, mean and standard error over the
repeats (pairs run back to back, so the machine's load is shared).

Workloads (NumPy float64 inputs, defaults, ``numpyro.infer.MCMC``):

* ``racing_mh``: ``RacingMH(model)``, Bayesian logistic regression, N = 20,000, d = 5, 2 vectorized
  chains, 300 warmup + 300 draws;
* ``model_selection``: ``ModelSelection(arch_models((1, 2)))`` on a simulated ARCH(2) series, N = 3,000,
  1 chain, 200 warmup + 200 draws.

    python benchmarks/compile_time.py --baseline 4778db5   # -> results/compile_time.{json,md}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKLOADS = ("racing_mh", "model_selection")


def _worker(name: str) -> dict:
    """One workload in this process; returns its measurements."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.monitoring
    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC

    compile_seconds = [0.0]

    def listener(event, seconds, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compile_seconds[0] += seconds

    jax.monitoring.register_event_duration_secs_listener(listener)
    import subsample_mcmc
    from subsample_mcmc import ModelSelection, RacingMH

    t0 = time.perf_counter()
    if name == "racing_mh":
        rng = np.random.default_rng(0)
        n, d = 20_000, 5
        x = rng.normal(size=(n, d))
        y = (rng.random(n) < 1.0 / (1.0 + np.exp(-x @ (0.5 * rng.normal(size=d))))).astype(np.float64)

        def model(x, y=None):
            b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
            with numpyro.plate("data", x.shape[0]):
                numpyro.sample("y", dist.Bernoulli(logits=x @ b), obs=y)

        mcmc = MCMC(RacingMH(model), num_warmup=300, num_samples=300, num_chains=2, chain_method="vectorized",
                    progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), x, y=y)
        means = np.asarray(mcmc.get_samples()["b"]).mean(0).tolist()
    elif name == "model_selection":
        from subsample_mcmc import model_posterior
        from subsample_mcmc.models.arch import arch_models, prepare, simulate_arch

        r, _ = simulate_arch(3003, order=2, alpha0=0.2, alpha_sum=0.5, nu=6.0, seed=2)
        data = prepare(r, orders=(1, 2))
        mcmc = MCMC(ModelSelection(arch_models(data.orders)), num_warmup=200, num_samples=200, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), np.asarray(data.y, np.float64))
        means = np.asarray(model_posterior(mcmc).probabilities).tolist()
    else:
        raise ValueError(f"unknown workload {name!r}; one of {WORKLOADS}")
    return {"workload": name, "compile_seconds": compile_seconds[0], "wall_seconds": time.perf_counter() - t0,
            "answer": means, "package": os.path.dirname(subsample_mcmc.__file__)}


def run_worker(script: str, worker_args: list, source: Path, timeout: float = None, env_extra: dict = None,
               prefix: tuple = ()) -> dict:
    """``python script *worker_args`` in a fresh process that imports the package under ``source``
    (persistent compilation cache off): the JSON of its last stdout line, which must name the
    package it imported (``"package"``), checked to be ``source``'s.  Past ``timeout`` seconds the
    process is killed and the result is ``{"censored": True, "wall_seconds": timeout}``.  ``prefix``:
    a command the process runs under (``("taskset", "-c", "0")``: one core)."""
    env = dict(os.environ, PYTHONPATH=str(source), JAX_PLATFORMS="cpu", **(env_extra or {}))
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # cold: every program compiled
    try:
        out = subprocess.run([*prefix, sys.executable, script, *worker_args], env=env, capture_output=True, text=True,
                             check=False, cwd=tempfile.gettempdir(), timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"censored": True, "wall_seconds": timeout}
    if out.returncode:
        raise RuntimeError(f"{script} {worker_args} from {source} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(result["package"]).resolve() != (source / "subsample_mcmc").resolve():
        raise RuntimeError(f"the worker imported {result['package']}, not the package under {source}")
    return result


@contextlib.contextmanager
def baseline_worktree(rev: str):
    """A temporary ``git worktree`` of revision ``rev`` (removed on exit): its path, whose package a
    worker can import through :func:`run_worker`."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base), rev], cwd=ROOT, check=True)
        try:
            yield base
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)


def head_label() -> str:
    """This checkout's short commit, ``+uncommitted`` when the package has changes."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "subsample_mcmc"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout.strip())
    return head + ("+uncommitted" if dirty else "")


def _run(name: str, source: Path) -> dict:
    return run_worker(__file__, ["--worker", name], source)


def mean_se(values):
    """``(mean, standard error)`` of ``values`` (NaN s.e. for one value)."""
    m = statistics.fmean(values)
    return m, (statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan"))


def write_results(output: Path, summary, lines: list) -> None:
    """``summary`` to ``output``.json and the markdown ``lines`` to ``output``.md (and printed)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    output.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", help="git revision to compare against (required unless --worker)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--output", type=Path, default=HERE / "results" / "compile_time")
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args.worker)))
        return
    if not args.baseline:
        ap.error("--baseline REV is required (the revision to compare this checkout against)")
    names = [w for w in args.workloads.split(",") if w]
    if subprocess.run(["git", "diff", "--quiet", args.baseline, "--", "models"], cwd=ROOT).returncode:
        sys.exit(f"models/ differs between {args.baseline} and this checkout: both runs import this checkout's")
    with baseline_worktree(args.baseline) as base:
        runs = {name: {"current": [], "baseline": []} for name in names}
        for rep in range(args.repeats):
            for name in names:
                order = [("current", ROOT), ("baseline", base)]
                for label, source in order if rep % 2 == 0 else order[::-1]:
                    r = _run(name, source)
                    runs[name][label].append(r)
                    print(f"{name:16s} {label:8s} compile {r['compile_seconds']:6.1f} s  "
                          f"wall {r['wall_seconds']:6.1f} s  answer {[round(a, 3) for a in r['answer']]}",
                          flush=True)
    summary = {"baseline": args.baseline, "current": head_label(),
               "repeats": args.repeats, "workloads": {}}
    lines = [f"# XLA compile time: {summary['current']} against {args.baseline}", "",
             f"`python benchmarks/compile_time.py --baseline {args.baseline} --repeats {args.repeats}`; {args.repeats} pairs per workload, "
             "fresh processes, persistent cache off; ratio = baseline / current (mean ± s.e. over pairs).", "",
             "| workload | compile s (baseline) | compile s (current) | compile ratio | wall ratio |",
             "|---|---|---|---|---|"]
    for name in names:
        cur, bas = runs[name]["current"], runs[name]["baseline"]
        c_ratio = mean_se([b["compile_seconds"] / c["compile_seconds"] for b, c in zip(bas, cur)])
        w_ratio = mean_se([b["wall_seconds"] / c["wall_seconds"] for b, c in zip(bas, cur)])
        summary["workloads"][name] = {
            "compile_seconds": {"baseline": [r["compile_seconds"] for r in bas],
                                "current": [r["compile_seconds"] for r in cur]},
            "wall_seconds": {"baseline": [r["wall_seconds"] for r in bas], "current": [r["wall_seconds"] for r in cur]},
            "answers": {"baseline": bas[0]["answer"], "current": cur[0]["answer"]},
            "compile_ratio": {"mean": c_ratio[0], "se": c_ratio[1]},
            "wall_ratio": {"mean": w_ratio[0], "se": w_ratio[1]},
        }
        lines.append(f"| {name} | {statistics.fmean(r['compile_seconds'] for r in bas):.1f} | "
                     f"{statistics.fmean(r['compile_seconds'] for r in cur):.1f} | "
                     f"{c_ratio[0]:.2f} ± {c_ratio[1]:.2f} | {w_ratio[0]:.2f} ± {w_ratio[1]:.2f} |")
    write_results(args.output, summary, lines)


if __name__ == "__main__":
    main()
