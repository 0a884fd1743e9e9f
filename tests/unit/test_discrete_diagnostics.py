"""check_discrete_chains: chains of a discrete site that disagree are reported, where R-hat is NaN."""

import warnings

import arviz as az
import numpy as np
import pytest
from numpyro.diagnostics import split_gelman_rubin

from subsample_mcmc.numpyro import check_discrete_chains


def _constant(values, draws=200):
    return np.repeat(np.asarray(values, np.int32)[:, None], draws, axis=1)


def test_constant_chains_at_different_values_are_reported_where_r_hat_is_not_a_number():
    """Four chains held at nu indices [3, 3, 2, 3]: NumPyro's R-hat of the site is infinite (and NaN
    when all four sit at one value), and the check must name the site and the chains' values."""
    k = _constant([3, 3, 2, 3])
    assert not np.isfinite(split_gelman_rubin(k.astype(np.float64)))
    assert np.isnan(split_gelman_rubin(_constant([3, 3, 3, 3]).astype(np.float64)))
    with pytest.warns(UserWarning, match=r"site 'k'.*constant, at different values \[3, 3, 2, 3\]"):
        (report,) = check_discrete_chains({"k": k, "scale": np.random.default_rng(0).normal(size=(4, 200))})
    assert report.constant_disagree and report.modal.tolist() == [3, 3, 2, 3]


def test_chains_that_agree_are_not_reported():
    """Constant at one value (a concentrated posterior) and well-mixed chains: no warning, no problem."""
    rng = np.random.default_rng(1)
    mixed = (rng.random((4, 500)) < 0.3).astype(np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reports = check_discrete_chains({"a": _constant([2, 2, 2, 2]), "b": mixed})
    assert [r.problem for r in reports] == [None, None]
    assert not reports[0].constant_disagree and np.isnan(reports[0].max_rhat)
    assert reports[1].max_rhat < 1.05 and np.all(reports[1].switch_rate > 0.2)


def test_chains_that_move_but_disagree_on_frequencies_are_reported():
    """Two chains at p(1) = 0.1, two at 0.9 (each moving): the indicator's split R-hat is far above 1.05."""
    rng = np.random.default_rng(2)
    x = np.stack([(rng.random(800) < p).astype(np.int32) for p in (0.1, 0.1, 0.9, 0.9)])
    with pytest.warns(UserWarning, match="split R-hat"):
        (report,) = check_discrete_chains({"z": x})
    assert report.max_rhat > 1.5 and not report.constant_disagree


def test_array_sites_inference_data_and_float_values():
    """An array site is checked element by element; ArviZ InferenceData and whole-number floats (as a
    float64 posterior stores them) are accepted; a continuous site is not taken for a discrete one."""
    rng = np.random.default_rng(3)
    z = np.stack([_constant([0, 1, 0]), _constant([1, 1, 1])], axis=-1).astype(np.float64)  # [3, 200, 2]
    idata = az.from_dict(posterior={"z": z, "mu": rng.normal(size=(3, 200))})
    with pytest.warns(UserWarning, match=r"site 'z\[0\]'"):
        reports = check_discrete_chains(idata)
    assert [r.site for r in reports] == ["z[0]", "z[1]"]
    assert reports[0].constant_disagree and not reports[1].constant_disagree


def test_bad_input_names_the_fix():
    with pytest.raises(ValueError, match="more than one chain"):
        check_discrete_chains({"k": _constant([1])})
    with pytest.raises(KeyError, match="not among"):
        check_discrete_chains({"k": _constant([1, 2])}, sites=["nu"])
    with pytest.raises(TypeError, match="group_by_chain"):
        check_discrete_chains([1, 2, 3])


def test_flat_draws_and_an_unrun_mcmc_are_refused_not_read_as_chains():
    """``mcmc.get_samples()`` without ``group_by_chain`` has no chain axis: a scalar site is 1-D (nothing
    to check: the call used to return [] in silence) and an array site's ``[draws, 8]`` would be read as
    8 draws of ``draws`` chains.  Both are refused with the fix named, as is an MCMC not yet run; a single
    site may be named by a string."""
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    k = _constant([3, 3, 2, 3])
    with pytest.raises(ValueError, match=r"group_by_chain=True"):
        check_discrete_chains({"k": k.reshape(-1)})
    z = np.random.default_rng(4).integers(0, 2, size=(800, 8))
    with pytest.raises(ValueError, match=r"'z'.*\(800, 8\).*group_by_chain=True"):
        check_discrete_chains({"z": z})
    with pytest.warns(UserWarning, match="different values"):
        (report,) = check_discrete_chains({"k": k, "x": np.zeros((4, 200))}, sites="k")
    assert report.site == "k"
    with pytest.raises(ValueError, match=r"\['x2'\] do not hold integer values"):
        check_discrete_chains({"k": k, "x2": np.full((4, 200), 0.5)}, sites=["k", "x2"])
    with pytest.warns(UserWarning, match="no site .* has integer values"):
        assert check_discrete_chains({"mu": np.random.default_rng(5).normal(size=(4, 200))}) == []

    def model():
        numpyro.sample("mu", dist.Normal())

    with pytest.raises(ValueError, match=r"mcmc.run"):
        check_discrete_chains(MCMC(NUTS(model), num_warmup=1, num_samples=1, num_chains=2,
                                   chain_method="vectorized"))
