r"""The synthetic experiment of Sec. 5.1 / App. C.1 of Chen & Ghahramani (2016): its benchmark grid,
runner and tables.  The populations and the error-rate measurement of one setting live in
:mod:`subsample_mcmc.testing` (:func:`make_problem`, :func:`run_setting`), re-exported here."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from subsample_mcmc.racing import clopper_pearson
from subsample_mcmc.testing import DISTRIBUTIONS, Problem, make_problem, run_setting

__all__ = [
    "DISTRIBUTIONS", "make_problem", "Problem", "run_setting",
    "METHOD_CONFIGS", "SIGMAS", "GridSetting", "benchmark_grid", "merge_records",
    "run_grid_setting", "run_grid", "summarize", "records_to_markdown",
    "RESULTS_PATH", "NOTEBOOK_SIZE_ENV", "notebook_records",
]

# ----------------------------------------------------------------------------------
# The benchmark grid of Sec. 5.1 / App. C.1 (Fig. 1, 5, 6, 7) and its runner
# ----------------------------------------------------------------------------------

#: (method, variance) pairs of the benchmark; ``variance`` does not apply to lil'UCB.
METHOD_CONFIGS = (
    ("normal", "pairwise"),
    ("normal", "marginal"),
    ("ebs", "pairwise"),
    ("ebs", "marginal"),
    ("lil_ucb", None),
)
SIGMAS = (0.1, 1e-4, 1e-5)
FULL_DELTAS = (0.001, 0.01, 0.05, 0.1)
SMALL_DELTAS = (0.001, 0.01, 0.1)


class GridSetting(NamedTuple):
    """One cell of the benchmark: a problem, a racing method and how many races.

    ``races`` is run as ``races // chunk`` calls of :func:`run_setting` with
    ``chunk`` races each (distinct seeds), so one compilation serves every race
    count that is a multiple of ``chunk``.
    """

    num_arms: int
    population_size: int
    distribution: str
    sigma: float
    method: str
    variance: str | None
    delta: float
    races: int
    chunk: int


def _full_races(num_arms: int, method: str, sigma: float, distribution: str) -> tuple[int, int]:
    """``(races, chunk)`` of the full grid, sized to its measured cost on 2 CPU cores.

    Per race (sequential ``lax.map``, N = 1e5), reading every reward costs about
    3 / 8 / 80 ms for D = 2 / 10 / 100 with Racing-Normal or -EBS.  lil'UCB pulls
    one reward per loop iteration (~3 us at D = 100): about 0.04 / 0.45 / 30 s per
    race when it reads everything, which it does at sigma = 0.1 and, because its
    scale C/2 follows the huge range of the LogNormal rewards, often at smaller
    sigma too.  Expensive settings therefore get fewer races.
    """
    hard, mid = sigma >= 0.1, sigma >= 1e-4
    heavy = distribution == "lognormal"
    if method == "normal":
        return {2: (2000, 500), 10: (1000, 250), 100: (100, 25)}[num_arms]
    if method == "ebs":
        return {2: (1000, 250), 10: (500, 250), 100: (50, 25)}[num_arms]
    # lil'UCB
    if num_arms == 2:
        return (200, 50)
    if num_arms == 10:
        return (10, 5) if hard else ((20, 5) if mid or heavy else (100, 5))
    if hard:
        return (1, 1)
    if mid:
        return (1, 1) if heavy else (4, 1)
    return (2, 1) if heavy else (20, 1)


LIL_UCB_D100_DELTAS = (0.001, 0.1)


def benchmark_grid(size: str = "full") -> list[GridSetting]:
    r"""The settings of the synthetic best-arm benchmark (Sec. 5.1, App. C.1).

    ``size="full"``: the paper's grid -- D in {2, 10, 100} arms, N = 1e5 rewards
    per arm from Normal / Uniform / LogNormal(0, 2), reward std sigma in
    {0.1, 1e-4, 1e-5}, delta in {1e-3, 1e-2, 5e-2, 0.1}, Racing-Normal and
    Racing-EBS with the pairwise (``sigma_hat_{i,j}``, Fig. 1, 6, 7) and marginal
    (``sigma_hat_i``, Fig. 5) variance estimates, and adapted lil'UCB (heuristic
    setting of Jamieson et al. 2014).  lil'UCB at D = 100 often reads all 1e7
    rewards one at a time (~30 s per race), so it is run at delta in {1e-3, 0.1}
    only (``LIL_UCB_D100_DELTAS``) with one to twenty races.

    ``size="small"``: the Fig. 1 panels at reduced cost for CI -- D = 10,
    N = 1e4, pairwise estimates, delta in {1e-3, 1e-2, 0.1}, ten to four
    hundred races per setting (about twenty seconds on 2 cores).
    """
    settings = []
    if size == "full":
        for d in (2, 10, 100):
            for method, variance in METHOD_CONFIGS:
                for sigma in SIGMAS:
                    deltas = FULL_DELTAS
                    if method == "lil_ucb" and d == 100:
                        deltas = LIL_UCB_D100_DELTAS
                    for dist in DISTRIBUTIONS:
                        races, chunk = _full_races(d, method, sigma, dist)
                        for delta in deltas:
                            settings.append(GridSetting(d, 100_000, dist, sigma, method, variance,
                                                        delta, races, chunk))
    elif size == "small":
        counts = {"normal": (400, 400), "ebs": (100, 100), "lil_ucb": (10, 10)}
        for method, variance in METHOD_CONFIGS:
            if variance == "marginal":
                continue
            races, chunk = counts[method]
            for sigma in SIGMAS:
                for dist in DISTRIBUTIONS:
                    for delta in SMALL_DELTAS:
                        settings.append(GridSetting(10, 10_000, dist, sigma, method, variance,
                                                    delta, races, chunk))
    else:
        raise ValueError(f"size must be 'full' or 'small', got {size!r}")
    return settings


def merge_records(parts: list[dict]) -> dict:
    """Pool chunks of races of one setting: errors and reads add up; the
    Clopper-Pearson interval is recomputed on the pooled count."""
    first = dict(parts[0])
    races = sum(p["races"] for p in parts)
    errors = sum(p["errors"] for p in parts)
    first.update(
        races=races,
        errors=errors,
        error_rate=errors / races,
        error_ci=clopper_pearson(errors, races),
        errors_to_lower=sum(p.get("errors_to_lower", 0) for p in parts),
        fraction_read=sum(p["fraction_read"] * p["races"] for p in parts) / races,
        seconds=sum(p["seconds"] for p in parts),
    )
    return first


def run_grid_setting(problem: Problem, setting: GridSetting, *, seed: int = 0) -> dict:
    """Run one :class:`GridSetting` on ``problem`` in chunks (see :func:`run_setting`).

    Chunk ``c`` uses the race seed ``seed * 100003 + c``; races run one after
    another (``batch_size=None``).  The record's ``variance`` is ``None`` for
    lil'UCB, to which it does not apply.
    """
    parts = []
    for c in range(max(setting.races // setting.chunk, 1)):
        parts.append(run_setting(
            problem, method=setting.method, delta=setting.delta,
            variance=setting.variance or "pairwise", num_races=setting.chunk,
            seed=seed * 100003 + c, batch_size=None,
        ))
    record = merge_records(parts)
    record["variance"] = setting.variance
    record["error_ci"] = list(record["error_ci"])
    return record


def run_grid(
    settings: list[GridSetting],
    *,
    seed: int = 0,
    progress: bool = True,
    on_record=None,
) -> list[dict]:
    """Run every setting of a grid; return one :func:`run_setting`-style record each.

    Problems are built once per ``(D, N, distribution, sigma)`` with
    ``make_problem(seed, ...)``.  Before the first setting of each compiled
    configuration one untimed chunk is run on the cheapest (sigma = 1e-5) problem,
    so the records' ``seconds`` exclude compilation; the compile-and-warm-up
    times are returned in each record as ``warmup_seconds`` of the setting that
    triggered it (0 otherwise).  ``on_record(record, done, total)`` is called after
    each setting (e.g. to save partial results).
    """
    from tqdm import tqdm

    problems: dict = {}

    def problem_for(d, n, dist, sigma):
        k = (d, n, dist, sigma)
        if k not in problems:
            problems[k] = make_problem(seed, d, n, dist, sigma)
        return problems[k]

    warmed = set()
    records = []
    bar = tqdm(settings, disable=not progress, desc="racing grid", unit="setting")
    for i, s in enumerate(bar):
        bar.set_postfix_str(f"D={s.num_arms} {s.method}/{s.variance} sigma={s.sigma:g} {s.distribution} delta={s.delta:g}")
        config = (s.method, s.variance, s.num_arms, s.population_size, s.chunk)
        warm = 0.0
        if config not in warmed:
            t0 = time.perf_counter()
            cheap = problem_for(s.num_arms, s.population_size, "uniform", min(SIGMAS))
            run_setting(cheap, method=s.method, delta=0.1, variance=s.variance or "pairwise",
                        num_races=s.chunk, seed=10**9, batch_size=None)
            warm = time.perf_counter() - t0
            warmed.add(config)
        record = run_grid_setting(problem_for(s.num_arms, s.population_size, s.distribution, s.sigma),
                                  s, seed=seed)
        record["warmup_seconds"] = warm
        records.append(record)
        if on_record is not None:
            on_record(record, i + 1, len(settings))
    return records


def _label(method: str, variance: str | None) -> str:
    name = {"normal": "Racing-Normal", "ebs": "Racing-EBS", "lil_ucb": "lil'UCB",
            "normal_union": "Racing-Normal (union)", "exact": "exact"}.get(method, method)
    return name if variance is None else f"{name} ({variance})"


def summarize(records: list[dict]) -> dict:
    r"""Headline numbers of a benchmark run.

    * ``max_error_ratio[D]``: ``max error_rate / delta`` over the Racing-Normal
      settings with D arms (Prop. 3 promises error <= delta; ratios near 1 at
      sigma = 0.1 are the "sharp" bound of Fig. 1(b)), with the setting where it
      occurs;
    * ``exceed``: settings whose whole 95% Clopper-Pearson interval lies above
      delta (error exceeds delta beyond the interval);
    * ``fraction_at``: mean over distributions of the fraction of the ``N D``
      rewards read at the largest delta, keyed ``(D, label, sigma)``;
    * ``full_read_errors``: settings with errors although every race read all
      ``N D`` rewards -- such a race knows the exact means, so its errors are
      numerical, not statistical.
    """
    out: dict = {"max_error_ratio": {}, "exceed": [], "fraction_at": {}, "full_read_errors": []}
    for r in records:
        if r["errors"] > 0 and r["fraction_read"] >= 1.0 - 1e-12:
            out["full_read_errors"].append(r)
        if r["method"] == "normal":
            ratio = r["error_rate"] / r["delta"]
            best = out["max_error_ratio"].get(r["num_arms"])
            if best is None or ratio > best[0]:
                out["max_error_ratio"][r["num_arms"]] = (ratio, r)
        if r["error_ci"][0] > r["delta"]:
            out["exceed"].append(r)
    top = max(r["delta"] for r in records)
    groups: dict = {}
    for r in records:
        if r["delta"] == top:
            key = (r["num_arms"], _label(r["method"], r["variance"]), r["sigma"])
            groups.setdefault(key, []).append(r["fraction_read"])
    out["fraction_at"] = {k: float(np.mean(v)) for k, v in sorted(groups.items())}
    out["fraction_delta"] = top
    return out


def records_to_markdown(records: list[dict], header: str = "", *, table: bool = True) -> str:
    """A markdown report: headline summary (:func:`summarize`) and, with ``table``,
    one row per setting -- error rate with its 95% Clopper-Pearson interval, whether
    the error exceeds delta beyond the interval, fraction of rewards read, races, time."""
    s = summarize(records)
    lines = [header.rstrip(), ""] if header else []
    lines += ["## Headline", "", "Racing-Normal, max empirical error / delta per D:", ""]
    for d, (ratio, r) in sorted(s["max_error_ratio"].items()):
        lo, hi = r["error_ci"]
        lines.append(
            f"- D = {d}: {ratio:.2f} ({r['errors']}/{r['races']} errors at delta = {r['delta']:g}, "
            f"{r['variance']}, {r['distribution']}, sigma = {r['sigma']:g}; 95% CI [{lo:.4f}, {hi:.4f}])"
        )
    lines += ["", "Settings whose error exceeds delta beyond the 95% CI (CI lower end > delta):", ""]
    if not s["exceed"]:
        lines.append("- none")
    for r in s["exceed"]:
        lo, hi = r["error_ci"]
        full = " -- every race read all N D rewards" if r in s["full_read_errors"] else ""
        lines.append(
            f"- D = {r['num_arms']} {_label(r['method'], r['variance'])} {r['distribution']} "
            f"sigma = {r['sigma']:g} delta = {r['delta']:g}: {r['error_rate']:.4f} "
            f"[{lo:.4f}, {hi:.4f}] ({r['errors']}/{r['races']}){full}"
        )
    lines += ["", "Settings with errors although every race read all N D rewards (the race then "
              "knows the exact means: these errors are numerical, not statistical):", ""]
    if not s["full_read_errors"]:
        lines.append("- none")
    for r in s["full_read_errors"]:
        lines.append(
            f"- D = {r['num_arms']} {_label(r['method'], r['variance'])} {r['distribution']} "
            f"sigma = {r['sigma']:g} delta = {r['delta']:g}: {r['errors']}/{r['races']}"
        )
    sigmas = sorted({k[2] for k in s["fraction_at"]}, reverse=True)
    lines += ["", f"Fraction of the N D rewards read at delta = {s['fraction_delta']:g} "
              "(mean over the three distributions):", "",
              "| D | method | " + " | ".join(f"sigma = {x:g}" for x in sigmas) + " |",
              "|---|---|" + "---|" * len(sigmas)]
    rows: dict = {}
    for (d, label, sigma), f in s["fraction_at"].items():
        rows.setdefault((d, label), {})[sigma] = f
    for (d, label), fs in rows.items():
        lines.append(f"| {d} | {label} | " + " | ".join(
            f"{fs[x]:.3g}" if x in fs else "-" for x in sigmas) + " |")
    if not table:
        return "\n".join(lines) + "\n"
    lines += ["", "## All settings", "",
              "| D | distribution | sigma | method | delta | races | errors | error rate | 95% CI "
              "| > delta beyond CI | fraction read | seconds |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lo, hi = r["error_ci"]
        flag = "**YES**" if lo > r["delta"] else "no"
        lines.append(
            f"| {r['num_arms']} | {r['distribution']} | {r['sigma']:g} | "
            f"{_label(r['method'], r['variance'])} | {r['delta']:g} | {r['races']} | {r['errors']} | "
            f"{r['error_rate']:.4g} | [{lo:.4f}, {hi:.4f}] | {flag} | {r['fraction_read']:.4g} | "
            f"{r['seconds']:.2f} |"
        )
    return "\n".join(lines) + "\n"


#: where ``benchmarks/racing_synthetic.py --size full`` writes its records
RESULTS_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "racing_synthetic.json"
#: notebooks run their small grid live when this variable is ``"small"`` (CI)
NOTEBOOK_SIZE_ENV = "SUBSAMPLE_MCMC_NOTEBOOK_SIZE"


def notebook_records(path: str | Path | None = None, *, seed: int = 0) -> tuple[list[dict], str]:
    """Records for the notebook, and a sentence saying where they come from.

    If the environment variable ``SUBSAMPLE_MCMC_NOTEBOOK_SIZE`` is ``"small"``,
    the small grid (:func:`benchmark_grid`) is run live (about half a minute);
    otherwise the full benchmark's JSON (``path``, default :data:`RESULTS_PATH`)
    is loaded when it exists, else the small grid is run.
    """
    path = RESULTS_PATH if path is None else Path(path)
    if os.environ.get(NOTEBOOK_SIZE_ENV, "").strip().lower() != "small" and path.exists():
        data = json.loads(path.read_text())
        meta = data.get("meta", {})
        return data["records"], (
            f"Loaded {len(data['records'])} settings of the full benchmark from {path.name} "
            f"(seed {meta.get('seed')}, run in {meta.get('total_seconds', float('nan')) / 60:.0f} min)."
        )
    t0 = time.perf_counter()
    records = run_grid(benchmark_grid("small"), seed=seed, progress=False)
    return records, (
        f"Ran the small grid live ({len(records)} settings, D = 10, N = 1e4) in "
        f"{time.perf_counter() - t0:.0f} s."
    )
