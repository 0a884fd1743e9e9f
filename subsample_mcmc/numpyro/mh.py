r"""``RacingMH``: a NumPyro ``MCMCKernel`` whose MH test is a two-arm race (Eq. 12).

Each step proposes ``x'`` (Gaussian random walk, or a mini-batch Langevin/SGLD move
with its exact forward and reverse densities) in the unconstrained space, then decides
the Metropolis-Hastings test by racing the per-datum log-likelihoods of ``x`` and
``x'`` (Racing-Normal by default; Racing-EBS or adapted lil'UCB as options), reading
the data plate without replacement and stopping as soon as the bound separates the
two arms (Sec. 4 of Chen & Ghahramani 2016).  The decision errs with probability at
most ``delta``.

Warmup (``num_warmup`` steps of ``numpyro.infer.MCMC``):

* the start is a checked posterior mode (``init_strategy="map"``): ``num_restarts``
  mini-batch Adam ascents from NumPyro-style initial points, the best by the full-data
  log posterior, a safeguarded full-data Newton polish, a warning when the restarts end
  at modes of different height or the polished point is not a mode; or a draw from the
  prior (``init_strategy="prior"``); or ``init_params``;
* the step size follows dual averaging (Hoffman & Gelman 2014, NumPyro's
  ``dual_averaging``) toward ``target_accept_prob``, driven by the accept indicator;
* a diagonal inverse mass matrix is initialised from the curvature at the start (the
  proxy's full-data Hessian, or a mini-batch one) and re-estimated from the warmup
  samples between 15% and 50% of warmup (Welford, regularised as in Stan); the step
  size is then re-adapted over the second half.

The kernel state carries ``num_likelihood_evals`` (per-datum log-likelihood
evaluations in that step, race and gradient together), ``accept_prob`` (the accept
indicator), ``mean_accept_prob`` and ``race_stage``; ask for them with
``mcmc.run(..., extra_fields=("num_likelihood_evals", "accept_prob", "race_stage"))``
and ``az.from_numpyro`` puts them in ``sample_stats``.
"""

from __future__ import annotations

import copy
import warnings
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.infer.hmc_util import dual_averaging, welford_covariance
from numpyro.infer.initialization import init_to_mean, init_to_sample, init_to_uniform
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import is_prng_key

from ..kernels.mh import racing_mh_step
from ..kernels.optimize import adam_ascent, adam_schedule, last_finite, log_density_sum, newton_ascent
from ..kernels.cost import evaluation_equivalents
from ..kernels.proxy import TaylorProxy, proxy_per_datum, taylor_proxy
from ..racing import METHODS
from .control import DataSpaceControlVariate
from .model import ModelSubsampler, PlateIndices

__all__ = ["RacingMH", "RacingMHState"]


class RacingMHState(NamedTuple):
    i: jax.Array
    z: dict
    step_size: jax.Array
    inverse_mass_matrix: jax.Array
    accept_prob: jax.Array
    mean_accept_prob: jax.Array
    num_likelihood_evals: jax.Array
    race_stage: jax.Array
    da_state: tuple
    welford_state: tuple
    proxy: Optional[TaylorProxy]
    rng_key: jax.Array


_DA_INIT, _DA_UPDATE = dual_averaging()
_MAX_DRAWS = 100  # initial draws per restart until finite, as NumPyro's find_valid_initial_params
_MODE_TOL = 1.0  # restarts within this many log-posterior units per parameter count as the same mode
_WF_INIT, _WF_UPDATE, _WF_FINAL = welford_covariance(diagonal=True)


class RacingMH(MCMCKernel):
    r"""Racing Metropolis-Hastings for the continuous latent sites of a NumPyro model.

    Args:
        model: a NumPyro model with one data plate (see
            :class:`~subsample_mcmc.numpyro.model.ModelSubsampler` for the contract).
        proposal: ``"random_walk"`` or ``"langevin"`` (SGLD drift from a mini-batch
            gradient, corrected by the racing MH test).
        step_size: initial step size (adapted during warmup when ``adapt_step_size``).
        target_accept_prob: target of the step-size adaptation (default 0.234 for the
            random walk, 0.574 for Langevin -- the optimal-scaling values).
        adapt_step_size, adapt_mass_matrix: warmup adaptation switches.
        method, delta, first_batch, variance: the race (see
            :func:`~subsample_mcmc.racing.best_arm`).
        grad_batch_size: mini-batch size of the Langevin gradient and of the MAP search.
        data_plate: name of the data plate when the model has several candidates.
        init_strategy: where a chain starts when ``run`` gets no ``init_params``:

            * ``"map"`` (default): the mode search below; the chain starts at the mode.
            * ``"prior"``: a draw from the prior (NumPyro's ``init_to_sample``), drawn
              again (up to 100 times, one full-data pass each) until the full-data log
              posterior is finite.  No optimisation moves the start; with
              ``control_variate="taylor"`` the proxy is still expanded around the mode
              found by the search below (its cost is paid as with ``"map"``).

            Mode search (``"map"``, and the Taylor proxy's reference point):
            ``num_restarts`` initial points -- restart 0 at the prior mean (NumPyro's
            ``init_to_mean``), the others drawn uniformly in (-2, 2) in the
            unconstrained space (``init_to_uniform``) -- each drawn again (up to 100
            rounds) until its full-data log posterior is finite; from each, mini-batch
            Adam (``map_steps`` steps at rate 0.05, then ``map_steps`` at a rate decaying
            from 0.01 to 1e-4; restarts vmapped); an ascent that ends where the
            full-data log posterior is not finite (mini-batches cannot see a
            data-dependent support such as ``Uniform(0, theta)``) is moved back along its
            path to the last finite point; the restart with the highest full-data log
            posterior is polished by at most ``newton_steps`` Newton steps, each
            accepted only where the full-data log posterior is finite and higher
            (backtracking, then bisection up to a support boundary when the longer step
            left the support).  At the polished point the full-data gradient ``g`` is
            checked against the Hessian ``H`` (Newton decrement ``g'(-H)^-1 g``).

            Reported: a ``UserWarning`` when restarts ended at lower modes (full-data
            log posterior lower by more than one unit per parameter, and higher than the
            best mode's quadratic bowl predicts at their distance, so not merely
            unconverged: the posterior is multimodal and a higher mode may have been
            missed), or when the polished point is not a mode (decrement above 1, not on
            a support boundary); a ``ValueError`` naming the non-finite term (a latent
            value, a prior or Jacobian term, or an observed site at a data index) when
            the start's log posterior is not finite.  The remedy named in both: more
            restarts, or ``init_params`` (e.g. a draw from a short NUTS run on a subset
            of the data).  With ``init_params`` none of this runs: the chain starts
            there and the Taylor proxy is expanded there.
        num_restarts: initial points of the mode search (default 32).  Cost, per
            chain: ``num_restarts x 2 map_steps x grad_batch_size`` per-datum gradient
            evaluations (independent of N; 32 x 1000 x 256 by default) and
            ``num_restarts`` per-datum log-likelihood evaluations (one full-data pass of
            all restarts together) for the selection, plus one such pass per redraw
            round when initial points had a non-finite log posterior.
        map_steps: Adam steps per phase (constant rate, then decaying) of each restart.
        reward_range: passed to the race (needed by ``"ebs"`` and ``"lil_ucb"``).
        control_variate: ``"taylor"`` (default): a second-order parameter-space Taylor
            proxy around the MAP (:mod:`subsample_mcmc.kernels.proxy`, as NumPyro's
            ``HMCECS.taylor_proxy``); its full-data sums cost one pass over the data at
            ``init`` (and at every ``refresh``).  A
            :class:`~subsample_mcmc.numpyro.DataSpaceControlVariate`: the paper's data-space
            expansion (Eq. 11).  ``None``: race the raw log-likelihoods (then prefer a
            small ``delta``, e.g. 0.01: near-threshold MH decisions err at rate up to
            ``delta`` and a random walk makes many of them).
        newton_steps: at most this many full-data Newton steps polish the best restart
            (each: one gradient-and-Hessian pass over the data and usually one
            log-likelihood pass; it stops early once the Newton decrement is below 1e-3).

    Example:
        >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
        >>> from numpyro.infer import MCMC
        >>> def model(y):
        ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
        ...     with numpyro.plate("data", y.shape[0]):
        ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y)
        >>> y = jax.random.normal(jax.random.PRNGKey(0), (10_000,)) + 1.0
        >>> mcmc = MCMC(RacingMH(model), num_warmup=300, num_samples=300, progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(1), y, extra_fields=("num_likelihood_evals",))
        >>> abs(float(mcmc.get_samples()["mu"].mean()) - 1.0) < 0.1
        True
    """

    sample_field = "z"

    def __init__(
        self,
        model,
        *,
        proposal: str = "random_walk",
        step_size: Optional[float] = None,
        target_accept_prob: Optional[float] = None,
        adapt_step_size: bool = True,
        adapt_mass_matrix: bool = True,
        method: str = "normal",
        delta: float = 0.05,
        first_batch: int = 50,
        variance: str = "pairwise",
        grad_batch_size: int = 256,
        data_plate: Optional[str] = None,
        init_strategy: str = "map",
        map_steps: int = 500,
        reward_range=None,
        control_variate: Optional[str] = "taylor",
        newton_steps: int = 4,
        num_restarts: int = 32,
    ):
        if proposal not in ("random_walk", "langevin"):
            raise ValueError(f"proposal must be 'random_walk' or 'langevin', got {proposal!r}")
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if not (0.0 < float(delta) < 0.5):
            raise ValueError(f"delta must lie in (0, 0.5), got {delta}")
        if control_variate not in (None, "taylor") and not isinstance(control_variate, DataSpaceControlVariate):
            raise ValueError(
                f"control_variate must be None, 'taylor' or a DataSpaceControlVariate, got {control_variate!r}"
            )
        if init_strategy not in ("map", "prior"):
            raise ValueError(f"init_strategy must be 'map' or 'prior', got {init_strategy!r}")
        if int(num_restarts) < 1:
            raise ValueError(f"num_restarts must be >= 1, got {num_restarts}")
        if step_size is not None and not step_size > 0:
            raise ValueError(f"step_size must be > 0, got {step_size}")
        if target_accept_prob is not None and not (0.0 < target_accept_prob < 1.0):
            raise ValueError(f"target_accept_prob must lie in (0, 1), got {target_accept_prob}")
        self.model = model
        self.proposal = proposal
        self._step_size = step_size
        self.target_accept_prob = (
            target_accept_prob if target_accept_prob is not None
            else (0.234 if proposal == "random_walk" else 0.574)
        )
        self.adapt_step_size = adapt_step_size
        self.adapt_mass_matrix = adapt_mass_matrix
        self.race_options = dict(method=method, delta=float(delta), first_batch=int(first_batch),
                                 variance=variance)
        if reward_range is not None:
            self.race_options["reward_range"] = reward_range
        self.grad_batch_size = int(grad_batch_size)
        self.data_plate = data_plate
        self.init_strategy = init_strategy
        self.map_steps = int(map_steps)
        self.control_variate = control_variate
        self.newton_steps = int(newton_steps)
        self.num_restarts = int(num_restarts)
        self._subsampler: Optional[ModelSubsampler] = None
        self._num_warmup = 0
        self._unravel = None

    # -- model plumbing ---------------------------------------------------------------
    def _setup(self, model_args, model_kwargs):
        if self._subsampler is None:
            ms = ModelSubsampler(self.model, model_args, model_kwargs, self.data_plate)
            if ms.discrete_sites:
                raise ValueError(
                    f"RacingMH updates continuous sites only; the model has discrete latent sites "
                    f"{list(ms.discrete_sites)}: use RacingGibbs(inner_kernel=RacingMH(...))"
                )
            if not ms.continuous_sites:
                raise ValueError("the model has no continuous latent site for RacingMH to update")
            if ms.size < self.race_options["first_batch"]:
                raise ValueError(
                    f"the data plate {ms.plate!r} has N={ms.size} points, fewer than "
                    f"first_batch={self.race_options['first_batch']}; lower first_batch"
                )
            if isinstance(self.control_variate, DataSpaceControlVariate):
                self.control_variate.validate(ms, model_args, model_kwargs)
            self._subsampler = ms
            self._costs = self._calibrate_costs(ms, model_args, model_kwargs)
            self._moving_support = _parameter_dependent_support(ms, model_args, model_kwargs)
        return self._subsampler

    def _calibrate_costs(self, ms, model_args, model_kwargs) -> dict:
        """Per-datum costs in likelihood-evaluation units (XLA operation counts, once).

        ``point``: one arm's race reward at one datum (1 without a proxy; a Taylor
        residual ``l_n - h_n`` costs more: nested ``jvp``); ``gradient``: one datum's
        term of the mini-batch gradient; ``proxy``: one datum's gradient and Hessian
        (building or refreshing the proxy).
        """
        proto = {k: ms.prototype_trace[k]["value"] for k in ms.continuous_sites}
        flat, unravel = ravel_pytree(ms.unconstrain(proto))
        idx = jnp.arange(min(256, ms.size))

        def ll(x, i):
            return ms.log_likelihood(ms.constrain(unravel(x)), i, model_args, model_kwargs)

        residual = ll
        if self.control_variate == "taylor":
            d = flat.shape[0]
            prx = TaylorProxy(flat, jnp.zeros((d,), flat.dtype), jnp.zeros((d, d), flat.dtype))

            def residual(x, i):
                return ll(x, i) - proxy_per_datum(ll, prx, x, i)

        def gradient(x, i):
            return jax.grad(lambda t: jnp.sum(residual(t, i)))(x)

        def proxy_terms(x, i):
            return jax.grad(lambda t: jnp.sum(ll(t, i)))(x), jax.hessian(lambda t: jnp.sum(ll(t, i)))(x)

        try:
            return {
                "point": evaluation_equivalents(residual, ll, flat, idx),
                "gradient": evaluation_equivalents(gradient, ll, flat, idx),
                "proxy": evaluation_equivalents(proxy_terms, ll, flat, idx),
            }
        except Exception:  # noqa: BLE001 -- traced model arguments: count one unit each
            return {"point": 1.0, "gradient": 1.0, "proxy": 1.0}

    def _log_prior_fn(self, model_args, model_kwargs):
        ms = self._subsampler

        def fn(flat):
            z = self._unravel(flat)
            return ms.log_prior(ms.constrain(z), model_args, model_kwargs) + ms.log_abs_det_jacobian(z)

        return fn

    def _log_lik_fn(self, model_args, model_kwargs):
        ms = self._subsampler

        def fn(flat, idx):
            return ms.log_likelihood(ms.constrain(self._unravel(flat)), idx, model_args, model_kwargs)

        return fn

    def _data_cv_fn(self):
        if not isinstance(self.control_variate, DataSpaceControlVariate):
            return None
        ms, cv = self._subsampler, self.control_variate

        def fn(x, x_new):
            arms = jax.tree.map(lambda a, b: jnp.stack([a, b]),
                                ms.constrain(self._unravel(x)), ms.constrain(self._unravel(x_new)))
            return cv.for_arms(arms)

        return fn

    def _minibatch_objective(self, model_args, model_kwargs):
        lp, ll = self._log_prior_fn(model_args, model_kwargs), self._log_lik_fn(model_args, model_kwargs)
        n, b = self._subsampler.size, min(self.grad_batch_size, self._subsampler.size)

        def objective(flat, key):
            idx = jax.random.randint(key, (b,), 0, n)  # O(b), not O(N)
            return lp(flat) + (n / b) * jnp.sum(ll(flat, idx))

        return objective

    # -- MCMCKernel API -------------------------------------------------------------------
    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else model_kwargs
        self._setup(model_args, model_kwargs)
        self._num_warmup = int(num_warmup)
        self._vectorized = not is_prng_key(rng_key)
        source = self._start_source(init_params)
        if not self._vectorized:
            state, report = self._init_one(rng_key, init_params, model_args, model_kwargs, report=True)
            self._check_chains(ravel_pytree(state.z)[0][None], [report], model_args, model_kwargs, source)
            return state
        # chain_method="vectorized": one state per key, the step is vmapped in `sample`
        init_axis = None if init_params is None else 0
        states, reports = jax.vmap(lambda k, p: self._init_one(k, p, model_args, model_kwargs, report=True),
                                   in_axes=(0, init_axis))(rng_key, init_params)
        flats = jax.vmap(lambda z: ravel_pytree(z)[0])(states.z)
        per_chain = [None if reports is None else jax.tree.map(lambda v, c=c: v[c], reports)
                     for c in range(rng_key.shape[0])]
        self._check_chains(flats, per_chain, model_args, model_kwargs, source, vectorized=True)
        return states

    def _check_chains(self, flats, reports, model_args, model_kwargs, source, vectorized=False):
        """One full-data pass over all chains' starts; the term-by-term diagnosis only
        for a chain whose log posterior is not finite; then the search reports."""
        if isinstance(flats, jax.core.Tracer):
            return  # inside another kernel's vmap: the race flags non-finite values at run time
        values, _ = self._full_log_posterior(model_args, model_kwargs)
        ms = self._subsampler

        def finite_latents(flat):  # XLA may fold log(exp(u)) = u: check the values too
            leaves = jax.tree.leaves(ms.constrain(self._unravel(flat)))
            return jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in leaves]))

        f, ok = jax.jit(lambda x: (values(x), jax.vmap(finite_latents)(x)))(flats)
        f, ok = np.asarray(f), np.asarray(ok)
        for c in range(flats.shape[0]):
            chain = c if vectorized else None
            if not (np.isfinite(f[c]) and ok[c]):
                self._check_initial_point(flats[c], model_args, model_kwargs, source, chain)
                raise ValueError(f"the log posterior is {f[c]} at the start{'' if chain is None else f' of chain {c}'} "
                                 f"({source}); pass init_params (e.g. a draw from a short NUTS run on a subset of "
                                 "the data)")
            self._check_search(reports[c], model_args, model_kwargs, chain)

    def _start_source(self, init_params):
        if init_params is not None:
            return "init_params"
        if self.init_strategy == "prior":
            return f"init_strategy='prior', up to {_MAX_DRAWS} prior draws"
        return (f"init_strategy='map': the best of {self.num_restarts} restarts, each drawn up to "
                f"{_MAX_DRAWS} times until finite")

    def _init_one(self, rng_key, init_params, model_args, model_kwargs, report=False):
        """One chain's initial state; with ``report``, also the mode search's diagnostics
        (``None`` when no search ran).  Traceable (vmapped over chains)."""
        ms = self._subsampler
        key_init, key_map, key_state = jax.random.split(rng_key, 3)
        if init_params is None:
            proto = {k: ms.prototype_trace[k]["value"] for k in ms.continuous_sites}
            flat, unravel = ravel_pytree(ms.unconstrain(proto))
        else:
            flat, unravel = ravel_pytree({k: jnp.asarray(init_params[k]) for k in ms.continuous_sites})
        self._unravel = unravel
        lp = self._log_prior_fn(model_args, model_kwargs)
        search = None
        if init_params is None and (self.init_strategy == "map" or self.control_variate == "taylor"):
            search = jax.jit(lambda k: self._mode_search(k, model_args, model_kwargs))(key_map)
        if init_params is None:
            if self.init_strategy == "map":
                flat = search["mode"]
            else:  # a prior draw, redrawn until the full-data log posterior is finite
                flat = jax.jit(lambda k: self._finite_draws(
                    k, None, init_to_sample, 1, model_args, model_kwargs)[0][0])(key_init)
        proxy = None
        if search is not None:  # proxy and curvature at the searched mode
            proxy = search["proxy"] if self.control_variate == "taylor" else None
            curvature = _curvature(search)
        elif self.control_variate == "taylor":  # at init_params
            ll = self._log_lik_fn(model_args, model_kwargs)
            proxy = jax.jit(lambda x: taylor_proxy(ll, x, ms.size))(flat)
            curvature = jnp.diagonal(proxy.hess_sum + jax.jit(jax.hessian(lp))(proxy.reference))
        else:
            # diagonal of the mini-batch Hessian at the start, scaled to N
            objective = self._minibatch_objective(model_args, model_kwargs)
            curvature = jnp.diagonal(jax.jit(jax.hessian(objective))(flat, key_map))
        inv_mass = jnp.where(curvature < 0, 1.0 / jnp.maximum(-curvature, 1e-10), 1.0)
        inv_mass = jnp.clip(inv_mass, 1e-12, 1e6)
        d = flat.shape[0]
        step = self._step_size or (2.38 / np.sqrt(d) if self.proposal == "random_walk" else 1.0 * d ** (-1 / 6))
        step = jnp.asarray(step, flat.dtype)
        state = RacingMHState(
            i=jnp.array(0),
            z=unravel(flat),
            step_size=step,
            inverse_mass_matrix=inv_mass.astype(flat.dtype),
            accept_prob=jnp.zeros(()),
            mean_accept_prob=jnp.zeros(()),
            num_likelihood_evals=jnp.array(0, jnp.int32),
            race_stage=jnp.array(0, jnp.int32),
            da_state=_DA_INIT(jnp.log(step)),
            welford_state=_WF_INIT(d),
            proxy=proxy,
            rng_key=key_state,
        )
        if not report:
            return state
        if search is not None:
            search = {k: v for k, v in search.items() if k not in ("proxy", "hessian", "gradient")}
        return state, search

    # -- the start: NumPyro initial points, mini-batch restarts, full-data check --------------
    def _draw(self, key, init_fn, model_args, model_kwargs):
        """A flat unconstrained point from a NumPyro init strategy (``init_to_uniform``,
        ``init_to_median``, ``init_to_sample``), the model run on one datum (O(1) in N)."""
        ms = self._subsampler
        idx = np.zeros((1,), np.int32)
        args, kwargs = ms._slice(idx, model_args, dict(model_kwargs))
        model = handlers.substitute(handlers.seed(ms.model, key), substitute_fn=init_fn)
        model = PlateIndices(model, name=ms.plate, indices=jnp.asarray(idx), size=ms.size)
        tr = handlers.trace(model).get_trace(*args, **kwargs)
        return ravel_pytree(ms.unconstrain({k: tr[k]["value"] for k in ms.continuous_sites}))[0]

    def _full_log_posterior(self, model_args, model_kwargs):
        lp, ll = self._log_prior_fn(model_args, model_kwargs), self._log_lik_fn(model_args, model_kwargs)
        n = self._subsampler.size

        def values(points):
            return log_density_sum(lp, ll, points, n)

        return values, lambda x: values(x[None])[0]

    def _finite_draws(self, key, first_fn, rest_fn, count, model_args, model_kwargs):
        """``count`` points from ``rest_fn`` (the first of them, in the first round, from
        ``first_fn`` when given), each drawn again (at most ``_MAX_DRAWS`` rounds, one
        full-data pass of the ``count`` points per round) until its full-data log
        posterior is finite.  Returns ``(points [count, p], values [count], rounds)``."""
        values, _ = self._full_log_posterior(model_args, model_kwargs)

        def draw_all(k, first_round):
            k0, k1 = jax.random.split(k)
            pts = jax.vmap(lambda kk: self._draw(kk, rest_fn, model_args, model_kwargs))(jax.random.split(k1, count))
            if first_fn is not None:
                first = jax.lax.cond(first_round, lambda: self._draw(k0, first_fn, model_args, model_kwargs),
                                     lambda: pts[0])
                pts = pts.at[0].set(first)
            return pts

        def cond(c):
            return jnp.any(~jnp.isfinite(c[1])) & (c[3] < _MAX_DRAWS)

        def body(c):
            pts, vals, key, r = c
            key, sub = jax.random.split(key)
            new = draw_all(sub, r == 0)
            new_vals = values(new)
            redo = ~jnp.isfinite(vals)
            return (jnp.where(redo[:, None], new, pts), jnp.where(redo, new_vals, vals), key, r + 1)

        shape = jax.eval_shape(lambda k: draw_all(k, True), key)
        init = (jnp.zeros(shape.shape, shape.dtype), jnp.full((count,), -jnp.inf, shape.dtype), key,
                jnp.zeros((), jnp.int32))
        pts, vals, _, rounds = jax.lax.while_loop(cond, body, init)
        return pts, vals, rounds

    def _mode_search(self, key, model_args, model_kwargs):
        """Restarts (vmapped mini-batch Adam), the best by the full-data log posterior,
        safeguarded Newton, gradient/curvature check.  Traceable; one compilation."""
        ms = self._subsampler
        r = self.num_restarts
        n = ms.size
        lp, ll = self._log_prior_fn(model_args, model_kwargs), self._log_lik_fn(model_args, model_kwargs)
        values, value = self._full_log_posterior(model_args, model_kwargs)
        objective = self._minibatch_objective(model_args, model_kwargs)
        key_draw, key_adam = jax.random.split(key)
        starts, f_starts, rounds = self._finite_draws(key_draw, init_to_mean,
                                                      init_to_uniform(radius=2.0), r, model_args, model_kwargs)
        # two Adam phases (constant rate, then decaying), every restart, one compiled loop
        def phase(x, xs):
            rates, k = xs
            return jax.vmap(lambda x0, kk: adam_ascent(objective, x0, kk, rates))(x, jax.random.split(k, r)), None

        ends, _ = jax.lax.scan(phase, starts, (adam_schedule(self.map_steps), jax.random.split(key_adam, 2)))
        f_ends = values(ends)
        # mini-batches cannot see a data-dependent support (Uniform(0, theta)): an ascent
        # that ends where the full-data log posterior is not finite goes back along its
        # path (from the restart's finite initial point) to the last finite point
        off = ~jnp.isfinite(f_ends) & jnp.isfinite(f_starts)
        back, f_back = last_finite(values, starts, ends, f_starts, off)
        ends, f_ends = jnp.where(off[:, None], back, ends), jnp.where(off, f_back, f_ends)
        f_starts = jnp.where(jnp.isfinite(f_starts), f_starts, -jnp.inf)
        f_ends = jnp.where(jnp.isfinite(f_ends), f_ends, -jnp.inf)
        use_end = f_ends >= f_starts
        cand = jnp.where(use_end[:, None], ends, starts)
        f_cand = jnp.where(use_end, f_ends, f_starts)
        best = jnp.argmax(f_cand)
        flat_size = starts.shape[1]

        # one chunk when it fits (the likelihood's Hessian compiled once, not twice)
        chunk = n if n * flat_size <= (1 << 22) else 4096

        def grad_hess(x):
            prx = taylor_proxy(ll, x, n, chunk_size=chunk)
            return prx.grad_sum + jax.grad(lp)(x), prx.hess_sum + jax.hessian(lp)(x), prx

        mode, grad, hess, proxy, info = newton_ascent(value, grad_hess, cand[best], f_cand[best], self.newton_steps)
        # squared Mahalanobis distance of each restart's end from the mode
        delta = cand - mode
        dist2 = -jnp.einsum("ri,ij,rj->r", delta, hess, delta)
        return dict(mode=mode, proxy=proxy, hessian=hess, gradient=grad, restart_values=f_cand,
                    restart_distances=dist2,
                    restart_rounds=rounds, best=best,
                    value=info.value, newton_steps=info.steps, at_boundary=info.at_boundary,
                    decrement=info.decrement, negative_definite=info.negative_definite)

    def _check_search(self, report, model_args, model_kwargs, chain=None):
        """Warnings (or an error) from the mode search's report; nothing when traced."""
        if report is None or any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves(report)):
            return
        rep = {k: np.asarray(v) for k, v in report.items()}
        of_chain = "" if chain is None else f" (chain {chain})"
        role = ("the start" if self.init_strategy == "map" else "the Taylor proxy's reference point")
        if not np.isfinite(rep["value"]):
            # name the non-finite term at the best point the search had
            self._check_initial_point(rep["mode"], model_args, model_kwargs, self._start_source(None), chain)
            raise ValueError(f"the mode search{of_chain} found no point with a finite log posterior; pass "
                             "init_params (e.g. a draw from a short NUTS run on a subset of the data)")
        f, r = rep["restart_values"], self.num_restarts
        top = max(float(np.max(f)), float(rep["value"]))
        gap, dist2 = top - f, rep["restart_distances"]
        # a restart ended at another, lower mode when it is lower than the best by more
        # than _MODE_TOL per parameter and higher than the best mode's quadratic bowl
        # predicts at its distance (gap ~ dist2 / 2 there): not an unconverged ascent
        tol = _MODE_TOL * max(1, int(np.size(rep["mode"])))
        lower = np.flatnonzero(np.isfinite(f) & (gap > tol) & ~(gap >= dist2 / 8))
        if lower.size:
            gaps = ", ".join(f"{g:.4g}" for g in gap[lower])
            warnings.warn(
                f"RacingMH start{of_chain}: {lower.size} of {r} restarts of the mode search ended at lower "
                f"modes (full-data log posterior lower by {gaps}); {role} is the best of them (restart "
                f"{int(rep['best'])}). The posterior may be multimodal and a higher mode may have been missed: "
                "raise num_restarts, or pass init_params (e.g. a draw from a short NUTS run on a subset of "
                "the data).", UserWarning, stacklevel=4)
        dec = float(rep["decrement"])
        if not rep["at_boundary"] and not dec <= 1.0:
            curv = ("negative definite" if rep["negative_definite"]
                    else "not negative definite (not a local maximum, or a flat direction)")
            warnings.warn(
                f"RacingMH start{of_chain}: {role} is not a mode of the full-data log posterior: after "
                f"{int(rep['newton_steps'])} safeguarded Newton steps the gradient is large against the "
                f"curvature (Newton decrement g'(-H)^-1 g = {dec:.4g}, want < 1; the Hessian is {curv}). "
                "Raise map_steps or newton_steps, or pass init_params (e.g. a draw from a short NUTS run "
                "on a subset of the data).", UserWarning, stacklevel=4)

    def _prior_terms(self, z, model_args, model_kwargs):
        """Each log-prior term at unconstrained ``z``: per latent (or observed non-data)
        site, and each transform's log-Jacobian; the model run on one datum."""
        ms = self._subsampler
        values = ms.constrain(z)
        tr = ms._trace(values, jnp.zeros((1,), jnp.int32), model_args, model_kwargs)
        terms = {}
        for name, site in tr.items():
            if site["type"] != "sample" or name in ms.data_sites:
                continue
            if site["is_observed"] or name in ms.latent_sites:
                lp = site["fn"].log_prob(site["value"])
                if site.get("mask") is not None:
                    lp = jnp.where(site["mask"], lp, 0.0)
                terms[f"log prior of site {name!r}"] = jnp.sum(lp)
        for k, u in z.items():
            t = ms.transforms[k]
            terms[f"log-Jacobian of the transform of site {k!r}"] = jnp.sum(t.log_abs_det_jacobian(u, t(u)))
        return terms

    def _check_initial_point(self, flat, model_args, model_kwargs, source="init_params", chain=None):
        """Raise, naming the term, where the log posterior is not finite at ``flat``:
        a latent value, a prior (or Jacobian) term, or an observed site's log-likelihood
        at some data index.  Nothing when traced (vectorised chains inside another
        kernel: the race flags non-finite values at run time)."""
        if isinstance(flat, jax.core.Tracer):
            return
        ms = self._subsampler
        at = f"at the start{'' if chain is None else f' of chain {chain}'} ({source})"
        hint = "pass init_params (e.g. a draw from a short NUTS run on a subset of the data)"
        z = self._unravel(jnp.asarray(flat))
        values = ms.constrain(z)
        for k in ms.continuous_sites:
            u, v = np.asarray(z[k]), np.asarray(values[k])
            if not (np.all(np.isfinite(u)) and np.all(np.isfinite(v))):
                raise ValueError(f"the latent site {k!r} is not finite {at}: value {v} (unconstrained {u}); {hint}")
        terms = jax.jit(lambda z: self._prior_terms(z, model_args, model_kwargs))(z)
        for what, val in terms.items():
            if not np.isfinite(float(val)):
                vals = {k: np.asarray(v) for k, v in values.items()}
                raise ValueError(f"the {what} is {float(val)} {at}, with latent values {vals}; check the "
                                 f"prior's support or {hint}")
        n = ms.size
        chunk = min(1 << 16, n)

        @jax.jit
        def per_site(values, start):
            idx = jnp.minimum(start + jnp.arange(chunk), n - 1)
            tr = ms._trace(values, idx, model_args, model_kwargs)
            return idx, [ms._per_datum(tr[name], idx.shape[0]) for name in ms.data_sites]

        bad_count = {name: 0 for name in ms.data_sites}
        first = {}
        for start in range(0, n, chunk):
            idx, pers = per_site(values, start)
            valid = np.arange(start, start + chunk) < n
            for name, per in zip(ms.data_sites, pers):
                bad = ~np.isfinite(np.asarray(per)) & valid
                if bad.any():
                    bad_count[name] += int(bad.sum())
                    j = int(np.argmax(bad))
                    first.setdefault(name, (int(np.asarray(idx)[j]), float(np.asarray(per)[j])))
        for name in ms.data_sites:
            if bad_count[name]:
                i, v = first[name]
                vals = {k: np.asarray(v_) for k, v_ in values.items()}
                raise ValueError(
                    f"the log-likelihood of observed site {name!r} is not finite {at}: {v} at data index "
                    f"{i} (first of {bad_count[name]} of {n} data points), with latent values {vals}; the "
                    f"data lie outside the likelihood's support there: check the data or {hint}")

    def sample(self, state, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else model_kwargs
        self._setup(model_args, model_kwargs)
        if getattr(self, "_moving_support", None):
            name, kind = self._moving_support
            raise ValueError(
                f"observed site {name!r} has a support that moves with the parameters ({kind}); "
                "a race cannot see the data points a proposal puts outside the support without "
                "reading all of them, so RacingMH would accept impossible proposals. Sample this "
                "model with NUTS/HMC (numpyro.infer.NUTS), or reparameterise it so that the support "
                "of the likelihood does not depend on the latent sites"
            )
        if getattr(self, "_vectorized", False):
            return jax.vmap(self._sample_one, in_axes=(0, None, None))(state, model_args, model_kwargs)
        return self._sample_one(state, model_args, model_kwargs)

    def _sample_one(self, state, model_args, model_kwargs):
        ms = self._subsampler
        if self._unravel is None:
            self._unravel = ravel_pytree(state.z)[1]
        flat, _ = ravel_pytree(state.z)
        key, key_step = jax.random.split(state.rng_key)
        new_flat, info = racing_mh_step(
            key_step, flat,
            log_prior_fn=self._log_prior_fn(model_args, model_kwargs),
            log_likelihood_fn=self._log_lik_fn(model_args, model_kwargs),
            population_size=ms.size, step_size=state.step_size, proposal=self.proposal,
            inverse_mass_diag=state.inverse_mass_matrix, grad_batch_size=min(self.grad_batch_size, ms.size),
            proxy=state.proxy, control_variate_fn=self._data_cv_fn(),
            point_cost=self._costs["point"], gradient_point_cost=self._costs["gradient"], **self.race_options,
        )
        accept = info.accepted.astype(flat.dtype)
        i = state.i + 1
        n = i.astype(flat.dtype)
        mean_accept = state.mean_accept_prob + (accept - state.mean_accept_prob) / n
        step, inv_mass, da, wf = state.step_size, state.inverse_mass_matrix, state.da_state, state.welford_state
        nw = self._num_warmup
        if nw > 0 and (self.adapt_step_size or self.adapt_mass_matrix):
            step, inv_mass, da, wf = self._adapt(state, new_flat, accept)
        return RacingMHState(
            i=i, z=self._unravel(new_flat), step_size=step, inverse_mass_matrix=inv_mass,
            accept_prob=accept, mean_accept_prob=mean_accept,
            num_likelihood_evals=info.num_likelihood_evals.astype(jnp.int32),
            race_stage=info.race_stage.astype(jnp.int32), da_state=da, welford_state=wf,
            proxy=state.proxy, rng_key=key,
        )

    def _adapt(self, state, new_flat, accept):
        nw = self._num_warmup
        t = state.i  # index of this step
        in_warmup = t < nw
        step, inv_mass, da, wf = state.step_size, state.inverse_mass_matrix, state.da_state, state.welford_state
        if self.adapt_step_size:
            da_new = _DA_UPDATE(self.target_accept_prob - accept, da)
            da = jax.tree.map(lambda a, b: jnp.where(in_warmup, a, b), da_new, da)
            step = jnp.where(in_warmup, jnp.exp(da[0]), step)
            step = jnp.where(t == nw - 1, jnp.exp(da[1]), step)  # final: the averaged iterate
        if self.adapt_mass_matrix:
            start, end = (3 * nw) // 20, nw // 2
            collect = (t >= start) & (t < end)
            wf_new = _WF_UPDATE(new_flat, wf)
            wf = jax.tree.map(lambda a, b: jnp.where(collect, a, b), wf_new, wf)
            finish = t == end - 1
            if end - start >= 10:
                cov, _, _ = _WF_FINAL(wf, regularize=True)
                inv_mass = jnp.where(finish, cov, inv_mass)
                step = jnp.where(finish, step, step)
                da = jax.tree.map(lambda a, b: jnp.where(finish, a, b), _DA_INIT(jnp.log(step)), da)
        return step, inv_mass, da, wf

    @property
    def model(self):
        """The model with its subsample plates at full size
        (:class:`~subsample_mcmc.numpyro.model.FullDataModel`; the model itself when it
        has none).  ArviZ's ``from_numpyro`` and ``numpyro.infer.log_likelihood`` replay
        it, so pointwise log-likelihoods of HMCECS-style models cover all N points.
        It compares equal to the model passed to the constructor."""
        from .model import full_data_model

        return full_data_model(self._model)

    @model.setter
    def model(self, model):
        self._model = model

    def postprocess_fn(self, model_args, model_kwargs):
        """Constrained values and the deterministic sites, as NUTS returns them: sites
        inside the data plate (and outside it but depending on the data) come from one
        run of the model on all the data per draw (O(N), as with NUTS), the others from
        a run on one datum (see :meth:`ModelSubsampler.deterministic`)."""
        model_kwargs = {} if model_kwargs is None else model_kwargs
        ms = self._setup(model_args, model_kwargs)

        def fn(z):
            values = ms.constrain(z)
            return {**values, **ms.deterministic(values, model_args, model_kwargs)}

        return fn

    @property
    def refresh_likelihood_evals(self) -> int:
        """What one :meth:`refresh` computes, in likelihood-evaluation units: with the
        Taylor proxy, a gradient and a Hessian at every datum (``N`` times the calibrated
        per-datum cost); 0 without a proxy.  Composite kernels add it to their step's
        ``num_likelihood_evals`` when they refresh."""
        if self.control_variate != "taylor" or self._subsampler is None:
            return 0
        return int(round(self._subsampler.size * self._costs["proxy"]))

    def refresh(self, state, model_args, model_kwargs):
        """Recompute the proxy's full-data sums for new conditioning values (one pass
        over the data); without a proxy nothing cached depends on the arguments."""
        if state.proxy is None:
            return state
        model_kwargs = {} if model_kwargs is None else model_kwargs
        self._setup(model_args, model_kwargs)
        ll = self._log_lik_fn(model_args, model_kwargs)

        def one(st):
            return st._replace(proxy=taylor_proxy(ll, st.proxy.reference, self._subsampler.size))

        return jax.vmap(one)(state) if getattr(self, "_vectorized", False) else one(state)

    def wrap_model(self, wrapper):
        """A copy running on ``wrapper(model)`` (NumPyro's composable-kernel API)."""
        new = copy.copy(self)
        new.model = wrapper(self._model)
        new._subsampler = None
        new._unravel = None
        return new

    def get_diagnostics_str(self, state):
        return "step {:.2e}, acc. {:.2f}, evals/step {}".format(
            float(jnp.mean(state.step_size)), float(jnp.mean(state.mean_accept_prob)),
            int(jnp.mean(state.num_likelihood_evals)),
        )

    @property
    def default_fields(self):
        return ("z",)


def _curvature(search):
    """Diagonal curvature at the searched mode for the initial mass matrix: the full-data
    Hessian's diagonal, or ``-g_i^2`` where that is steeper (a mode on a support
    boundary, where the gradient, not the curvature, sets the posterior's scale: an
    exponential tail of rate ``|g_i|`` has standard deviation ``1/|g_i|``)."""
    h = jnp.diagonal(search["hessian"])
    g2 = jnp.where(search["at_boundary"], search["gradient"] ** 2, 0.0)
    return jnp.minimum(h, -g2)


def _parameter_dependent_support(ms, model_args, model_kwargs):
    """``(site, support)`` of the first observed data site whose support bounds change
    when the latent values move (e.g. ``Uniform(0, theta)``), else ``None``.  Checked on a
    few data points at two latent points (the prototype and a shifted one)."""
    try:
        proto = {k: ms.prototype_trace[k]["value"] for k in ms.continuous_sites}
        unc = ms.unconstrain(proto)
        idx = jnp.arange(min(8, ms.size))
        traces = [ms._trace(ms.constrain({k: v + shift for k, v in unc.items()}), idx, model_args, model_kwargs)
                  for shift in (0.0, 0.7)]
    except Exception:  # noqa: BLE001 -- traced model arguments: nothing to compare
        return None
    for name in ms.data_sites:
        supports = [t[name]["fn"].support for t in traces]
        for attr in ("lower_bound", "upper_bound"):
            if not hasattr(supports[0], attr):
                continue
            a, b = (np.asarray(getattr(sup, attr), np.float64) for sup in supports)
            if a.shape != b.shape or not np.allclose(a, b, equal_nan=True):
                return name, type(supports[0]).__name__.strip("_")
    return None
