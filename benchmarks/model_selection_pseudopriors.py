"""How well ModelSelection's Laplace pseudopriors fit the ARCH(q) posteriors on real returns, and the
Laplace evidences Wang-Landau now starts from.

Carlin & Chib's chain sticks in a model whose weight ``w = p(y, theta | q) / g_q(theta)`` varies: a
posterior draw of ``theta_q`` sits where ``w`` is large, a pseudoprior draw mostly where it is small
(``subsample_mcmc.kernels.product_space.pseudoprior_fit``).  For every order of
``subsample_mcmc.models.arch.arch_numpyro_model`` on a real series this script builds
``ModelSelection(models)`` with its defaults, calls ``init`` (the inner RacingMH mode searches, the Laplace
pseudopriors, the Laplace start ``a_q = -log Z^_q``) and ``ModelSelection.pseudoprior_fit`` (1,000
pseudoprior draws per order, every return read for each): Pareto k of the weights, sd of the log weights,
Kish's effective fraction.

With ``--copula`` (default on) it also tries the candidate fix, a pseudoprior fitted to draws of each
order's posterior: NUTS (NumPyro, 500 warmup + 2,000 draws per order) gives the draws; on the first half,
each unconstrained coordinate is standardised and Yeo-Johnson transformed (Yeo & Johnson 2000,
*Biometrika* 87(4); ``lambda`` by maximum likelihood restricted to ``[0, 2]``, where the transform maps
the real line onto itself so that the pseudoprior is a proper density with exact draws), and a Gaussian
is fitted to the transformed draws (a Gaussian copula with Yeo-Johnson marginals).  On the second half
(held out) and on 1,000 draws from each pseudoprior, the log weights ``log p(y, theta) - log g(theta)``:
their sd under ``g``'s draws and the gap between their medians under the posterior and under ``g`` (the
chain's stickiness in that order, in nats), for the Laplace Gaussian and for the copula.  One run.

    python benchmarks/model_selection_pseudopriors.py [--data sp500] [--draws 1000] [--no-copula]
        # -> results/model_selection_pseudopriors_<data>.{json,md}
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="sp500", help="sp500, nasdaq or a CSV path (models.arch.load_returns)")
    parser.add_argument("--orders", default="5,10,15,20,25,30")
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-copula", dest="copula", action="store_false")
    args = parser.parse_args(argv)

    import jax
    import numpy as np

    from subsample_mcmc import ModelSelection
    from subsample_mcmc.models import arch

    orders = tuple(int(q) for q in args.orders.split(","))
    series = arch.load_returns(args.data)
    y = np.asarray(arch.prepare(series.returns, orders).y, np.float64)
    models = {f"arch{q}": functools.partial(arch.arch_numpyro_model, order=q) for q in orders}
    kernel = ModelSelection(models)
    t0 = time.perf_counter()
    state = kernel.init(jax.random.PRNGKey(args.seed), 1000, None, (y,), None)
    init_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fits = kernel.pseudoprior_fit(state, y, num_draws=args.draws, rng_key=jax.random.PRNGKey(args.seed + 1))
    fit_s = time.perf_counter() - t0
    a = np.asarray(state.log_prior_adjustment, np.float64)
    rows = [{"order": q, "k_hat": fits[f"arch{q}"].k_hat, "log_weight_sd": fits[f"arch{q}"].log_weight_sd,
             "effective_fraction": fits[f"arch{q}"].effective_fraction,
             "laplace_log_evidence_centred": float(-a[j])} for j, q in enumerate(orders)]
    if args.copula:
        for j, q in enumerate(orders):
            t0 = time.perf_counter()
            rows[j].update(copula_comparison(models[f"arch{q}"], y, state.pseudopriors[j], args.draws, args.seed))
            rows[j]["copula_seconds"] = time.perf_counter() - t0
            print(q, {k: round(v, 3) for k, v in rows[j].items() if isinstance(v, float)}, flush=True)
    result = {"data": series.name, "num_terms": int(y.shape[0]), "orders": list(orders), "draws": args.draws,
              "seed": args.seed, "init_seconds": init_s, "fit_seconds": fit_s, "per_order": rows}
    out = HERE / "results" / f"model_selection_pseudopriors_{Path(args.data).stem}"
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    lines = [f"# Laplace pseudopriors of ARCH(q) on {series.name} (N = {y.shape[0]:,})", "",
             f"`python benchmarks/model_selection_pseudopriors.py --data {args.data} --draws {args.draws}`; "
             f"{args.draws} pseudoprior draws per order, one run (init {init_s:.0f} s, fits {fit_s:.0f} s).", "",
             "| order | Pareto k | sd of log w | effective fraction | Laplace log evidence (centred) |",
             "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['order']} | {r['k_hat']:.2f} | {r['log_weight_sd']:.2f} | {r['effective_fraction']:.3f} | "
              f"{r['laplace_log_evidence_centred']:.1f} |" for r in rows]
    if args.copula:
        lines += ["", "Laplace Gaussian vs a Yeo-Johnson Gaussian copula fitted to 1,000 NUTS draws of the order's "
                  "posterior (log weights on 1,000 held-out NUTS draws and on draws from each pseudoprior; the "
                  "median gap is how much higher the weights sit at posterior draws than at pseudoprior draws):", "",
                  "| order | Laplace: sd of log w | Laplace: median gap | copula: sd of log w | copula: median gap | "
                  "copula: Pareto k |", "|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['order']} | {r['laplace_sd']:.2f} | {r['laplace_gap']:.2f} | {r['copula_sd']:.2f} | "
                  f"{r['copula_gap']:.2f} | {r['copula_k_hat']:.2f} |" for r in rows]
    lines += ["", "A perfect pseudoprior gives sd 0 and effective fraction 1; k > 0.7 means the Gaussian misses the "
              "posterior's tails (the chain sticks in that order)."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _yeo_johnson(z, lam):
    """``psi_lambda(z)`` and ``log psi'(z)`` (Yeo & Johnson 2000, Eq. 2.1), ``lambda`` in ``[0, 2]``."""
    import numpy as np

    pos = z >= 0
    with np.errstate(all="ignore"):
        up = np.log1p(z) if lam == 0 else ((1 + z) ** lam - 1) / lam
        down = -np.log1p(-z) if lam == 2 else -((1 - z) ** (2 - lam) - 1) / (2 - lam)
    return np.where(pos, up, down), np.where(pos, (lam - 1) * np.log1p(np.abs(z)), (1 - lam) * np.log1p(np.abs(z)))


def _yeo_johnson_inverse(v, lam):
    import numpy as np

    pos = v >= 0
    with np.errstate(all="ignore"):
        up = np.expm1(v) if lam == 0 else (lam * v + 1) ** (1 / lam) - 1
        down = -np.expm1(-v) if lam == 2 else 1 - (1 - (2 - lam) * v) ** (1 / (2 - lam))
    return np.where(pos, up, down)


def copula_comparison(model, y, laplace, num_draws, seed):
    """Log-weight sd and stickiness gap of the Laplace pseudoprior and of a Yeo-Johnson Gaussian copula
    fitted to NUTS draws of ``model``'s posterior (see the module docstring)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.flatten_util import ravel_pytree
    from numpyro.infer import MCMC, NUTS
    from numpyro.infer.util import initialize_model, unconstrain_fn
    from scipy import optimize, stats

    from subsample_mcmc.kernels.product_space import pseudoprior_draw, pseudoprior_log_density
    from subsample_mcmc.kernels.proposals import pareto_k_hat

    mcmc = MCMC(NUTS(model), num_warmup=500, num_samples=2000, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(seed), y)
    info = initialize_model(jax.random.PRNGKey(seed), model, model_args=(y,))
    draws = mcmc.get_samples()
    sites = list(info.param_info.z)
    flat = np.asarray(jax.vmap(lambda d: ravel_pytree(unconstrain_fn(model, (y,), {}, d))[0])(
        {k: draws[k] for k in sites}), np.float64)
    unravel = ravel_pytree(info.param_info.z)[1]
    log_joint = jax.jit(jax.vmap(lambda f: -info.potential_fn(unravel(f))))
    fit, held = flat[: len(flat) // 2], flat[len(flat) // 2:]
    loc, scale = fit.mean(0), fit.std(0)
    lams = []
    for i in range(fit.shape[1]):
        zi = (fit[:, i] - loc[i]) / scale[i]
        lams.append(optimize.minimize_scalar(lambda lam: -stats.yeojohnson_llf(lam, zi), bounds=(0.0, 2.0),
                                             method="bounded").x)

    def transform(x):
        zs = (x - loc) / scale
        out = [_yeo_johnson(zs[:, i], lams[i]) for i in range(x.shape[1])]
        return np.stack([o[0] for o in out], 1), np.sum([o[1] for o in out], 0) - np.sum(np.log(scale))

    tfit, _ = transform(fit)
    gauss = stats.multivariate_normal(tfit.mean(0), np.cov(tfit.T))

    def log_g(x):
        v, log_jac = transform(x)
        return gauss.logpdf(v) + log_jac

    v = gauss.rvs(num_draws, random_state=seed + 7)
    draws = np.stack([_yeo_johnson_inverse(v[:, i], lams[i]) for i in range(v.shape[1])], 1) * scale + loc

    def weights(x, log_density):
        return np.asarray(log_joint(jnp.asarray(x, jnp.float32)), np.float64) - log_density(x)

    lap_g = lambda x: np.asarray(jax.vmap(lambda t: pseudoprior_log_density(t, laplace))(jnp.asarray(x, jnp.float32)))  # noqa: E731
    lap_draws = np.asarray(jax.vmap(lambda k: pseudoprior_draw(k, laplace))(
        jax.random.split(jax.random.PRNGKey(seed + 3), num_draws)), np.float64)
    out = {}
    for name, density, from_g in (("laplace", lap_g, lap_draws), ("copula", log_g, draws)):
        at_g, at_post = weights(from_g, density), weights(held, density)
        out[f"{name}_sd"] = float(np.std(at_g))
        out[f"{name}_gap"] = float(np.median(at_post) - np.median(at_g))
        out[f"{name}_k_hat"] = float(pareto_k_hat(jnp.asarray(at_g)))
    out["yeo_johnson_lambdas"] = [float(lam) for lam in lams]
    return out


if __name__ == "__main__":
    main()
