"""Runs that need a fresh interpreter: ``jax_enable_x64`` switched on before anything is traced,
and several forced host devices (``--xla_force_host_platform_device_count``), which XLA reads only
when its CPU backend starts.  Each test runs one script in a subprocess with the test process's
environment, to which the script adds its own XLA flags."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import sizes


def _env():
    """The test process's environment, for a child that sets its own device count."""
    return dict(os.environ)


X64_SCRIPT = textwrap.dedent("""
    import json, os
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    from numpyro.diagnostics import effective_sample_size
    from numpyro.infer import MCMC
    from subsample_mcmc import RacingGibbs, RacingMH
    from subsample_mcmc.numpyro import ModelSubsampler

    rng = np.random.default_rng(0)
    n = 2000
    x = rng.normal(size=(n, 2)); y = x @ np.array([0.5, -1.0]) + rng.normal(size=n)

    def linreg(x, y=None):
        w = numpyro.sample("w", dist.Normal(0.0, 5.0).expand([x.shape[1]]).to_event(1))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(x @ w, 1.0), obs=y)

    out = {}
    def part(name, fn):
        try:
            out[name] = fn()
        except Exception as e:
            out[name] = {"error": repr(e)[:1500]}

    def unit():
        res = {}
        for dtype in (np.float32, np.float64):
            args = (x.astype(dtype), y.astype(dtype))
            ms = ModelSubsampler(linreg, args, {})
            idx = jnp.array([3, 1999, 7])
            ll = jax.jit(lambda w, i: ms.log_likelihood({"w": w}, i, args, {}))(jnp.array([0.3, -0.7]), idx)
            ref = -0.5 * (y[[3, 1999, 7]] - x[[3, 1999, 7]] @ np.array([0.3, -0.7])) ** 2 - 0.5 * np.log(2 * np.pi)
            res[dtype.__name__] = float(np.max(np.abs(np.asarray(ll) - ref)))
        return res

    def mh_parallel():
        assert jax.local_device_count() == 2
        m = MCMC(RacingMH(linreg), num_warmup=200, num_samples=300, num_chains=2,
                 chain_method="parallel", progress_bar=False)
        m.run(jax.random.PRNGKey(1), x, y, init_params={"w": jnp.array([[0.0, 0.0], [1.0, -2.0]])})
        w = np.asarray(m.get_samples(group_by_chain=True)["w"])
        prec = x.T @ x + np.eye(2) / 25.0
        mean = np.linalg.solve(prec, x.T @ y)
        mcse = w.std(axis=(0, 1)) / np.sqrt(np.maximum(effective_sample_size(w), 1.0))
        return {"z": np.abs(w.mean(axis=(0, 1)) - mean).__truediv__(mcse).tolist(), "dtype": str(w.dtype)}

    locs = jnp.array([0.0, 0.1, 0.2])
    def shift(y):
        k = numpyro.sample("k", dist.Categorical(probs=jnp.ones(3) / 3))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(locs[k], 1.0), obs=y)

    def k_tv(m, yy):
        lp = np.array([-0.5 * np.sum((np.asarray(yy) - float(v)) ** 2) for v in locs])
        p = np.exp(lp - lp.max()); p /= p.sum()
        k = np.asarray(m.get_samples()["k"])
        return float(0.5 * np.abs(np.bincount(k, minlength=3) / k.size - p).sum())

    def gibbs_no_progress_bar():
        yy = jax.random.normal(jax.random.PRNGKey(5), (n,)) + 0.1
        m = MCMC(RacingGibbs(shift), num_warmup=0, num_samples=300, progress_bar=False)
        m.run(jax.random.PRNGKey(2), yy, extra_fields=("num_likelihood_evals", "race_stage"))
        ev = m.get_extra_fields()["num_likelihood_evals"]
        return {"tv": k_tv(m, yy), "evals_dtype": str(ev.dtype), "evals_mean": float(np.mean(ev))}

    def gibbs_parallel():
        # a fresh user's crash: RacingGibbs's init is traced under pmap; its concentration check ran on the host
        yy = np.asarray(jax.random.normal(jax.random.PRNGKey(5), (n,))) + 0.1
        m = MCMC(RacingGibbs(shift), num_warmup=0, num_samples=300, num_chains=2, chain_method="parallel",
                 progress_bar=False)
        m.run(jax.random.PRNGKey(3), yy)
        tv = k_tv(m, yy)
        # on from post_warmup_state: a second pmap trace (the first one's values had leaked into the cache)
        m.post_warmup_state = m.last_state
        m.run(m.post_warmup_state.rng_key, yy)
        return {"tv": tv, "tv_continued": k_tv(m, yy)}

    def mh_parallel_bounded_support():
        # a fresh user's crash: the observed site's support check (Poisson: nonnegative integers) read the
        # prototype trace on the host, and under pmap it was a tracer; conjugate Gamma-Poisson posterior
        c = np.random.default_rng(0).poisson(4.0, size=n).astype(np.float64)
        def model(c):
            lam = numpyro.sample("lam", dist.Gamma(2.0, 1.0))
            with numpyro.plate("data", c.shape[0]):
                numpyro.sample("c", dist.Poisson(lam), obs=c)
        m = MCMC(RacingMH(model), num_warmup=200, num_samples=500, num_chains=2, chain_method="parallel",
                 progress_bar=False)
        m.run(jax.random.PRNGKey(4), c)
        lam = np.asarray(m.get_samples(group_by_chain=True)["lam"])
        a, b = 2 + c.sum(), 1 + len(c)
        mcse = lam.std() / np.sqrt(max(float(np.sum(effective_sample_size(lam))), 1.0))
        return {"z": float((lam.mean() - a / b) / mcse), "sd_ratio": float(lam.std() / (np.sqrt(a) / b))}

    def selection_parallel():
        # a fresh user's crash: ModelSelection's "auto" pseudoprior check and pilot need concrete values, and
        # under pmap its init is traced; here also a parameter-free candidate, against the closed form
        from subsample_mcmc import ModelSelection, model_posterior
        from subsample_mcmc.models.normal_mean import alt, alt_probability, balanced_data, null
        yy = balanced_data(20000)
        kernel = ModelSelection([null, alt])
        m = MCMC(kernel, num_warmup=300, num_samples=1000, num_chains=2, chain_method="parallel", progress_bar=False)
        m.run(jax.random.PRNGKey(6), y=yy)
        post = model_posterior(m)
        p_alt = alt_probability(yy)
        return {"z": float((post.probabilities[1] - p_alt) / post.stderr[1]), "p_alt": float(p_alt),
                "auto_choice": {k: v["pseudoprior"] for k, v in kernel.auto_choice.items()}}

    def warnings_parallel():
        # the start checks' warnings were lost under pmap's trace: a kinked (Laplace) likelihood, whose chains
        # sample by the exact step, warned under "vectorized" and said nothing under "parallel"
        import warnings
        xx = rng.normal(size=(n, 2)); yy = 0.7 + xx @ np.array([0.5, -0.5]) + 1.5 * rng.laplace(size=n)
        def l1(x, y=None):
            beta = numpyro.sample("beta", dist.Normal(0.0, 5.0).expand([2]).to_event(1))
            with numpyro.plate("data", x.shape[0]):
                numpyro.sample("y", dist.Laplace(0.7 + x @ beta, 1.5), obs=y)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m = MCMC(RacingMH(l1), num_warmup=0, num_samples=20, num_chains=2, chain_method="parallel",
                     progress_bar=False)
            m.run(jax.random.PRNGKey(7), xx, y=yy)
        return {"messages": [str(w.message) for w in caught if issubclass(w.category, UserWarning)],
                "exact_mode": np.asarray(m.last_state.exact_mode).tolist()}

    def selection_parallel_control_variate():
        # a fresh session's crash: the control variates' check and the choice of their exactly-read points ran
        # on the host at the traced init; polynomial degree 1 or 2 against the closed form (data tuned to share)
        from scipy.optimize import brentq
        from subsample_mcmc import LinearFeatureControlVariate, ModelSelection, model_posterior
        from subsample_mcmc.models import polynomial as pm
        xx, noise = pm.simulate(4000, [0.0], seed=1)
        data = lambda c2: 0.5 + 0.3 * xx + c2 * xx ** 2 + noise  # noqa: E731
        c2 = brentq(lambda c: pm.log_evidence(xx, data(c), 2) - pm.log_evidence(xx, data(c), 1), 0.0, 0.2)
        yy = data(c2)
        cv = {f"degree{d}": LinearFeatureControlVariate(lambda v: v["beta"][None, :],
                                                        lambda z, w: dist.Normal(z[0], 1.0).log_prob(w),
                                                        pm.features(xx, d), yy) for d in (1, 2)}
        m = MCMC(ModelSelection(pm.polynomial_models((1, 2)), control_variate=cv), num_warmup=200, num_samples=1000,
                 num_chains=2, chain_method="parallel", progress_bar=False)
        m.run(jax.random.PRNGKey(8), xx, y=yy)
        post = model_posterior(m)
        exact = pm.model_probabilities(xx, yy, (1, 2))
        return {"z": float((post.probabilities[1] - exact[1]) / post.stderr[1]), "p": float(exact[1])}

    part("unit", unit)
    part("warnings_parallel", warnings_parallel)
    part("mh_parallel", mh_parallel)
    part("gibbs", gibbs_no_progress_bar)
    part("gibbs_parallel", gibbs_parallel)
    if os.environ.get("SUBSAMPLE_MCMC_TEST_SIZE") == "full":
        part("selection_parallel", selection_parallel)
        part("selection_parallel_control_variate", selection_parallel_control_variate)
        part("mh_parallel_bounded_support", mh_parallel_bounded_support)
    print("RESULT " + json.dumps(out))
""")


def test_x64_numpy_inputs_parallel_chains_and_racing_gibbs():
    """jax_enable_x64 on (a subprocess; one test so that it runs once under xdist):
    1. NumPy float32/float64 inputs are indexed exactly, RacingMH on float64 NumPy data
       with chain_method="parallel" (two host devices) targets the analytic posterior;
    2. RacingGibbs with progress_bar=False runs (its int32 counters no longer turn int64
       in the scan carry) and follows the exact posterior;
    3. under chain_method="parallel" (init traced inside pmap) RacingGibbs (also on from
       post_warmup_state) runs (it crashed for a fresh user) and gives the exact answer;
    4. under "parallel" the start checks' warnings are raised (from one more start outside pmap's trace);
    at the full size also (each about half a minute of compilation): ModelSelection with its "auto"
    pseudoprior check, and with control variates, under "parallel" against the closed form, and RacingMH
    on a bounded-support likelihood (Poisson) there."""
    env = _env()
    env["JAX_PLATFORMS"] = "cpu"
    env["SUBSAMPLE_MCMC_TEST_SIZE"] = sizes.SIZE
    res = subprocess.run([sys.executable, "-c", X64_SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    lines = [line for line in res.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, res.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT "):])
    unit, mh, g = out["unit"], out["mh_parallel"], out["gibbs"]
    assert "error" not in unit, unit["error"]
    assert unit["float32"] < 1e-3 and unit["float64"] < 1e-8, unit
    assert "error" not in mh, mh["error"]
    assert mh["dtype"] == "float64" and max(mh["z"]) < 5.0, mh
    assert "error" not in g, g["error"]
    assert g["evals_dtype"] == "int32" and g["evals_mean"] > 0
    assert g["tv"] < 0.15, g
    gp = out["gibbs_parallel"]
    assert "error" not in gp, gp["error"]
    assert gp["tv"] < 0.15 and gp["tv_continued"] < 0.15, gp
    wp = out["warnings_parallel"]
    assert "error" not in wp, wp["error"]
    assert wp["exact_mode"] == [True, True], wp
    kink = [m for m in wp["messages"] if "not twice differentiable" in m]
    assert len(kink) == 1 and "PRNGKey(0)" in kink[0], wp["messages"]  # once, marked as the extra start's
    if not sizes.FULL:
        return
    sp = out["selection_parallel"]
    assert "error" not in sp, sp["error"]
    assert 0.2 < sp["p_alt"] < 0.8 and abs(sp["z"]) < 3.0, sp
    assert sp["auto_choice"] == {"null": "laplace", "alt": "laplace"}, sp  # the check ran, outside the trace
    sc = out["selection_parallel_control_variate"]
    assert "error" not in sc, sc["error"]
    assert 0.2 < sc["p"] < 0.8 and abs(sc["z"]) < 3.0, sc
    mb = out["mh_parallel_bounded_support"]
    assert "error" not in mb, mb["error"]
    assert abs(mb["z"]) < 4.0 and abs(mb["sd_ratio"] - 1) < 0.2, mb


def test_parallel_chains_on_four_host_devices():
    """chain_method='parallel' over 4 forced host devices equals the sequential run."""
    script = textwrap.dedent("""
        import os
        os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
        import jax, numpy as np, numpyro, numpyro.distributions as dist
        from numpyro.infer import MCMC
        from subsample_mcmc.numpyro import RacingMH
        assert jax.local_device_count() == 4
        def model(y):
            mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
            with numpyro.plate("data", y.shape[0]):
                numpyro.sample("y", dist.Normal(mu, 2.0), obs=y)
        y = jax.random.normal(jax.random.PRNGKey(0), (5000,)) * 2.0 + 1.0
        out = {}
        for method in ("parallel", "sequential"):
            m = MCMC(RacingMH(model), num_warmup=50, num_samples=50, num_chains=4,
                     chain_method=method, progress_bar=False)
            m.run(jax.random.PRNGKey(1), y)
            out[method] = np.asarray(m.get_samples(group_by_chain=True)["mu"])
        np.testing.assert_allclose(out["parallel"], out["sequential"], rtol=1e-5, atol=1e-6)
        print("OK")
    """)
    env = _env()
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-3000:]


# full size only (make test-full): the forced host devices run at the CI size in
# test_parallel_chains_on_four_host_devices
@pytest.mark.full_only
def test_data_sharded_over_four_host_devices():
    """The data plate's arrays sharded over 4 devices (jax.sharding): the same kernel runs
    under XLA's SPMD partitioning and targets the same posterior."""
    script = textwrap.dedent("""
        import os
        os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
        import jax, jax.numpy as jnp, numpy as np, numpyro, numpyro.distributions as dist
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from numpyro.infer import MCMC
        from subsample_mcmc.numpyro import RacingMH
        def model(x, y):
            w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
            with numpyro.plate("data", x.shape[0]):
                numpyro.sample("y", dist.Normal(x @ w, 1.0), obs=y)
        n = 40_000
        x = jax.random.normal(jax.random.PRNGKey(0), (n, 2))
        y = x @ jnp.array([0.5, -0.3]) + jax.random.normal(jax.random.PRNGKey(1), (n,))
        mesh = Mesh(np.array(jax.devices()), ("data",))
        xs = jax.device_put(x, NamedSharding(mesh, P("data", None)))
        ys = jax.device_put(y, NamedSharding(mesh, P("data")))
        assert len(ys.sharding.device_set) == 4
        xx, yy = np.asarray(x, np.float64), np.asarray(y, np.float64)
        prec = np.eye(2) + xx.T @ xx
        post_mean = np.linalg.solve(prec, xx.T @ yy)
        post_sd = np.sqrt(np.diag(np.linalg.inv(prec)))
        for args in ((x, y), (xs, ys)):
            m = MCMC(RacingMH(model, proposal="langevin"), num_warmup=300, num_samples=1500,
                     progress_bar=False)
            m.run(jax.random.PRNGKey(2), *args)
            w = np.asarray(m.get_samples()["w"])
            # batch-means standard error
            b = w.reshape(30, -1, 2).mean(1)
            se = b.std(0, ddof=1) / np.sqrt(30)
            z = np.abs(w.mean(0) - post_mean) / se
            assert np.all(z < 4.5), z
            assert np.all(np.abs(w.std(0) / post_sd - 1) < 0.2), w.std(0) / post_sd
        print("OK")
    """)
    env = _env()
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-3000:]
