"""The command-line jobs as a user runs them: ``subsample-mcmc arch`` (the main job) and
``subsample-mcmc coref``, through :func:`subsample_mcmc.cli.main`.

The ``smoke`` tests run each job to its end on tiny data (every output written and readable);
``.ci/run`` runs them on the newest stack too (``make test-newest``).  The others check what the
jobs compute at a size where it can be checked."""

import json
import os

import numpy as np
import pytest
from scipy import stats
from subsample_mcmc.models.arch import simulate_arch


def _groups(idata) -> set:
    """The group names of an InferenceData (ArviZ 0.x: ``groups()``) or DataTree (ArviZ 1.x: ``groups``,
    paths)."""
    groups = idata.groups() if callable(idata.groups) else idata.groups
    return {g.strip("/") for g in groups}


@pytest.mark.smoke
def test_arch_job_runs_to_the_end_on_tiny_data(tmp_path, monkeypatch):
    """The main job's whole path (a user's CSV of returns read, pseudopriors, both samplers, ArviZ
    InferenceData written as NetCDF and read back, figures, summary) on a simulated ARCH(1) series of
    1,500 terms; run again, it loads the pseudopriors from its cache and gives the same draws, and
    ``--log-likelihood`` adds the pointwise log-likelihood that is left out by default."""
    import arviz as az

    from subsample_mcmc.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    r, _ = simulate_arch(1502, order=1, seed=3)  # 1,500 terms after the largest order's 2 lags
    csv = tmp_path / "returns.csv"
    csv.write_text("Return\n" + "\n".join(repr(float(x)) for x in r) + "\n")
    out = tmp_path / "arch"
    rc = main(["arch", "--data", str(csv), "--orders", "1,2", "--num-adapt", "30", "--num-samples", "30",
               "--chains", "1", "--output", str(out), "--no-progress", "--no-bic"])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["orders"] == [1, 2] and s["num_terms"] == 1500
    for m in ("racing", "exact"):
        assert np.isclose(sum(s["posterior_q"][m]), 1.0)
        idata = az.from_netcdf(out / f"{m}.nc")
        assert idata.posterior["model"].shape == (1, 30)
    for f in s["figures"]:
        assert (out / f).stat().st_size > 0, f
    assert not s["pseudoprior_from_cache"] and s["check_decisions_every"] == 20  # auto: 10 x 2 orders
    assert 0 < s["seconds"]["compile"] < s["seconds"]["end_to_end"]
    for m in ("racing", "exact"):
        sec = s["diagnostics"][m]["seconds"]
        assert sec["end_to_end"] >= sec["warmup"] + sec["sample"] - 1e-6 and sec["compile"] >= 0
        assert "log_likelihood" not in _groups(az.from_netcdf(out / f"{m}.nc"))
    again = tmp_path / "again"
    rc = main(["arch", "--data", str(csv), "--orders", "1,2", "--num-adapt", "30", "--num-samples", "30",
               "--chains", "1", "--output", str(again), "--no-progress", "--no-bic", "--log-likelihood"])
    assert rc == 0
    s2 = json.loads((again / "summary.json").read_text())
    assert s2["pseudoprior_from_cache"] and s2["posterior_q"] == s["posterior_q"]
    assert s2["pseudoprior_fit_seconds"] < s["pseudoprior_fit_seconds"]
    idata = az.from_netcdf(again / "racing.nc")
    assert "log_likelihood" in _groups(idata) and len(idata["log_likelihood"].data_vars) > 0


def test_arch_job_refuses_an_output_it_cannot_write_before_computing(tmp_path, capsys):
    """A folder that cannot be created, or a file in its place, stops the job at once (exit 2,
    the reason and the fix), before the pseudopriors and the samplers run."""
    from subsample_mcmc.cli import main

    assert main(["arch", "--data", "simulated", "--output", "/proc/no-such-folder/out"]) == 2
    assert "not a writable folder" in capsys.readouterr().err
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["arch", "--data", "simulated", "--output", str(a_file)]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_bad_arguments_exit_2_with_the_fix(tmp_path, capsys):
    """Orders, a missing CSV and a chain count that the job cannot use stop it at once (exit 2) with the
    reason and the fix."""
    from subsample_mcmc.cli import main

    out = tmp_path / "out"
    assert main(["arch", "--orders", "0,5", "--output", str(out)]) == 2
    assert "orders must be positive integers" in capsys.readouterr().err
    assert main(["arch", "--data", str(tmp_path / "nope.csv"), "--output", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["arch", "--chains", "0", "--output", str(out)]) == 2
    assert "num_chains must be a positive integer" in capsys.readouterr().err


@pytest.mark.full_only
def test_cli_racing_matches_exact_where_the_posterior_is_spread(tmp_path, capsys):
    """The main job from the command line on a user's CSV of returns whose posterior over q is
    genuinely spread (ARCH(2), N = 3000, about 3:1 between orders 2 and 3; two candidates keep the
    compiled product-space step small; full size only: the job's fixed cost (compilation, pseudopriors)
    is most of its time, and the CI tier runs the job to its end in the smoke test): racing and exact
    p(q | r) agree in total variation within Monte Carlo error, the statistic would catch a
    sampler that kept only the modal order, the raced decisions err within delta, and the
    outputs (InferenceData with the model index, figures, summary keys) are written."""
    import arviz as az

    from subsample_mcmc.cli import main

    r, _ = simulate_arch(3003, order=2, alpha0=0.2, alpha_sum=0.3, nu=6.0, seed=2)
    csv = tmp_path / "returns.csv"
    csv.write_text("Return\n" + "\n".join(repr(float(x)) for x in r) + "\n")
    out = tmp_path / "out"
    rc = main(["arch", "--data", str(csv), "--orders", "2,3", "--num-adapt", "300", "--num-samples", "600",
               "--chains", "2", "--output", str(out), "--no-progress", "--no-bic"])
    assert rc == 0, capsys.readouterr().err
    s = json.loads((out / "summary.json").read_text())
    assert s["orders"] == [2, 3] and s["num_terms"] == 3000
    exact = np.asarray(s["posterior_q"]["exact"])
    assert np.sort(exact)[-2] > 0.1, exact  # the test has power: two orders hold real mass
    tv = s["total_variation"]
    assert tv["racing_vs_exact"] < 0.1 + 3 * tv["monte_carlo_se"], s["posterior_q"]
    point = np.eye(2)[np.argmax(exact)]
    assert 0.5 * np.abs(point - exact).sum() > 0.1 + 3 * tv["monte_carlo_se"]
    for m in ("racing", "exact"):
        d = s["diagnostics"][m]
        assert np.isclose(sum(s["posterior_q"][m]), 1.0) and d["likelihood_evaluations"] > 0
        assert d["ess_q"] > 0 and d["model_switches"] > 0 and len(d["wang_landau_settle"]["sweeps"]) == 2
    e = s["decision_error_rates"]["model"]
    assert e["decisions"] == 0 or stats.binom.sf(e["errors"] - 1, e["decisions"], s["delta"]) > 1e-3, e
    for f in ("racing.nc", "exact.nc", "returns.png", "posterior_q.png", "trace_q.png", "autocorr_q.png",
              "wang_landau.png"):
        assert os.path.exists(out / f), f
    idata = az.from_netcdf(out / "racing.nc")
    assert idata.posterior["model"].shape == (2, 600) and "arch2.alpha" in idata.posterior


@pytest.mark.smoke
def test_command_line_job_writes_summary_and_figures(tmp_path):
    from subsample_mcmc.cli import main

    out = tmp_path / "coref"
    assert main(["coref", "--mentions", "120", "--seeds", "2", "--sweeps", "2", "--output", str(out),
                 "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("b3_f1", "factor_evaluations"):
        assert set(summary[key]) == {"racing", "exact"}
    assert 0.0 <= summary["decision_error_rate"] <= 1.0
    assert (out / "fig3a_f1_vs_factors.png").stat().st_size > 0 and (out / "fig3b_f1_vs_sweeps.png").exists()
    assert main(["coref", "--data", "synthetic", "--sweeps", "0", "--output", str(out)]) == 2
    assert main(["coref", "--mentions", "6000", "--output", str(out)]) == 2  # FEBRL 3 has 5,000 records
    assert main(["coref", "--mentions", "200", "--output", str(out / "summary.json")]) == 2  # a file, not a folder
    one = tmp_path / "one"
    assert main(["coref", "--mentions", "100", "--seeds", "1", "--sweeps", "1", "--output", str(one), "--no-progress",
                 "--no-factor-bounds"]) == 0
    one_summary = json.loads((one / "summary.json").read_text(),
                             parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert summary["factor_bounds"] is True and one_summary["factor_bounds"] is False
    # two mentions in different blocks: no factor to read, no ratio (JSON null), no crash
    assert main(["coref", "--mentions", "2", "--seeds", "1", "--sweeps", "1", "--output", str(tmp_path / "two"),
                 "--no-progress"]) == 0
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["factor_evaluation_ratio"] is None
    assert main(["coref", "--mentions", "50", "--output", "/proc/no-such-folder/out"]) == 2  # message, not traceback
