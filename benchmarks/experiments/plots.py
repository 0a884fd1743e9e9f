r"""Figures of the synthetic experiment of Chen & Ghahramani (2016), Sec. 5.1 / App. C.1.

* :func:`figure_synthetic` -- Fig. 1(b)-(d), (f)-(h) and their App. C.1 variants
  (Fig. 5, 6, 7): per reward std ``sigma`` one row with the empirical error vs
  ``delta`` (95% Clopper-Pearson intervals, against the line ``y = delta``) and the
  fraction of the ``N D`` rewards read vs ``delta``;
* :func:`uncertainty_bounds` / :func:`figure_bounds` -- Fig. 1(e): the uncertainty
  bound ``G(T)`` of Racing-EBS (Eq. 6-7), Racing-Normal (Eq. 9 with ``B_Normal`` of
  Corollary 4) and Racing-Normal with the union bound (Eq. 27) for ``delta = 0.1``;
* :func:`show` -- display a figure inline through the Agg renderer (works whatever
  matplotlib backend is active, e.g. ``Agg`` in a headless notebook run).
"""

from __future__ import annotations

import io
import math

import numpy as np

from subsample_mcmc.racing import EBSBound, NormalBound, NormalUnionBound, doubling_schedule

__all__ = [
    "METHOD_COLORS", "DISTRIBUTION_MARKERS", "PAPER_FIGURES", "select",
    "plot_error_vs_delta", "plot_fraction_vs_delta", "figure_synthetic",
    "uncertainty_bounds", "figure_bounds", "show",
]

METHOD_COLORS = {"normal": "tab:blue", "ebs": "tab:orange", "lil_ucb": "tab:green",
                 "normal_union": "tab:purple"}
METHOD_NAMES = {"normal": "Racing-Normal", "ebs": "Racing-EBS", "lil_ucb": "lil'UCB",
                "normal_union": "Racing-Normal (union)"}
#: the paper's markers: Normal (x), Uniform (o), LogNormal (square)
DISTRIBUTION_MARKERS = {"normal": "x", "uniform": "o", "lognormal": "s"}
#: which figure of the paper shows a (D, variance estimate) pair
PAPER_FIGURES = {(10, "pairwise"): "Fig. 1", (10, "marginal"): "Fig. 5",
                 (2, "pairwise"): "Fig. 6", (100, "pairwise"): "Fig. 7"}
_SIGMA_NAMES = {0.1: "very hard", 1e-4: "easy", 1e-5: "very easy"}


def select(records, *, num_arms=None, variance=None, sigma=None, method=None, distribution=None):
    """Records matching the given fields.  ``variance`` keeps lil'UCB records
    (whose ``variance`` is ``None``: it does not use a variance estimate)."""
    out = []
    for r in records:
        if num_arms is not None and r["num_arms"] != num_arms:
            continue
        if sigma is not None and not math.isclose(r["sigma"], sigma, rel_tol=1e-9):
            continue
        if method is not None and r["method"] != method:
            continue
        if distribution is not None and r["distribution"] != distribution:
            continue
        if variance is not None and r["variance"] not in (variance, None):
            continue
        out.append(r)
    return out


def _series(records):
    """Group records by (method, distribution), each sorted by delta."""
    groups: dict = {}
    for r in records:
        groups.setdefault((r["method"], r["distribution"]), []).append(r)
    order = {m: i for i, m in enumerate(METHOD_COLORS)}
    dorder = {d: i for i, d in enumerate(DISTRIBUTION_MARKERS)}
    keys = sorted(groups, key=lambda k: (order.get(k[0], 99), dorder.get(k[1], 99)))
    return [(k, sorted(groups[k], key=lambda r: r["delta"])) for k in keys]


def plot_error_vs_delta(ax, records, *, jitter: float = 0.04):
    r"""Empirical error rate vs ``delta`` with 95% Clopper-Pearson intervals (Fig. 1(b)-(d)).

    Prop. 3 bounds the error of a race by ``delta``; the dashed line is ``y = delta``.
    As in the paper, settings with no error are not drawn (their interval's upper
    end is listed in the benchmark table).  Points are spread slightly along
    ``delta`` (factor ``1 + jitter``) so that the intervals do not overlap.
    """
    deltas = sorted({r["delta"] for r in records})
    if deltas:
        grid = np.geomspace(deltas[0] / 1.3, deltas[-1] * 1.3, 50)
        ax.plot(grid, grid, "k--", lw=1, label=r"$y=\delta$")
    for j, ((method, dist), rs) in enumerate(_series(records)):
        rs = [r for r in rs if r["errors"] > 0]
        if not rs:
            continue
        x = np.array([r["delta"] for r in rs]) * (1.0 + jitter) ** (j % 7 - 3)
        y = np.array([r["error_rate"] for r in rs])
        lo = np.array([r["error_ci"][0] for r in rs])
        hi = np.array([r["error_ci"][1] for r in rs])
        ax.errorbar(x, y, yerr=[y - lo, hi - y], color=METHOD_COLORS.get(method, "gray"),
                    marker=DISTRIBUTION_MARKERS.get(dist, "."), mfc="none", ms=6, lw=1, capsize=2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"$\delta$")
    ax.set_ylabel("empirical error")


def plot_fraction_vs_delta(ax, records, *, log: bool = False):
    """Fraction of the ``N D`` rewards read vs ``delta`` (Fig. 1(f)-(h)); ``log``
    puts the fraction on a log scale (the paper does so for sigma = 1e-4, 1e-5)."""
    for (method, dist), rs in _series(records):
        ax.plot([r["delta"] for r in rs], [r["fraction_read"] for r in rs],
                color=METHOD_COLORS.get(method, "gray"), marker=DISTRIBUTION_MARKERS.get(dist, "."),
                mfc="none", ms=6, lw=1)
    ax.set_xscale("log")
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(r"$\delta$")
    ax.set_ylabel("fraction of rewards read")


def _legend_handles():
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, lw=2, label=METHOD_NAMES[m])
               for m, c in METHOD_COLORS.items() if m != "normal_union"]
    handles += [Line2D([], [], color="k", marker=mk, mfc="none", ls="none", label=d)
                for d, mk in DISTRIBUTION_MARKERS.items()]
    handles.append(Line2D([], [], color="k", ls="--", label=r"$y=\delta$"))
    return handles


def figure_synthetic(records, num_arms: int, variance: str = "pairwise"):
    r"""The panels of Fig. 1 (D = 10, pairwise), 5 (marginal), 6 (D = 2), 7 (D = 100).

    One row per reward std ``sigma`` (0.1 very hard, 1e-4 easy, 1e-5 very easy);
    left: empirical error vs ``delta`` with 95% CIs and ``y = delta``; right:
    fraction of rewards read (log scale for ``sigma < 0.1``).  Colours are the
    methods, markers the reward distributions.  lil'UCB appears in every variance
    mode (it uses none).
    """
    import matplotlib.pyplot as plt

    rs = select(records, num_arms=num_arms, variance=variance)
    sigmas = sorted({r["sigma"] for r in rs}, reverse=True)
    fig, axes = plt.subplots(len(sigmas), 2, figsize=(10, 3.1 * len(sigmas)), squeeze=False)
    for row, sigma in zip(axes, sigmas):
        sub = select(rs, sigma=sigma)
        plot_error_vs_delta(row[0], sub)
        plot_fraction_vs_delta(row[1], sub, log=sigma < 0.1)
        name = _SIGMA_NAMES.get(sigma, "")
        row[0].set_title(rf"error, $\sigma$ = {sigma:g} {name}", fontsize=10)
        row[1].set_title(rf"fraction read, $\sigma$ = {sigma:g}", fontsize=10)
    n = rs[0]["population_size"] if rs else 0
    paper = PAPER_FIGURES.get((num_arms, variance), "not in the paper")
    fig.suptitle(f"D = {num_arms}, N = {n:g}, {variance} variance estimate ({paper})")
    fig.legend(handles=_legend_handles(), loc="lower center", ncol=7, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    return fig


def uncertainty_bounds(
    population_size: int = 100_000,
    delta: float = 0.1,
    *,
    sigma: float = 1.0,
    reward_range: float | None = None,
    normal_first_batch: int = 50,
    ebs_first_batch: int = 2,
    num_points: int = 200,
) -> dict:
    r"""The uncertainty bounds ``G(T)`` compared in Fig. 1(e), for one pair of arms.

    With ``N = population_size``, ``pi_T = T / N`` and the doubling schedule of
    Alg. 1 (``t*`` stages, :func:`~subsample_mcmc.racing.doubling_schedule`):

    * Racing-Normal (Eq. 9, Corollary 4)::

          G(T) = sigma / sqrt(T) * sqrt(1 - (T-1)/(N-1)) * B_Normal(delta, m1/N)

    * Racing-Normal with the union bound (Eq. 27): the same with
      ``B = Phi^{-1}(1 - delta / (t* - 1))``;
    * Racing-EBS (Eq. 6-7), with ``delta_t = delta / (t* - 1)``::

          G(T) = sigma sqrt(2 rho_T log(5/delta_t) / T) + kappa C log(5/delta_t) / T,
          rho_T = 1 - (T-1)/N  (T <= N/2),  (1 - T/N)(1 + 1/T)  (T > N/2).

    ``reward_range`` ``C`` defaults to ``sqrt(12) sigma`` (uniform rewards, the
    most favourable case for EBS).  The constants and widths are the racing core's
    (:class:`~subsample_mcmc.racing.NormalBound`,
    :class:`~subsample_mcmc.racing.NormalUnionBound`,
    :class:`~subsample_mcmc.racing.EBSBound`): the figure shows what the race compares.

    Returns:
        ``{name: (T, G, T_schedule, G_schedule)}``: the bound on a log grid of
        ``T`` in ``[m1, N)`` and at the schedule's stages ``T^(1..t*-1)``.
    """
    n = int(population_size)
    c = math.sqrt(12.0) * sigma if reward_range is None else float(reward_range)

    out = {}
    for name, bound, m1 in [("Racing-Normal", NormalBound(), normal_first_batch),
                            ("Racing-Normal (union bound)", NormalUnionBound(), normal_first_batch),
                            ("Racing-EBS", EBSBound(), ebs_first_batch)]:
        constant = bound.constant(delta, n, m1)
        grid = np.geomspace(m1, n - 1, num_points)
        sched = np.array(doubling_schedule(n, m1)[:-1], float)
        out[name] = (grid, bound.width(constant, grid, sigma, c, n),
                     sched, bound.width(constant, sched, sigma, c, n))
    return out


def figure_bounds(population_size: int = 100_000, delta: float = 0.1, **kwargs):
    """Fig. 1(e): ``G(T)`` vs ``T`` (log-log) for EBS, Normal and the union bound;
    markers are the stages of each doubling schedule.  ``kwargs`` go to
    :func:`uncertainty_bounds`."""
    import matplotlib.pyplot as plt

    bounds = uncertainty_bounds(population_size, delta, **kwargs)
    colors = {"Racing-Normal": METHOD_COLORS["normal"], "Racing-EBS": METHOD_COLORS["ebs"],
              "Racing-Normal (union bound)": METHOD_COLORS["normal_union"]}
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for name, (t, g, ts, gs) in bounds.items():
        ax.plot(t, g, color=colors[name], label=name)
        ax.plot(ts, gs, ".", color=colors[name])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("T (rewards read per arm)")
    ax.set_ylabel(r"$G(T)$  (units of $\hat\sigma$)")
    ax.set_title(rf"Uncertainty bounds, $\delta$ = {delta:g}, N = {population_size:g}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def show(fig, *, dpi: int = 72):
    """Render ``fig`` to PNG with Agg, display it inline (IPython) and close it.

    Independent of the active backend, so notebooks can force ``Agg`` and still
    embed their figures.  Returns the PNG bytes.
    """
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    png = buf.getvalue()
    try:
        from IPython.display import Image, display

        display(Image(data=png))
    except ImportError:  # pragma: no cover - IPython is a dependency of notebooks only
        pass
    return png
